"""The training runner every job uses: strategy, precision, the training loop, backups, resume.

A job hands the runner functions that build its model (a task, or any
Keras model), compile it and make its datasets; the runner calls them
inside the chosen `tf.distribute` strategy, restores the latest backup of
the run folder if there is one, and trains the model with the optimizer,
loss and metrics it was compiled with, as `fit` would:

    result = train(
        RunConfig(run_dir="runs/transformer", epochs=10, batch_size=64),
        build_model=lambda: Seq2SeqLM.from_preset("small", preprocessor),
        make_datasets=lambda global_batch: (train_for_epoch, valid_ds),
        compile_model=lambda model, total_steps: model.compile(learning_rate=1e-3),
    )

The loop is `fit`'s (Keras callbacks, the progress bar, History,
TensorBoard) over the steps of `keras_attn.training.steps`, the same under
every strategy, including MultiWorkerMirroredStrategy where `fit` fails.
It adds what `fit` lacks: backups every `backup_every` steps with the
position in the data, so a run killed at any moment and started again
with the same command continues from its last backup and ends after as
many steps as a run that was never stopped. What it writes in the run
folder: `keras_attn.run_folder`.
"""

import dataclasses
import json
import os
import sys
import time

import keras
import tensorflow as tf

from keras_attn import graph, run_folder
from keras_attn.errors import UserError
from keras_attn.training.averaging import WeightsAverage
from keras_attn.training.checkpoints import (
    Backups,
    Progress,
    random_state,
    save_weights_atomically,
)
from keras_attn.training.steps import TrainingSteps, build_metrics
from keras_attn.training.strategy import get_strategy, worker_role
from pipelines.prefetch import without_autotuning
from pipelines.text import write_text_atomically

# The way out of a run folder that cannot resume. (Another --run-dir alone would export
# the new model as a new version of the old one's name.)
ANOTHER_RUN = (
    "train under another --name (it names both the run folder, runs/<name>, and the export)"
)


@dataclasses.dataclass
class TrainingResult:
    """What `train` gives back.

    Attributes:
        model: `keras.Model`. The model, with the best validation weights (with
            `average_last` > 1: the mean of the last backups by update).
        history: dict. `{metric: [value per epoch]}`, the logs of this process's training.
        strategy: `tf.distribute.Strategy`. The strategy it trained under.
        global_batch_size: int. Examples per step, over all replicas.
        initial_epoch: int. Epochs done before this run (a resumed run's).
        best_val_loss: float. The validation loss of `model`: the lowest of the
            run's epochs (with `average_last` > 1: the mean's); infinite without validation
            data.
        steps: int. Optimizer steps of the whole run.
        is_chief: bool. Whether this process is the chief.
        already_finished: bool. Whether the run folder's run had ended, so nothing was
            trained. Defaults to `False`.
        initial_steps: int. Optimizer steps done before this run (a resumed run's). Defaults
            to 0.
        averaged_updates: tuple of int. The updates whose weights `model` is the mean of
            (`average_last` > 1; fewer than `average_last` when the run
            kept fewer); empty otherwise. Defaults to `()`.
        evaluate: callable. `(dataset=None) -> {name: value}`, the loss and metrics of
            `model` over a dataset of global batches (by default the
            validation data, and a `ValueError` when there is none), computed as every
            epoch's validation is: the same step, batches and strategy, so the same weights
            score the same. Under several workers every worker must call it. Defaults to
            `None`.
    """

    model: keras.Model
    history: dict
    strategy: tf.distribute.Strategy
    global_batch_size: int
    initial_epoch: int
    best_val_loss: float
    steps: int
    is_chief: bool
    already_finished: bool = False
    initial_steps: int = 0
    averaged_updates: tuple = ()
    evaluate: object = None


