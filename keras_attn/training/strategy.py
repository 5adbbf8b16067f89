"""Choosing a `tf.distribute` strategy by name."""

import functools

import tensorflow as tf

STRATEGIES = ("auto", "one_device", "mirrored", "multi_worker")


def get_strategy(name="auto", devices=None):
    """Returns the `tf.distribute.Strategy` named `name`.

    Args:
        name: `"auto"` (MirroredStrategy over all local GPUs when there are
            any, else the default strategy), `"one_device"` (the first of
            `devices`, default `/cpu:0`, or `/gpu:0` when there is a GPU),
            `"mirrored"` (MirroredStrategy over `devices`, default all local
            GPUs or the CPU), or `"multi_worker"` (MultiWorkerMirroredStrategy
            configured by the `TF_CONFIG` environment variable).
        devices: device names such as `["/cpu:0", "/cpu:1"]`.

    Returns:
        A strategy; `strategy.num_replicas_in_sync` is the replica count.
    """
    if name not in STRATEGIES:
        raise ValueError(f"--strategy must be one of {STRATEGIES}, got {name!r}.")
    gpus = tf.config.list_logical_devices("GPU")
    if name == "auto":
        if gpus:
            return tf.distribute.MirroredStrategy([gpu.name for gpu in gpus])
        return tf.distribute.get_strategy()
    if name == "one_device":
        default = "/gpu:0" if gpus else "/cpu:0"
        return tf.distribute.OneDeviceStrategy(devices[0] if devices else default)
    if name == "mirrored":
        return _mirrored(tuple(devices or ()))
    return tf.distribute.MultiWorkerMirroredStrategy()


@functools.cache
def _mirrored(devices):
    # One MirroredStrategy per device set and process: two of them hand out
    # the same collective instance keys, and models of different shapes
    # trained under both then collide ("Shape mismatch in the collective").
    return tf.distribute.MirroredStrategy(list(devices) or None)
