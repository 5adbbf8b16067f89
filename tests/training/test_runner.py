import json
import shutil

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_attn.config import RunConfig
from keras_attn.losses import MaskedSparseCrossEntropy
from keras_attn.metrics import MaskedTokenAccuracy
from keras_attn.models import TransformerBackbone
from keras_attn.training.runner import read_history, train

RNG = np.random.default_rng(0)


def _data(count=16, length=7, vocab=20):
    lengths = RNG.integers(2, length + 1, size=count)
    source = np.zeros((count, length), "int32")
    target = np.zeros((count, length + 1), "int32")
    for row, n in enumerate(lengths):
        source[row, :n] = RNG.integers(7, vocab, size=n)
        target[row, 0] = 2
        target[row, 1 : n + 1] = source[row, :n][::-1]
        target[row, n] = 3 if n < length else target[row, n]
    return {"source": source, "target_in": target[:, :-1]}, target[:, 1:]


INPUTS, TARGETS = _data(count=17)


def _small_model(dropout):
    """A model of the Transformer's inputs and outputs with little to trace: the
    target's embedding, a dense layer with dropout, the logits. What most tests
    here check is the runner's and shows with any model; a Transformer's step takes
    seconds to trace (the reference run and the runs that resume it train one)."""
    inputs = {
        name: keras.Input((None,), dtype="int32", name=name) for name in ("source", "target_in")
    }
    hidden = keras.layers.Dense(16, activation="relu")(
        keras.layers.Embedding(20, 16)(inputs["target_in"])
    )
    return keras.Model(inputs, keras.layers.Dense(20)(keras.layers.Dropout(dropout)(hidden)))


def _transformer(dropout):
    return TransformerBackbone(
        20,
        20,
        max_sequence_length=8,
        num_layers=1,
        hidden_dim=16,
        num_heads=2,
        intermediate_dim=32,
        dropout=dropout,
    )