def prepare(config):
    """Seeds, the precision policy and the strategy; returns the strategy.

    Jobs call it before any other TensorFlow work: MultiWorkerMirroredStrategy
    must set up its collectives first. `train` calls it again (same strategy).

    Args:
        config: `keras_attn.config.RunConfig`. Its `strategy`, `devices`, `seed` and
            `mixed_precision` are used.

    Returns:
        A `tf.distribute.Strategy`, as `get_strategy` gives it.

    Raises:
        ValueError: when `config.strategy` is not a strategy's name.
    """
    strategy = get_strategy(config.strategy, config.devices)
    keras.utils.set_random_seed(config.seed)
    # Both ways: a float32 run after a bfloat16 one in the same process must not inherit its policy.
    keras.mixed_precision.set_global_policy(
        "mixed_bfloat16" if config.mixed_precision else "float32"
    )
    return strategy


def train(
    config,
    build_model,
    make_datasets,
    compile_model=lambda model, total_steps: model.compile(),
    callbacks=(),
):
    """Builds the job under the strategy, resumes, trains, keeps the best weights.

    Args:
        config: `keras_attn.config.RunConfig`. The run's settings (each job's config is one).
        build_model: callable. `() -> keras.Model`, called inside the strategy scope.
        make_datasets: callable. `(global_batch_size) -> (train, valid)`. `train` is
            a function `epoch -> tf.data.Dataset` giving that epoch's
            batches in an order fixed by `epoch` (so that a resumed run
            sees the batches it missed), or one dataset for all epochs (a
            resumed epoch then skips as many batches of a new pass). Batches
            are `(inputs, targets)` of the global batch size and the dataset
            must declare its length (finite cardinality). `valid` is a
            dataset or `None`. Under several workers, an epoch function
            with a `for_worker(worker, workers)` attribute gives each worker
            its own data instead: `for_worker` returns that worker's epoch
            function, of batches of `config.batch_size` (one a replica), as
            many an epoch on every worker (e.g. each reads its own shards);
            otherwise every worker runs the whole pipeline and keeps its
            replicas' rows of each global batch.
        compile_model: callable. `(model, total_steps) -> None`, compiles the model
            (its optimizer, loss and metrics, as for `fit`), where
            `total_steps` is the number of steps of the whole run (for
            schedules that anneal to its end). Defaults to `model.compile()`:
            a task's own defaults.
        callbacks: tuple of `keras.callbacks.Callback`. Extra Keras callbacks. Defaults to
            `()`.

    Returns:
        A `TrainingResult`; `model` holds the best validation weights (the
        last weights when there is no validation data; with `average_last` > 1,
        the mean of the last backups by update).

    Raises:
        ValueError: when the training dataset does not declare its length.
        UserError: when the run folder's backup is of another model, global batch size or
            data, or (under several workers) the workers resumed from different backups or
            one was lost.
    """
    strategy = prepare(config)
    chief, worker = worker_role(strategy)
    global_batch_size = config.batch_size * strategy.num_replicas_in_sync
    train_data, valid_data = make_datasets(global_batch_size)
    epoch_data = train_data if callable(train_data) else (lambda epoch: train_data)
    steps_per_epoch, own_data = _steps_per_epoch(strategy, epoch_data, config)
    with strategy.scope():
        model = build_model()
        compile_model(model, config.max_updates or steps_per_epoch * config.epochs)
        model.optimizer.build(model.trainable_variables)
        build_metrics(model, next(iter(epoch_data(0).take(1))))
        steps = TrainingSteps(model, strategy, config.jit_compile)
        progress = Progress()
        checkpoint = tf.train.Checkpoint(
            model=model,
            optimizer=model.optimizer,
            progress=progress,
            metrics=steps.metric_variables,
            random_state=random_state(model),
        )
    backups = Backups(
        checkpoint,
        run_folder.path(config.run_dir, run_folder.CHECKPOINTS),
        chief,
        worker,
        keep=config.keep_checkpoints,
    )
    best_path = run_folder.path(config.run_dir, run_folder.BEST_WEIGHTS)
    restored = _resume(config, model, backups, best_path, progress, strategy, steps_per_epoch)
    initial_epoch = int(progress.epoch.numpy())
    initial_steps = int(model.optimizer.iterations.numpy())
    config, already_finished = _epochs_left(config, progress, initial_steps, steps_per_epoch)
    if restored and config.verbose != 0:
        print(_resume_message(config, restored, progress, model.optimizer, already_finished))
    valid = _distribute(strategy, valid_data) if valid_data is not None else None
    average, updates = _averages(
        config, model, chief, initial_epoch, initial_steps, valid, already_finished
    )
    history = {}
    if not already_finished:
        callback_list = _callback_list(config, model, callbacks, chief, steps_per_epoch)
        history = _train_epochs(
            config,
            model,
            steps,
            own_data or epoch_data,
            valid,
            steps_per_epoch,
            strategy,
            progress,
            backups,
            callback_list,
            chief,
            best_path,
            average,
            updates,
        )
    # the best weights carry their epoch's optimizer
    trained_steps = int(model.optimizer.iterations.numpy())
    averaged_updates = ()
    # the run's model: the mean of its last backups by update
    if updates is not None and updates.count:
        # (again on a rerun)
        history.update(_use_update_average(updates, model, steps, valid, progress))
        averaged_updates = tuple(sorted(updates.snapshots))
    elif os.path.exists(best_path):  # the chief's; every worker can read the run folder
        model.load_weights(best_path)

    def evaluate(dataset=None):
        if dataset is None and valid is None:
            raise ValueError("The run has no validation data: give `evaluate` a dataset.")
        return steps.evaluate(valid if dataset is None else _distribute(strategy, dataset))

    return TrainingResult(
        model=model,
        history=history,
        strategy=strategy,
        global_batch_size=global_batch_size,
        initial_epoch=initial_epoch,
        best_val_loss=float(progress.best_val_loss.numpy()),
        steps=trained_steps,
        is_chief=chief,
        already_finished=already_finished,
        initial_steps=initial_steps,
        averaged_updates=averaged_updates,
        evaluate=evaluate,
    )


