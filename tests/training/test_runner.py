import numpy as np
import keras
import pytest
import tensorflow as tf

from keras_attn.models import transformer
from keras_attn.training import MaskedSparseCrossEntropy, MaskedTokenAccuracy
from keras_attn.training.runner import RunConfig, train

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


def _job(run_dir, epochs, strategy="one_device", devices=None, callbacks=(), rows=16, **options):
    def make_datasets(global_batch):
        data = tf.data.Dataset.from_tensor_slices((INPUTS, TARGETS)).take(rows).batch(global_batch)
        return data, data

    replicas = 2 if strategy == "mirrored" else 1
    options.setdefault("batch_size", 16 // replicas)
    return train(
        RunConfig(run_dir=str(run_dir), epochs=epochs,
                  strategy=strategy, devices=devices, verbose=0, **options),
        build_model=lambda: transformer(20, 20, max_sequence_length=8, num_layers=1, hidden_dim=16,
                                        num_heads=2, intermediate_dim=32, dropout=0.0),
        make_datasets=make_datasets,
        make_optimizer=lambda total_steps: keras.optimizers.Adam(1e-2, clipnorm=0.05),  # always clips
        make_loss=lambda: MaskedSparseCrossEntropy(label_smoothing=0.1),
        make_metrics=lambda: [MaskedTokenAccuracy()],
        callbacks=callbacks,
    )


@pytest.mark.parametrize("rows", [16, 17])  # 17: the last batch has 1 row, one replica none
def test_two_replicas_give_the_losses_of_one_device(tmp_path, rows):
    one = _job(tmp_path / "one", epochs=4, rows=rows)
    two = _job(tmp_path / "two", epochs=4, strategy="mirrored", devices=["/cpu:0", "/cpu:1"], rows=rows)
    assert two.strategy.num_replicas_in_sync == 2 and two.global_batch_size == 16
    np.testing.assert_allclose(two.history["loss"], one.history["loss"], atol=1e-4)
    np.testing.assert_allclose(two.history["val_loss"], one.history["val_loss"], atol=1e-4)
    for a, b in zip(one.model.get_weights(), two.model.get_weights()):
        np.testing.assert_allclose(a, b, atol=1e-4)


@pytest.mark.parametrize("strategy", ["one_device", "mirrored"])
def test_xla_and_bfloat16_work_under_every_local_strategy(tmp_path, strategy):
    devices = ["/cpu:0", "/cpu:1"] if strategy == "mirrored" else None
    reference = _job(tmp_path / "f32", epochs=6)
    xla = _job(tmp_path / "xla", epochs=6, strategy=strategy, devices=devices, jit_compile=True)
    np.testing.assert_allclose(xla.history["loss"], reference.history["loss"], rtol=1e-4)
    bf16 = _job(tmp_path / "bf16", epochs=6, strategy=strategy, devices=devices,
                mixed_precision=True, jit_compile=True)
    assert {layer.compute_dtype for layer in bf16.model.layers} >= {"bfloat16"}
    np.testing.assert_allclose(bf16.history["loss"], reference.history["loss"], rtol=0.05)
    assert bf16.history["loss"][-1] < 0.8 * bf16.history["loss"][0]


class _StopAfterSecondEpoch(keras.callbacks.Callback):
    def on_epoch_end(self, epoch, logs=None):
        self.model.stop_training = epoch == 1


def test_a_stopped_run_stays_stopped(tmp_path):
    stopped = _job(tmp_path, epochs=5, callbacks=[_StopAfterSecondEpoch()])
    assert len(stopped.history["loss"]) == 2 and (tmp_path / "STOPPED").exists()
    again = _job(tmp_path, epochs=5)
    assert again.history == {} and again.steps == stopped.steps == 2


def test_resuming_with_another_global_batch_is_refused(tmp_path):
    from keras_attn.errors import UserError

    _job(tmp_path, epochs=1)
    with pytest.raises(UserError, match="global batch of 16, this run has 8"):
        _job(tmp_path, epochs=2, batch_size=8)


class _Interrupt(keras.callbacks.Callback):
    def on_epoch_end(self, epoch, logs=None):
        if epoch == 1:
            raise KeyboardInterrupt


def test_training_resumes_from_its_checkpoint_after_interruption(tmp_path):
    uninterrupted = _job(tmp_path / "straight", epochs=4)
    with pytest.raises(KeyboardInterrupt):
        _job(tmp_path / "resumed", epochs=4, callbacks=[_Interrupt()])
    resumed = _job(tmp_path / "resumed", epochs=4)
    assert resumed.initial_epoch == 2
    assert len(resumed.history["loss"]) == 2
    np.testing.assert_allclose(resumed.history["loss"], uninterrupted.history["loss"][2:], rtol=1e-5)
    assert int(resumed.model.optimizer.iterations) == int(uninterrupted.model.optimizer.iterations)
    # A finished run resumed again trains no more and keeps the best weights.
    again = _job(tmp_path / "resumed", epochs=4)
    assert again.history == {} and again.best_val_loss == pytest.approx(min(uninterrupted.history["val_loss"]))
    assert (tmp_path / "resumed" / "best.weights.h5").exists()
    assert not list((tmp_path / "resumed").glob("*.tmp*"))


class _InterruptAtStep(keras.callbacks.Callback):
    def on_train_batch_end(self, batch, logs=None):
        if batch == 3:  # the backup after step 3 of the first epoch exists
            raise KeyboardInterrupt


def test_a_run_resumed_mid_epoch_logs_the_whole_epoch(tmp_path):
    steps = dict(batch_size=2, backup_every=1)  # 8 steps an epoch, a backup after each
    uninterrupted = _job(tmp_path / "straight", epochs=2, **steps)
    with pytest.raises(KeyboardInterrupt):
        _job(tmp_path / "resumed", epochs=2, callbacks=[_InterruptAtStep()], **steps)
    resumed = _job(tmp_path / "resumed", epochs=2, **steps)
    assert resumed.steps == uninterrupted.steps == 16
    # The first epoch's metrics count its 3 steps before the backup too.
    np.testing.assert_allclose(resumed.history["loss"], uninterrupted.history["loss"], rtol=1e-5)
    np.testing.assert_allclose(
        resumed.history["token_accuracy"], uninterrupted.history["token_accuracy"], rtol=1e-5
    )


def test_resuming_mid_epoch_on_shorter_data_is_refused(tmp_path):
    from keras_attn.errors import UserError

    with pytest.raises(KeyboardInterrupt):
        _job(tmp_path, epochs=2, callbacks=[_InterruptAtStep()], batch_size=2, backup_every=1)
    with pytest.raises(UserError, match="3 steps into an epoch, but an epoch now has 2"):
        _job(tmp_path, epochs=2, batch_size=2, backup_every=1, rows=4)
