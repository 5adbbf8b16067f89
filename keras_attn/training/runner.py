"""The training runner every job uses: strategy, precision, fit, checkpoints, resume.

A job hands the runner functions that build its model, optimizer, loss,
metrics and datasets; the runner creates them inside the chosen
`tf.distribute` strategy, restores the latest checkpoint of the run folder
if there is one, and trains with `model.fit`:

    result = train(
        RunConfig(run_dir="runs/transformer", epochs=10, batch_size=64),
        build_model=lambda: transformer(8000, 8000, preset="small"),
        make_datasets=lambda global_batch: (train_ds, valid_ds),
        make_optimizer=lambda total_steps: keras.optimizers.Adam(1e-3),
        make_loss=lambda: MaskedSparseCrossEntropy(0.1),
    )

Run folder layout:
    checkpoints/        tf.train.CheckpointManager: model, optimizer, epoch
    best.weights.h5     the weights with the lowest validation loss
    logs/               TensorBoard
"""

import dataclasses
import os

import keras
import tensorflow as tf

from keras_attn.training.strategy import get_strategy


@dataclasses.dataclass
class RunConfig:
    """What the runner needs to know, beyond the job itself.

    Attributes:
        run_dir: folder for checkpoints, best weights and logs. Running the
            same command again resumes from its latest checkpoint.
        epochs: total epochs (including those already done when resuming).
        batch_size: examples per replica; the global batch is this times the
            number of replicas.
        strategy: `"auto"`, `"one_device"`, `"mirrored"` or `"multi_worker"`.
        devices: devices for `one_device` / `mirrored`.
        mixed_precision: train under the `mixed_bfloat16` policy.
        jit_compile: compile the train step with XLA.
        seed: seeds Python, NumPy and TensorFlow.
        verbose: Keras progress bar mode (`"auto"`, 0, 1 or 2).
        keep_checkpoints: how many epoch checkpoints to keep.
    """

    run_dir: str
    epochs: int = 10
    batch_size: int = 64
    strategy: str = "auto"
    devices: list = None
    mixed_precision: bool = False
    jit_compile: bool = False
    seed: int = 0
    verbose: object = "auto"
    keep_checkpoints: int = 2


@dataclasses.dataclass
class TrainingResult:
    model: keras.Model
    history: dict
    strategy: tf.distribute.Strategy
    global_batch_size: int
    initial_epoch: int
    best_val_loss: float


def train(
    config,
    build_model,
    make_datasets,
    make_optimizer,
    make_loss,
    make_metrics=lambda: [],
    callbacks=(),
):
    """Builds the job under the strategy, resumes, fits, keeps the best weights.

    Args:
        config: a `RunConfig`.
        build_model: `() -> keras.Model`, called inside the strategy scope.
        make_datasets: `(global_batch_size) -> (train, valid)` tf.data
            datasets of `(inputs, targets)` batched to the global batch;
            `valid` may be `None`.
        make_optimizer: `(total_steps) -> keras.optimizers.Optimizer`, where
            `total_steps` is the number of steps of the whole run (for
            schedules that anneal to its end).
        make_loss: `() -> keras.losses.Loss`.
        make_metrics: `() -> list` of metrics.
        callbacks: extra Keras callbacks.

    Returns:
        A `TrainingResult`; `model` holds the best validation weights (the
        last weights when there is no validation data).
    """
    keras.utils.set_random_seed(config.seed)
    if config.mixed_precision:
        keras.mixed_precision.set_global_policy("mixed_bfloat16")
    strategy = get_strategy(config.strategy, config.devices)
    global_batch_size = config.batch_size * strategy.num_replicas_in_sync
    train_data, valid_data = make_datasets(global_batch_size)
    steps_per_epoch = int(train_data.cardinality())
    if steps_per_epoch < 1:
        raise ValueError(
            "The training dataset must declare its length (finite cardinality), "
            f"got {steps_per_epoch}."
        )

    with strategy.scope():
        model = build_model()
        optimizer = make_optimizer(steps_per_epoch * config.epochs)
        model.compile(
            optimizer=optimizer,
            loss=make_loss(),
            metrics=make_metrics(),
            jit_compile=config.jit_compile,
        )
        optimizer.build(model.trainable_variables)
        progress = _Progress()
        checkpoint = tf.train.Checkpoint(model=model, optimizer=optimizer, progress=progress)
    manager = tf.train.CheckpointManager(
        checkpoint,
        os.path.join(config.run_dir, "checkpoints"),
        max_to_keep=config.keep_checkpoints,
    )
    if manager.latest_checkpoint:
        checkpoint.restore(manager.latest_checkpoint).assert_existing_objects_matched()
    initial_epoch = int(progress.epoch.numpy())
    best_path = os.path.join(config.run_dir, "best.weights.h5")

    history = {}
    if initial_epoch < config.epochs:
        fit = model.fit(
            train_data,
            validation_data=valid_data,
            epochs=config.epochs,
            initial_epoch=initial_epoch,
            verbose=config.verbose,
            shuffle=False,  # tf.data pipelines shuffle themselves
            callbacks=[
                _EpochCheckpoint(manager, progress, best_path),
                keras.callbacks.TensorBoard(os.path.join(config.run_dir, "logs")),
                *callbacks,
            ],
        )
        history = fit.history
    if os.path.exists(best_path):
        model.load_weights(best_path)
    return TrainingResult(
        model=model,
        history=history,
        strategy=strategy,
        global_batch_size=global_batch_size,
        initial_epoch=initial_epoch,
        best_val_loss=float(progress.best_val_loss.numpy()),
    )


class _Progress(tf.Module):
    """Epochs done and the best validation loss, saved with each checkpoint."""

    def __init__(self):
        super().__init__()
        self.epoch = tf.Variable(0, dtype=tf.int64, trainable=False)
        self.best_val_loss = tf.Variable(float("inf"), dtype=tf.float64, trainable=False)


class _EpochCheckpoint(keras.callbacks.Callback):
    """Saves a checkpoint after every epoch and the best weights atomically."""

    def __init__(self, manager, progress, best_path):
        super().__init__()
        self.manager = manager
        self.progress = progress
        self.best_path = best_path

    def on_epoch_end(self, epoch, logs=None):
        logs = logs or {}
        val_loss = logs.get("val_loss")
        if val_loss is not None and val_loss < self.progress.best_val_loss.numpy():
            self.progress.best_val_loss.assign(val_loss)
            save_weights_atomically(self.model, self.best_path)
        self.progress.epoch.assign(epoch + 1)
        self.manager.save()


def save_weights_atomically(model, path):
    """Writes `model`'s weights to `path` through a temporary file and a rename."""
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    temporary = path + ".tmp.weights.h5"
    model.save_weights(temporary)
    os.replace(temporary, path)