def _averages(config, model, chief, initial_epoch, initial_steps, valid, already_finished):
    """`(average, updates)`: the `WeightsAverage`s of the last epochs (validated against the best;
    none for a run with nothing left to train) and of the last backups by update, each None when
    the config asks for none."""
    average = updates = None
    if config.average_epochs > 1 and valid is not None and not already_finished:
        average = WeightsAverage(
            run_folder.path(config.run_dir, run_folder.EPOCHS),
            "epoch",
            config.average_epochs,
            chief,
        )
        average.restore(model, initial_epoch)
    if config.average_last > 1:
        updates = WeightsAverage(
            run_folder.path(config.run_dir, run_folder.UPDATES),
            "update",
            config.average_last,
            chief,
        )
        updates.restore(model, initial_steps)
    return average, updates


def _steps_per_epoch(strategy, epoch_data, config):
    """`(steps a replica takes an epoch, this worker's own data or None)`."""
    steps_per_epoch = int(epoch_data(0).cardinality())
    own_data = _own_data(strategy, epoch_data, config)
    if own_data is not None:
        steps_per_epoch = int(own_data.epoch(0).cardinality()) // own_data.local_replicas
    if steps_per_epoch < 1:
        raise ValueError(
            "The training dataset must declare its length (finite cardinality), "
            f"got {steps_per_epoch}."
        )
    return steps_per_epoch, own_data


