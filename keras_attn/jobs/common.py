"""What every job does around the runner: flag checks, the setup report, the run folder.

A job starts with `start`: it checks its strategy flags and output folders
before any training (`check_strategy_flags`, `check_writable_folder`) and prints
what it chose (`describe_setup`); then it binds its run folder to its training
data and settings (`bind_run_folder`) and, under several workers, lets only the
chief learn vocabularies while the others wait for its files (`wait_for_chief`).
"""

import dataclasses
import hashlib
import json
import os
import tempfile
import time

import tensorflow as tf

from keras_attn import run_folder
from keras_attn.config import flag_name
from keras_attn.errors import UserError
from keras_attn.training.precision import describe_precision
from keras_attn.training.runner import ANOTHER_RUN, prepare
from keras_attn.training.strategy import worker_role
from pipelines.text import write_text_atomically


def start(config, log):
    """What a job does before it reads any data; returns whether this process is the chief.

    Checks the strategy flags, starts the strategy (`runner.prepare`: before
    any other TensorFlow work), logs the setup and checks that the run
    folder and, on the chief, the export folder can be written.
    """
    check_strategy_flags(config)
    strategy = prepare(config)
    chief, _ = worker_role(strategy)
    for line in describe_setup(config, strategy):
        log(line)
    check_writable_folder(config.run_dir, "--run-dir")
    if config.export and chief:
        check_writable_folder(os.path.join(config.export_root, config.name), "--export")
    return chief


def bind_run_folder(config, training_lines, chief=True):
    """Records what the run folder starts with, or refuses a run that changes it.

    `<run_dir>/settings.json` holds a SHA-256 of the training data and the
    `config.bound_settings()`; a rerun with others raises a one-line `UserError`
    instead of resuming the saved model. Only the chief writes the file.

    Args:
        config: the job's config (a `RunConfig` with `bound_settings()`).
        training_lines: the training data as an iterable of strings (each
            hashed with a newline after it).
        chief: whether this process writes the file.
    """
    digest = hashlib.sha256()
    for line in training_lines:
        digest.update(f"{line}\n".encode())
    settings = {
        "training_data": digest.hexdigest(),
        **{k: getattr(config, k) for k in config.bound_settings()},
    }
    path = run_folder.path(config.run_dir, run_folder.SETTINGS)
    if os.path.exists(path):
        # {} if unreadable: every setting then differs
        kept = run_folder.read_settings(config.run_dir)
        # A folder started before a setting existed ran with that setting's default.
        defaults = {field.name: field.default for field in dataclasses.fields(config)}
        kept = {key: kept.get(key, defaults.get(key)) for key in settings}
        fields = {field.name: field for field in dataclasses.fields(config)}
        changed = [
            "other training data"
            if key == "training_data"
            else f"{flag_name(fields[key])} {kept[key]} (now {value})"
            for key, value in settings.items()
            if kept[key] != value
        ]
        if changed:
            raise UserError(
                f"{config.run_dir} was started with other settings: {', '.join(changed)}; "
                f"{ANOTHER_RUN}, or delete {config.run_dir} to start over"
            )
    elif chief:
        write_text_atomically(path, json.dumps(settings, indent=1))


def wait_for_chief(paths, chief, wait_seconds=600, what="vocabulary"):
    """Waits, on a worker that is not the chief, until the chief has written `paths`.

    Learning a vocabulary is not deterministic across processes (ties in
    the trainer), so under several workers only the chief learns it; the
    others read the chief's files from the (shared) run folder.

    Returns:
        Whether all `paths` exist (always, for a worker that is not the chief).
    """
    waited = 0.0
    while not chief and not all(os.path.exists(path) for path in paths):
        if waited >= wait_seconds:
            from pipelines.text import DataError

            raise DataError(
                f"{paths[-1]}: the chief wrote no {what} within {wait_seconds} s; "
                "every worker must see the chief's run folder (put --run-dir on shared storage)"
            )
        time.sleep(0.5)
        waited += 0.5
    return all(os.path.exists(path) for path in paths)


def counted(count, noun):
    """`count` and `noun`, in the plural unless `count` is 1.

    Example:

        >>> counted(1, "validation pair"), counted(0, "empty one"), counted(1200, "image")
        ('1 validation pair', '0 empty ones', '1200 images')
    """
    return f"{count} {noun}{'' if count == 1 else 's'}"


def describe_setup(config, strategy):
    """The lines a job prints first: how, and where, it is going to train."""
    replicas = strategy.num_replicas_in_sync
    backup = tf.train.latest_checkpoint(run_folder.path(config.run_dir, run_folder.CHECKPOINTS))
    state = f"continues from its backup {os.path.basename(backup)}" if backup else "a new run"
    return [
        f"strategy: {_strategy_name(strategy)}, {replicas} replica(s) on "
        f"{', '.join(_devices(strategy))}",
        f"precision: {describe_precision(config.mixed_precision)}",
        "XLA: off (the recurrence's loop trains without it)"
        if config.recurrent
        else f"XLA: {'on' if config.jit_compile else 'off'} "
        "(--jit-compile compiles the train step with XLA)",
        f"global batch: {describe_global_batch(config, replicas, detail=True)}",
        f"run folder: {config.run_dir} ({state})",
    ]


def describe_training(config, result, seconds):
    """The line a job prints when its training ends: what it trained,
    and on a resumed run what this run did.

    Args:
        config: the job's config.
        result: the runner's `TrainingResult`.
        seconds: the job's time in this process.
    """
    return _describe_steps(config, result, seconds) + _describe_average(
        config, result.averaged_updates
    )