def _job(
    run_dir,
    epochs,
    strategy="one_device",
    devices=None,
    callbacks=(),
    rows=16,
    learning_rate=1e-2,
    model=_small_model,
    wrap=lambda backbone: backbone,
    dropout=0.0,
    **options,
):
    def make_datasets(global_batch):
        data = tf.data.Dataset.from_tensor_slices((INPUTS, TARGETS)).take(rows).batch(global_batch)
        return data, data

    replicas = 2 if strategy == "mirrored" else 1
    options.setdefault("batch_size", 16 // replicas)
    return train(
        RunConfig(
            run_dir=str(run_dir),
            epochs=epochs,
            strategy=strategy,
            devices=devices,
            verbose=0,
            **options,
        ),
        build_model=lambda: wrap(model(dropout)),
        make_datasets=make_datasets,
        compile_model=lambda model, total_steps: model.compile(
            keras.optimizers.Adam(learning_rate, clipnorm=0.05),  # always clips
            MaskedSparseCrossEntropy(label_smoothing=0.1),
            metrics=[MaskedTokenAccuracy()],
        ),
        callbacks=callbacks,
    )


class _CopyAfterEpoch(keras.callbacks.Callback):
    """Copies the run folder, after the given epochs, to `<folder>-epoch<N>` beside it.

    A copy made here is what an interruption at that point leaves: the
    runner calls the callbacks' epoch end after the epoch's backup, best
    weights and history line are written.
    """

    def __init__(self, run_dir, *epochs):
        super().__init__()
        self.run_dir, self.epochs = run_dir, epochs

    def on_epoch_end(self, epoch, logs=None):
        if epoch + 1 in self.epochs:
            shutil.copytree(self.run_dir, self.copy(epoch + 1))

    def copy(self, epoch):
        return self.run_dir.with_name(f"{self.run_dir.name}-epoch{epoch}")


class _CopyAfterStep(keras.callbacks.Callback):
    """Copies the run folder after step `step` of the first epoch to `<folder>-step<N>` beside it.

    A copy made here is what an interruption at that point leaves: the
    runner calls the callbacks' batch end before that step's backup and
    update average are written.
    """

    def __init__(self, run_dir, step):
        super().__init__()
        self.run_dir, self.step = run_dir, step
        self.copy = run_dir.with_name(f"{run_dir.name}-step{step}")

    def on_train_batch_end(self, batch, logs=None):
        if batch + 1 == self.step and not self.copy.exists():
            shutil.copytree(self.run_dir, self.copy)


class _InterruptAtStart(keras.callbacks.Callback):
    def on_train_begin(self, logs=None):
        raise KeyboardInterrupt


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """One device, never interrupted, 6 epochs of the Transformer: the run the others must equal.

    The optimizer's rate is constant, so its first 4 epochs are also a 4-epoch
    run. `after_epoch[n]`: a copy of its folder as epoch n left it.
    """
    run_dir = tmp_path_factory.mktemp("reference") / "run"
    copies = _CopyAfterEpoch(run_dir, 1, 2)
    result = _job(run_dir, epochs=6, model=_transformer, callbacks=[copies])
    result.run_dir = run_dir
    result.after_epoch = {epoch: copies.copy(epoch) for epoch in copies.epochs}
    return result


class _StopAfterEpoch(keras.callbacks.Callback):
    def __init__(self, epochs):
        super().__init__()
        self.epochs = epochs

    def on_epoch_end(self, epoch, logs=None):
        self.model.stop_training = epoch + 1 == self.epochs


# A rate high enough to make the weights jump about: the mean of the last epochs' weights then
# validates best (single epochs at best 2.85 here, means 2.66).
JUMPING_RATE = 0.5


@pytest.fixture(scope="module")
def stopped(tmp_path_factory):
    """At `JUMPING_RATE`, stopped by a callback after epoch 5 of 6: a stopped run, and (its 5
    epochs) a run without checkpoint averaging for
    `test_epoch_averaging_validates_the_mean_of_the_last_epochs`."""
    run_dir = tmp_path_factory.mktemp("stopped")
    result = _job(run_dir, epochs=6, learning_rate=JUMPING_RATE, callbacks=[_StopAfterEpoch(5)])
    result.run_dir = run_dir
    return result


def _history_json(run_dir):
    with open(run_dir / "history.json") as f:
        return json.load(f)


def _assert_same_weights(a, b, atol=1e-6):
    assert len(a) == len(b)
    for x, y in zip(a, b):
        np.testing.assert_allclose(x, y, atol=atol)


@pytest.mark.slow
def test_two_replicas_give_the_losses_of_one_device(tmp_path):
    # 17 rows: a full batch of 16 (8 rows a replica), then a last batch of 1 row, one replica none.
    one = _job(tmp_path / "one", epochs=3, rows=17)
    two = _job(
        tmp_path / "two", epochs=3, strategy="mirrored", devices=["/cpu:0", "/cpu:1"], rows=17
    )
    assert two.strategy.num_replicas_in_sync == 2 and two.global_batch_size == 16
    np.testing.assert_allclose(two.history["loss"], one.history["loss"], atol=1e-4)
    np.testing.assert_allclose(two.history["val_loss"], one.history["val_loss"], atol=1e-4)
    _assert_same_weights(one.model.get_weights(), two.model.get_weights(), atol=1e-4)


@pytest.mark.slow
def test_xla_and_bfloat16_equal_the_plain_float32_run(tmp_path, reference):
    """XLA, then bfloat16 + XLA, on one device (on two workers:
    tests/training/test_fault_tolerance.py).

    (bfloat16 + XLA on two replicas here cost a second XLA compilation, 20-40 s of the suite.)
    """
    # a compiled step equals the plain one
    xla = _job(tmp_path / "xla", epochs=6, model=_transformer, jit_compile=True)
    np.testing.assert_allclose(xla.history["loss"], reference.history["loss"], rtol=1e-4)
    _assert_same_weights(xla.model.get_weights(), reference.model.get_weights(), atol=1e-4)
    bf16 = _job(
        tmp_path / "bf16", epochs=6, model=_transformer, mixed_precision=True, jit_compile=True
    )
    assert {layer.compute_dtype for layer in bf16.model.layers} >= {"bfloat16"}
    # bfloat16 rounds activations to 8 significant bits: the per-epoch losses
    # of this tiny model stay within 2% of float32 (measured on one device: under 1%).
    np.testing.assert_allclose(bf16.history["loss"], reference.history["loss"], rtol=0.02)
    assert bf16.history["loss"][-1] < 0.8 * bf16.history["loss"][0]


def test_a_stopped_run_stays_stopped(stopped):
    assert len(stopped.history["loss"]) == 5 and (stopped.run_dir / "STOPPED").exists()
    again = _job(stopped.run_dir, epochs=6, learning_rate=JUMPING_RATE)
    assert again.history == {} and again.steps == stopped.steps == 5


@pytest.mark.slow
def test_resuming_with_another_global_batch_is_refused(reference):
    from keras_attn.errors import UserError

    with pytest.raises(UserError, match="global batch of 16, this run has 8"):
        _job(reference.run_dir, epochs=6, model=_transformer, batch_size=8)


@pytest.mark.slow
def test_a_backup_of_another_model_is_refused_in_one_line(reference):
    """A run folder of a bare backbone, resumed by a run that trains
    it in a task (as the jobs now do), is refused.
    """
    from keras_attn.errors import UserError
    from keras_attn.models import Seq2SeqLM

    with pytest.raises(
        UserError, match="its saved weights are of another model than this run builds"
    ):
        _job(reference.run_dir, epochs=6, model=_transformer, wrap=Seq2SeqLM)


@pytest.mark.slow
def test_training_resumes_from_its_checkpoint_after_interruption(tmp_path, reference):
    """The folder as the reference's epoch 2 left it (an interruption there
    and the end of a 2-epoch run leave the same): rerun for 2 epochs it
    trains no more; given 6, it trains on as if it had never stopped."""
    shutil.copytree(reference.after_epoch[2], tmp_path, dirs_exist_ok=True)
    steps_per_epoch = reference.steps // 6

    # A finished run resumed again trains no more and keeps the best weights.
    again = _job(tmp_path, epochs=2, model=_transformer)
    assert again.already_finished and again.history == {} and again.steps == 2 * steps_per_epoch
    assert again.best_val_loss == pytest.approx(min(reference.history["val_loss"][:2]))
    assert (tmp_path / "best.weights.h5").exists()

    # Resumed with more epochs, it trains on as if it had never stopped.
    longer = _job(tmp_path, epochs=6, model=_transformer)
    assert longer.initial_epoch == 2 and not longer.already_finished
    assert longer.steps == int(longer.model.optimizer.iterations) == reference.steps
    np.testing.assert_allclose(longer.history["loss"], reference.history["loss"][2:], rtol=1e-5)
    assert longer.best_val_loss == pytest.approx(reference.best_val_loss, rel=1e-5)
    _assert_same_weights(longer.model.get_weights(), reference.model.get_weights())
    assert not list(tmp_path.glob("*.tmp*"))
    # the 2-epoch run's best
    longer.model.load_weights(reference.after_epoch[2] / "best.weights.h5")
    _assert_same_weights(again.model.get_weights(), longer.model.get_weights(), atol=0)

    # history.json holds every epoch once, as the uninterrupted run's does.
    kept, straight = _history_json(tmp_path), _history_json(reference.run_dir)
    # read_history gives the whole run's epochs, where a result holds its process's only.
    assert len(read_history(tmp_path)["loss"]) == 6 and len(longer.history["loss"]) == 4
    assert read_history(tmp_path / "no-run") == {}
    assert kept["steps"] == straight["steps"] == reference.steps
    assert sorted(kept["history"]) == sorted(straight["history"])
    for name, values in straight["history"].items():
        assert len(values) == 6
        np.testing.assert_allclose(kept["history"][name], values, rtol=1e-5)


@pytest.mark.slow
def test_steps_count_the_whole_run_not_the_best_epoch(tmp_path, reference):
    """The best weights file carries its epoch's optimizer; the run's step count must not."""
    shutil.copytree(reference.run_dir, tmp_path, dirs_exist_ok=True)
    shutil.copy(reference.after_epoch[1] / "best.weights.h5", tmp_path)  # as if epoch 1 were best
    again = _job(tmp_path, epochs=6, model=_transformer)
    assert again.already_finished and again.steps == reference.steps == 6
    assert int(again.model.optimizer.iterations) == 1  # what the best weights brought back


def test_each_run_sets_its_own_precision_policy_in_a_shared_process():
    from keras_attn.training.runner import prepare

    prepare(RunConfig(run_dir="unused", mixed_precision=True))
    assert keras.mixed_precision.global_policy().name == "mixed_bfloat16"
    # A float32 run after it in the same process (a notebook, a benchmark) trains in float32.
    prepare(RunConfig(run_dir="unused", mixed_precision=False))
    assert keras.mixed_precision.global_policy().name == "float32"


def _validation_loss(model):
    """The runner's validation loss of `model` on the 16 rows every `_job` validates on."""
    inputs = {name: values[:16] for name, values in INPUTS.items()}
    return float(
        MaskedSparseCrossEntropy(label_smoothing=0.1)(TARGETS[:16], model(inputs, training=False))
    )


@pytest.mark.slow
def test_epoch_averaging_validates_the_mean_of_the_last_epochs(tmp_path, stopped):
    """Checkpoint averaging: each epoch also validates the mean of the last 3 epochs' weights."""
    options = dict(average_epochs=3, learning_rate=JUMPING_RATE)
    copies = _CopyAfterEpoch(tmp_path / "straight", 2)
    straight = _job(tmp_path / "straight", epochs=5, callbacks=[copies], **options)
    averaged = straight.history["val_loss_averaged"]
    assert len(averaged) == 4  # from epoch 2 on, when there are two epochs to average
    # The mean of the files of epochs 3-5 (older ones are deleted) gives the last logged loss.
    files = sorted((tmp_path / "straight" / "epochs").glob("epoch-*.weights.h5"))
    assert [f.name for f in files] == [f"epoch-{e}.weights.h5" for e in (3, 4, 5)]
    model = straight.model
    snapshots = []
    for path in files:
        model.load_weights(path)
        snapshots.append(model.get_weights())
    model.set_weights([np.mean(ws, axis=0) for ws in zip(*snapshots)])
    assert _validation_loss(model) == pytest.approx(averaged[-1], rel=1e-4)
    # The best weights are the best of the single epochs and the means, and are what it returns.
    best = min(averaged)
    assert best < min(straight.history["val_loss"]) and straight.best_val_loss == pytest.approx(
        best
    )
    model.load_weights(tmp_path / "straight" / "best.weights.h5")
    assert _validation_loss(model) == pytest.approx(best, rel=1e-4)
    # Training goes on from each epoch's own weights: the losses are
    # those of a run without averaging.
    np.testing.assert_allclose(straight.history["loss"], stopped.history["loss"], rtol=1e-6)

    # Interrupted after epoch 2 (its folder as epoch 2 left it) and resumed: the mean after the
    # restart includes the epochs before it.
    resumed = _job(copies.copy(2), epochs=5, **options)
    np.testing.assert_allclose(resumed.history["val_loss_averaged"], averaged[1:], rtol=1e-5)
    assert resumed.best_val_loss == pytest.approx(straight.best_val_loss, rel=1e-5)


@pytest.mark.slow
def test_max_updates_cuts_the_last_epoch_and_average_last_is_the_mean_of_the_last_backups(
    tmp_path,
):
    """fairseq's --max-update 11 and average_checkpoints
    --num-update-checkpoints 3, with a backup every 4
    updates: the model is the mean of the weights at updates 4, 8 and
        11 (the last), also after a kill in the
    first epoch and a resume from its backup, and a rerun gives it again."""
    from keras_attn.errors import UserError

    # 8 updates an epoch; dropout: the backup holds where its masks' seeds are
    options = dict(
        batch_size=2, backup_every=4, max_updates=11, average_last=3, learning_rate=0.1, dropout=0.1
    )
    copies = _CopyAfterStep(tmp_path / "straight", 6)
    straight = _job(tmp_path / "straight", epochs=1, callbacks=[copies], **options)
    assert straight.steps == 11 and len(straight.history["loss"]) == 2  # 8 updates, then 3
    files = sorted(
        (tmp_path / "straight" / "updates").glob("update-*.weights.h5"), key=lambda p: len(p.name)
    )
    assert [f.name for f in files] == [
        "update-4.weights.h5",
        "update-8.weights.h5",
        "update-11.weights.h5",
    ]
    assert straight.averaged_updates == (4, 8, 11)  # what the job's last line names
    model = straight.model
    averaged = model.get_weights()
    snapshots = []
    for path in files:
        model.load_weights(path)
        snapshots.append(model.get_weights())
    _assert_same_weights(averaged, [np.mean(ws, axis=0) for ws in zip(*snapshots)])
    # a mean of different weights
    assert not all(np.allclose(a, b) for a, b in zip(snapshots[0], snapshots[2]))
    model.set_weights(averaged)
    loss = MaskedSparseCrossEntropy(label_smoothing=0.1)
    # the runner's validation: batches of 2
    per_batch = [
        float(loss(TARGETS[i : i + 2], model({k: v[i : i + 2] for k, v in INPUTS.items()})))
        for i in range(0, 16, 2)
    ]
    assert straight.history["val_loss_average_last"] == [
        pytest.approx(np.mean(per_batch), rel=1e-4)
    ]
    # Killed after update 6 (the folder as update 6 left it), resumed
    # from the backup of update 4: the same updates, the same mean.
    # Interrupted again before it trains, it hands the interruption on.
    resumed_dir = copies.copy
    with pytest.raises(KeyboardInterrupt):
        _job(resumed_dir, epochs=1, callbacks=[_InterruptAtStart()], **options)
    # Data that no longer reaches the backup's position in the epoch is refused.
    with pytest.raises(UserError, match="4 steps into an epoch, but an epoch now has 2"):
        _job(resumed_dir, epochs=1, rows=4, **options)
    resumed = _job(resumed_dir, epochs=1, **options)
    assert resumed.initial_steps == 4 and resumed.steps == straight.steps == 11
    # The first epoch's metrics count its 4 steps before the backup too.
    np.testing.assert_allclose(resumed.history["loss"], straight.history["loss"], rtol=1e-5)
    np.testing.assert_allclose(
        resumed.history["token_accuracy"], straight.history["token_accuracy"], rtol=1e-5
    )
    for path in files:  # the weights at each update kept
        model.load_weights(path)
        kept = model.get_weights()
        model.load_weights(resumed_dir / "updates" / path.name)
        _assert_same_weights(model.get_weights(), kept)
    _assert_same_weights(resumed.model.get_weights(), averaged, atol=1e-5)
    again = _job(resumed_dir, epochs=1, **options)
    assert again.already_finished and resumed.averaged_updates == again.averaged_updates == (
        4,
        8,
        11,
    )
    _assert_same_weights(again.model.get_weights(), averaged, atol=1e-5)
    # A lower limit is already met; a higher one trains on to it, from
    # update 11 (the finished run's last, kept).
    assert _job(resumed_dir, epochs=1, **dict(options, max_updates=9)).already_finished
    longer = _job(resumed_dir, epochs=1, **dict(options, max_updates=14))
    assert (
        longer.steps == 14
        and not longer.already_finished
        and longer.averaged_updates == (11, 12, 14)
    )
    assert sorted(
        int(f.name.split("-")[1].split(".")[0]) for f in (resumed_dir / "updates").iterdir()
    ) == [11, 12, 14]