def _resume(config, model, backups, best_path, progress, strategy, steps_per_epoch):
    """Restores the run folder's last backup, if any (its name, or None), refusing in one line one
    of another model, batch or data."""
    try:
        # checked before anything trains; the backup then overwrites them
        if os.path.exists(best_path):
            model.load_weights(best_path)
        restored = backups.restore()
    except (AssertionError, ValueError):  # weights of another model, or of other shapes
        raise UserError(
            f"{config.run_dir}: its saved weights are of another model than this run builds (other "
            f"settings, or an older keras-attn): {ANOTHER_RUN}"
        ) from None
    _check_workers_agree(strategy, model.optimizer.iterations)
    global_batch_size = config.batch_size * strategy.num_replicas_in_sync
    if restored and int(progress.global_batch_size.numpy()) not in (0, global_batch_size):
        raise UserError(
            f"{config.run_dir} was trained with a global batch of "
            f"{int(progress.global_batch_size.numpy())}, this run has {global_batch_size}: "
            f"resume with the same batch size and replica count, or {ANOTHER_RUN}"
        )
    if int(progress.step.numpy()) >= steps_per_epoch:
        raise UserError(
            f"{config.run_dir}: its backup is {int(progress.step.numpy())} steps into an epoch, "
            f"but an epoch now has {steps_per_epoch}: the data changed; {ANOTHER_RUN}"
        )
    progress.global_batch_size.assign(global_batch_size)
    return restored


def _epochs_left(config, progress, initial_steps, steps_per_epoch):
    """`(config, already_finished)`: with `max_updates`, the epochs the updates left take from
    here (the last one cut short) as the config's; and whether the run has nothing left."""
    initial_epoch = int(progress.epoch.numpy())
    if config.max_updates:
        left = max(config.max_updates - initial_steps, 0)
        config = dataclasses.replace(
            config,
            epochs=initial_epoch + -(-(int(progress.step.numpy()) + left) // steps_per_epoch),
        )
    stopped = run_folder.path(config.run_dir, run_folder.STOPPED)
    already_finished = (
        initial_epoch >= config.epochs
        or os.path.exists(stopped)
        or (bool(config.max_updates) and initial_steps >= config.max_updates)
    )
    return config, already_finished


def _callback_list(config, model, callbacks, chief, steps_per_epoch):
    """The callbacks of the epochs: the job's, TensorBoard's (on the chief) and the display."""
    tensorboard = keras.callbacks.TensorBoard(run_folder.path(config.run_dir, run_folder.LOGS))
    display = progress_display(config.verbose)
    return keras.callbacks.CallbackList(
        [*callbacks, *([tensorboard] if chief else []), *([display] if display else [])],
        add_history=True,
        add_progbar=False,
        model=model,
        verbose=config.verbose,
        epochs=config.epochs,
        steps=steps_per_epoch,
    )


def _train_epochs(config, model, steps, epoch_data, valid, steps_per_epoch, strategy, *rest):
    """`_loop`'s history; a worker lost under several hosts ends it in one line."""
    try:
        return _loop(config, model, steps, epoch_data, valid, steps_per_epoch, strategy, *rest)
    except (tf.errors.UnavailableError, tf.errors.AbortedError) as error:
        if not isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy):
            raise
        raise UserError(
            f"training stopped: {_first_line(error.message)} Start the job again on every "
            "worker; it resumes from the last backup."
        ) from None
    finally:
        steps.release()


def _resume_message(config, restored, progress, optimizer, already_finished):
    """What a rerun found in the run folder, in one line."""
    epoch, step = int(progress.epoch.numpy()), int(progress.step.numpy())
    steps = int(optimizer.iterations.numpy())
    if not already_finished:
        return (
            f"resuming from {restored}: epoch {epoch + 1}, {step} steps done in it, {steps} in all"
        )
    more = "--max-updates" if config.max_updates else "--epochs"
    if config.max_updates and steps >= config.max_updates:
        why = f"{steps} of {config.max_updates} updates done"
    elif epoch < config.epochs:  # STOPPED: a callback ended it
        why = f"stopped early after epoch {epoch}"
    else:
        why = f"{epoch} of {config.epochs} epochs done"
    return (
        f"{config.run_dir} had already finished ({why}, {steps} steps): nothing to train "
        f"(more {more} trains on; delete the folder to start over)"
    )