def _describe_steps(config, result, seconds):
    if result.already_finished:
        return f"nothing trained: the run had already finished after {result.steps} steps"
    replicas = result.strategy.num_replicas_in_sync
    where = f"on {replicas} replica(s), global batch {describe_global_batch(config, replicas)}"
    if not result.initial_steps:
        return (
            f"trained {result.model.count_params():,} parameters for {result.steps} steps {where}, "
            f"in {seconds:.0f} s"
        )
    return (
        f"trained {result.model.count_params():,} parameters for {result.steps} steps in all "
        f"{where}; this run resumed after {result.initial_steps} and trained "
        f"{result.steps - result.initial_steps} steps in {seconds:.0f} s"
    )


def _describe_average(config, updates):
    """`; the model is the mean of ...`: which kept weights `--average-last` averaged, if it did.

    Example:

    >>> import types
    >>> config = types.SimpleNamespace(average_last=5)
    >>> _describe_average(config, (4, 8, 11))
    '; the model is the mean of the weights at updates 4, 8, 11 (--average-last 5: the run kept 3)'
    >>> _describe_average(config, ())
    ''
    """
    if not updates:
        return ""
    kept = "" if len(updates) == config.average_last else f": the run kept {len(updates)}"
    return (
        f"; the model is the mean of the weights at updates {', '.join(map(str, updates))} "
        f"(--average-last {config.average_last}{kept})"
    )


def describe_global_batch(config, replicas, detail=False):
    """The global batch in words: `64`, or `up to 1400 ids` with a
    token budget (`detail`: per replica too).
    """
    tokens = getattr(config, "batch_tokens", None)
    if tokens:
        return f"up to {tokens * replicas} ids" + (
            f" ({tokens} per replica), at most {config.batch_size * replicas} examples"
            if detail
            else ""
        )
    return f"{config.batch_size * replicas}" + (
        f" ({config.batch_size} per replica)" if detail else ""
    )


def _strategy_name(strategy):
    # its class: CollectiveAllReduceStrategy
    if isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy):
        return f"MultiWorkerMirroredStrategy, this process the {worker_role(strategy)[1]}"
    name = type(strategy).__name__
    return "default (no tf.distribute strategy)" if name.startswith("_Default") else name


def _devices(strategy):
    try:
        return list(strategy.extended.worker_devices)
    except RuntimeError:  # the default strategy: TensorFlow's default device
        gpus = tf.config.list_logical_devices("GPU")
        return [(gpus or tf.config.list_logical_devices("CPU"))[0].name]


def check_tf_config(text):
    """Refuses in one line a `TF_CONFIG` TensorFlow would fail on: not JSON,
    not an object, or a cluster without this process's task in it (`{"cluster":
    {"worker": [...]}, "task": {"type": "worker", "index": i}}`)."""
    try:
        tf_config = json.loads(text)
    except ValueError as error:
        raise UserError(
            f"TF_CONFIG is not valid JSON ({error}); unset it to train as one worker"
        ) from None
    if not isinstance(tf_config, dict):
        raise UserError(
            f'TF_CONFIG must be a JSON object with "cluster" and "task", got {text[:80]}'
        )
    cluster, task = tf_config.get("cluster"), tf_config.get("task")
    if not cluster:
        return
    where = 'TF_CONFIG\'s "task" must name this process\'s place in its "cluster"'
    if not isinstance(cluster, dict) or not all(
        isinstance(hosts, list) for hosts in cluster.values()
    ):
        raise UserError(
            f'TF_CONFIG\'s "cluster" must map task types to lists of host:port, got {cluster}'
        )
    if not isinstance(task, dict) or task.get("type") not in cluster:
        raise UserError(f"{where}: a type among {sorted(cluster)} and an index, got {task}")
    index, hosts = task.get("index", 0), cluster[task["type"]]
    if not isinstance(index, int) or isinstance(index, bool) or not 0 <= index < len(hosts):
        raise UserError(f"{where}: {task['type']} has indexes 0 to {len(hosts) - 1}, got {index!r}")


def check_strategy_flags(config):
    """Refuses in one line a `TF_CONFIG` TensorFlow would fail on (`check_tf_config`), or
    `--devices` this machine lacks.

    (TensorFlow would raise from deep inside, or quietly place the work on
    another device.) Devices are looked up only for `one_device` and
    `mirrored`: `multi_worker` must start before TensorFlow lists devices.
    """
    if config.strategy == "multi_worker":
        # as TensorFlow reads it: set and empty is not JSON
        check_tf_config(os.environ.get("TF_CONFIG", "{}"))
        return
    if not config.devices or config.strategy not in ("one_device", "mirrored"):
        return
    present = {
        (d.device_type, tf.DeviceSpec.from_string(d.name).device_index)
        for d in tf.config.list_logical_devices()
    }
    for name in config.devices:
        try:
            spec = tf.DeviceSpec.from_string(name)
        except ValueError:
            raise UserError(f"--devices {name}: not a device name (e.g. /gpu:0, /cpu:0)") from None
        if (spec.device_type and spec.device_type.upper(), spec.device_index or 0) not in present:
            names = ", ".join(f"/{kind.lower()}:{index}" for kind, index in sorted(present))
            raise UserError(f"--devices {name}: no such device here (there are {names})")


def check_writable_folder(path, flag):
    """Refuses in one line, before any training, a folder that cannot be made or written."""
    existing = os.path.abspath(path)
    while not os.path.exists(existing):
        existing = os.path.dirname(existing)
    if not os.path.isdir(existing):
        raise UserError(f"{path} ({flag}): cannot be a folder, {existing} is a file")
    try:  # a file made and removed: os.access answers yes to root even where nothing can be written
        with tempfile.TemporaryFile(dir=existing):
            pass
    except OSError as error:
        raise UserError(f"{path} ({flag}): cannot write in {existing} ({error.strerror})") from None
