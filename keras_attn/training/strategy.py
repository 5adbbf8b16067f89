"""Choosing a `tf.distribute` strategy by name."""

import functools
import json
import socket

import tensorflow as tf

STRATEGIES = ("auto", "one_device", "mirrored", "multi_worker")  # `get_strategy`'s names


def get_strategy(name="auto", devices=None):
    """Returns the `tf.distribute.Strategy` named `name`.

    Args:
        name: str. One of `"auto"` (MirroredStrategy over all local GPUs when there are
            any, else the default strategy), `"one_device"` (the first of
            `devices`, default `/cpu:0`, or `/gpu:0` when there is a GPU),
            `"mirrored"` (MirroredStrategy over `devices`, default all local
            GPUs or the CPU), or `"multi_worker"` (MultiWorkerMirroredStrategy
            configured by the `TF_CONFIG` environment variable). Defaults to `"auto"`.
        devices: list of str or `None`. Device names such as `["/cpu:0", "/cpu:1"]`, for
            `"one_device"` and `"mirrored"`. Defaults to `None`.

    Returns:
        A `tf.distribute.Strategy`; `strategy.num_replicas_in_sync` is the replica count.

    Raises:
        ValueError: when `name` is not one of those.
    """
    if name not in STRATEGIES:
        raise ValueError(f"--strategy must be one of {STRATEGIES}, got {name!r}.")
    if name == "multi_worker":  # before anything starts TensorFlow's runtime
        return _multi_worker()
    gpus = tf.config.list_logical_devices("GPU")
    if name == "auto":
        if gpus:
            return _mirrored(tuple(gpu.name for gpu in gpus))
        return tf.distribute.get_strategy()
    if name == "one_device":
        default = "/gpu:0" if gpus else "/cpu:0"
        return tf.distribute.OneDeviceStrategy(devices[0] if devices else default)
    return _mirrored(tuple(devices or ()))


@functools.cache
def _multi_worker():
    # One per process: it sets up the cluster's collectives, which must
    # happen once and before any other TensorFlow work.
    return tf.distribute.MultiWorkerMirroredStrategy()


def worker_role(strategy):
    """`(is_chief, name)` of this process in `strategy`'s cluster.

    The chief is the `chief` task, or worker 0 when the cluster has no
    chief; a strategy without a cluster (one process) is its own chief.

    Args:
        strategy: `tf.distribute.Strategy`. The run's strategy.

    Returns:
        A tuple of a bool and a str: `(True, "chief")`, or `(False, "worker-1")` and so on.
    """
    resolver = getattr(strategy, "cluster_resolver", None)
    cluster = resolver.cluster_spec().as_dict() if resolver is not None else {}
    if not cluster or resolver.task_type is None:
        return True, "chief"
    task_type, task_id = resolver.task_type, int(resolver.task_id or 0)
    chief = task_type == "chief" or (
        "chief" not in cluster and task_type == "worker" and task_id == 0
    )
    return chief, "chief" if chief else f"{task_type}-{task_id}"


def local_cluster(workers):
    """`TF_CONFIG` values for `workers` worker processes on this machine.

    For trying multi-worker training on one host (tests, benchmarks); the
    ports are free ones, picked now, on 127.0.0.1.

    Args:
        workers: int. The number of worker processes.

    Returns:
        One JSON string per worker: start worker `i` with
        `TF_CONFIG=local_cluster(n)[i]` in its environment.

    Example:
        >>> configs = local_cluster(2)
        >>> json.loads(configs[1])["task"]
        {'type': 'worker', 'index': 1}
    """
    sockets = [socket.socket() for _ in range(workers)]
    for each in sockets:
        each.bind(("127.0.0.1", 0))
    addresses = [f"127.0.0.1:{each.getsockname()[1]}" for each in sockets]
    for each in sockets:
        each.close()
    return [
        json.dumps({"cluster": {"worker": addresses}, "task": {"type": "worker", "index": index}})
        for index in range(workers)
    ]


@functools.cache
def _mirrored(devices):
    # One MirroredStrategy per device set and process: two of them hand out
    # the same collective instance keys, and models of different shapes
    # trained under both then collide ("Shape mismatch in the collective").
    return tf.distribute.MirroredStrategy(list(devices) or None)