def progress_display(verbose):
    """The callback that shows training progress for a `RunConfig.verbose` value.

    Args:
        verbose: str or int. One of `"auto"` (1 on a terminal, else 2), 0 (no display), 1 (a
            progress bar), 2 (one line per epoch).

    Returns:
        A `ProgressBar`, an `EpochLines`, or `None` for 0.
    """
    if verbose == "auto":
        verbose = 1 if _is_terminal(sys.stdout) else 2
    return {0: None, 1: ProgressBar(), 2: EpochLines()}[verbose]


def _is_terminal(stream):
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # no isatty, or closed
        return False


class ProgressBar(keras.callbacks.ProgbarLogger):
    """Keras's progress bar, with no time estimate from the first step.

    The first step of a process compiles the step function (seconds to
    minutes), so an estimate from its time is far too long: the bar says
    "compiling" until the second step and estimates from the steps after
    the first it saw.
    """

    def __init__(self):
        super().__init__()
        self._said_compiling = False

    def on_epoch_begin(self, epoch, logs=None):
        super().on_epoch_begin(epoch, logs)
        if self.verbose == 1 and not self._said_compiling:
            print("compiling the train step...", end="", flush=True)  # the bar overwrites it
            self._said_compiling = True

    def _maybe_init_progbar(self):
        if self.progbar is None:
            self.progbar = Progbar(
                target=self.target, verbose=self.verbose, unit_name="step", stateless_metrics=set()
            )


class Progbar(keras.utils.Progbar):
    """A `Progbar` that times steps from its first update on, not from its creation.

    Takes the arguments of `keras.utils.Progbar`.
    """

    _first = None  # (step, time) of the first update, which is not shown

    def update(self, current, values=None, finalize=None):
        if self._first is None:
            self._first = (current, time.time())
            self._last_update = self._first[1]  # within the display interval: not shown
        super().update(current, values, finalize)

    def _estimate_step_duration(self, current, now):
        first_step, first_time = self._first or (0, self._start)
        if current > first_step:
            return (now - first_time) / (current - first_step)
        return super()._estimate_step_duration(current, now)


class EpochLines(keras.callbacks.Callback):
    """One line per epoch, for logs that are not a terminal.

    `epoch 2/8 - 235 steps in 31 s (132 ms/step) - loss: 2.3012 - val_loss: 2.1034`
    """

    def on_epoch_begin(self, epoch, logs=None):
        self._started, self._steps = time.time(), 0

    def on_train_batch_end(self, batch, logs=None):
        self._steps += 1

    def on_epoch_end(self, epoch, logs=None):
        seconds = time.time() - self._started
        line = f"epoch {epoch + 1}/{self.params['epochs']} - {self._steps} steps in {seconds:.0f} s"
        if self._steps:
            line += f" ({1000 * seconds / self._steps:.0f} ms/step)"
        for name, value in (logs or {}).items():
            line += f" - {name}: {float(value):.4f}"
        print(line, flush=True)


def _loop(
    config,
    model,
    steps,
    epoch_data,
    valid,
    steps_per_epoch,
    strategy,
    progress,
    backups,
    callbacks,
    chief,
    best_path,
    average=None,
    updates=None,
):
    """`fit`'s epoch loop over `steps`, with backups; returns the History dict.

    `valid` is the distributed validation dataset, or None. With
    `config.max_updates` the last epoch ends at that update. `updates`
    (a `WeightsAverage` by update, or None) keeps the weights every
    `config.backup_every` updates and at the run's last.

    A backup is written every `config.backup_every` steps within an epoch
    and after each epoch (after validation, before the callbacks' epoch end,
    so an interruption there loses nothing). A callback that sets
    `model.stop_training` (e.g. EarlyStopping) ends the run for good: the
    file `STOPPED` in the run folder tells a rerun not to train on.
    """
    model.stop_training = False
    callbacks.on_train_begin()
    for epoch in range(int(progress.epoch.numpy()), config.epochs):
        callbacks.on_epoch_begin(epoch)
        done = int(progress.step.numpy())  # > 0 only when resuming mid-epoch
        if not done:  # else the backup's metrics: those of the epoch's steps before it
            steps.reset_metrics()
        if isinstance(epoch_data, _OwnData):
            batches = iter(epoch_data.distributed(epoch, done))
        else:
            batches = iter(_distribute(strategy, epoch_data(epoch).skip(done)))
        update = int(steps.optimizer.iterations.numpy())
        last = (
            min(steps_per_epoch, done + config.max_updates - update)
            if config.max_updates
            else steps_per_epoch
        )
        logs = {}
        for step in range(done, last):
            callbacks.on_train_batch_begin(step)
            logs = steps.train(batches)
            callbacks.on_train_batch_end(step, logs)
            done, update = step + 1, update + 1
            if updates is not None and (
                update % config.backup_every == 0 or (epoch + 1 == config.epochs and done == last)
            ):
                updates.add(model, update)  # every backup_every updates over the run, and its last
            if _stopping(model, strategy):
                break
            if config.backup_every and done % config.backup_every == 0 and done < last:
                progress.step.assign(done)
                backups.save(update)
        logs = {name: float(value) for name, value in logs.items()}
        if valid is not None:
            logs.update({f"val_{name}": value for name, value in steps.evaluate(valid).items()})
        if logs.get("val_loss") is not None:
            _keep_if_best(logs["val_loss"], model, progress, chief, best_path)
        finished = done == last
        if average is not None and finished:
            logs.update(
                _validate_average(
                    average, model, epoch + 1, steps, valid, progress, chief, best_path
                )
            )
        progress.epoch.assign(epoch + 1 if finished else epoch)
        progress.step.assign(0 if finished else done)
        backups.save(int(steps.optimizer.iterations.numpy()))
        if chief:
            _append_history(config.run_dir, logs, int(steps.optimizer.iterations.numpy()))
        callbacks.on_epoch_end(epoch, logs)
        if _stopping(model, strategy):
            if chief:
                write_text_atomically(
                    run_folder.path(config.run_dir, run_folder.STOPPED), f"epoch {epoch + 1}\n"
                )
            break
    callbacks.on_train_end()
    history = next(c for c in callbacks.callbacks if isinstance(c, keras.callbacks.History))
    return history.history


def _validate_average(average, model, epoch, steps, valid, progress, chief, best_path):
    """Keeps the epoch's weights, validates the mean of the last
    epochs; the best may be that mean.
    """
    average.add(model, epoch)
    if average.count < 2:
        return {}
    own = average.use_mean(model)
    val_loss = steps.evaluate(valid)["loss"]
    _keep_if_best(val_loss, model, progress, chief, best_path)
    model.set_weights(own)
    return {"val_loss_averaged": val_loss}


def _use_update_average(updates, model, steps, valid, progress):
    """Makes the model the mean of the last backups by update and validates it (`best.weights.h5`
    stays the best epoch's: a rerun without averaging gets those)."""
    updates.use_mean(model)
    if valid is None:
        return {}
    val_loss = steps.evaluate(valid)["loss"]
    progress.best_val_loss.assign(val_loss)  # the result's, not backed up
    return {"val_loss_average_last": [val_loss]}


def _keep_if_best(val_loss, model, progress, chief, best_path):
    """Makes the model's weights the best ones when `val_loss` is the lowest so far."""
    if val_loss < progress.best_val_loss.numpy():
        progress.best_val_loss.assign(val_loss)
        if chief:
            save_weights_atomically(model, best_path)


def _stopping(model, strategy):
    """`model.stop_training`, agreed by every worker (any worker's stop stops all)."""
    if not isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy):
        return bool(model.stop_training)
    votes = _sum_over_replicas(strategy, tf.constant(float(bool(model.stop_training)), tf.float64))
    model.stop_training = bool(votes > 0)
    return model.stop_training


@graph.function
def _sum_over_replicas(strategy, value):
    """`value` summed over every replica of every worker.

    A collective: every worker must call it at the same point. In a
    `tf.function`, as TensorFlow warns that running a strategy eagerly is slow.
    """
    return strategy.reduce("SUM", strategy.run(lambda: tf.identity(value)), axis=None)


@dataclasses.dataclass
class _OwnData:
    """This worker's own training data: `epoch(e)` gives its batches of epoch `e`, one a replica."""

    strategy: tf.distribute.Strategy
    epoch: object
    local_replicas: int

    def distributed(self, epoch, done):
        """Epoch `epoch` after its first `done` steps, fed to this worker's replicas."""
        return self.strategy.distribute_datasets_from_function(
            lambda context: without_autotuning(self.epoch(epoch).skip(done * self.local_replicas))
        )


def _own_data(strategy, epoch_data, config):
    """`_OwnData` when several workers each read their own data (`for_worker`), else None."""
    for_worker = getattr(epoch_data, "for_worker", None)
    resolver = getattr(strategy, "cluster_resolver", None)
    if for_worker is None or not isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy):
        return None
    cluster = resolver.cluster_spec().as_dict()
    tasks = [
        (kind, index) for kind in ("chief", "worker") for index in range(len(cluster.get(kind, [])))
    ]
    if len(tasks) < 2:
        return None
    worker = tasks.index((resolver.task_type, int(resolver.task_id or 0)))
    if config.verbose:
        print(
            f"input: each of {len(tasks)} workers reads its own part of the training data (this "
            f"one: {worker})"
        )
    return _OwnData(
        strategy, for_worker(worker, len(tasks)), strategy.num_replicas_in_sync // len(tasks)
    )


def _distribute(strategy, dataset):
    options = tf.data.Options()
    # Every worker runs the pipeline and keeps its replicas' rows of each
    # global batch (TensorFlow's DATA sharding), so the batches, and the
    # steps, are those of one process with the same global batch.
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
    # The loop drops each epoch's iterator before its end; an epoch function
    # of the caller's may not come from a pipeline of ours (pipelines/prefetch.py).
    return strategy.experimental_distribute_dataset(
        without_autotuning(dataset).with_options(options)
    )


def _check_workers_agree(strategy, step):
    """Fails clearly when workers restored different backups (no shared run folder)."""
    if not isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy):
        return
    value = tf.cast(step, tf.float64)
    total = _sum_over_replicas(strategy, value)
    if float(total) != float(value) * strategy.num_replicas_in_sync:
        raise UserError(
            f"this worker resumed at step {int(value)} but others did not: every worker "
            "must see the chief's run folder (put --run-dir on shared storage)"
        )


def _first_line(message):
    """The line of a TensorFlow error that says what happened."""
    lines = [line.strip() for line in message.splitlines() if line.strip()]
    for line in lines:
        if "unhealthy" in line or "heartbeat" in line:
            return line
    return lines[0] if lines else "a worker failed."


def read_history(run_dir):
    """`{metric: [value per epoch]}` of every epoch the run folder has trained, by any process.

    `TrainingResult.history` holds only the epochs of the process that
    returned it; a resumed or finished run's whole history is here.

    Args:
        run_dir: str. The run folder.

    Returns:
        A dict of lists, by metric name; `{}` before the first epoch ends.
    """
    path = run_folder.path(run_dir, run_folder.HISTORY)
    if not os.path.exists(path):
        return {}
    with open(path) as f:
        return json.load(f)["history"]


def _append_history(run_dir, logs, steps):
    """Adds one epoch's logs to `<run_dir>/history.json`, atomically."""
    path = run_folder.path(run_dir, run_folder.HISTORY)
    history = read_history(run_dir)
    for name, value in logs.items():
        history.setdefault(name, []).append(value)
    write_text_atomically(path, json.dumps({"steps": steps, "history": history}, indent=1))
