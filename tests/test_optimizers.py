"""The fused Adam against Keras's own, on one device and on two replicas."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_attn.optimizers import FusedAdam
from keras_attn.schedules import WarmupLinearDecay
from keras_attn.training import get_strategy


def _model():
    """An embedding (IndexedSlices gradients), a LayerNorm and a dense head."""
    inputs = keras.Input((5,), dtype="int32")
    x = keras.layers.Embedding(20, 8)(inputs)
    x = keras.layers.LayerNormalization()(x)
    outputs = keras.layers.Dense(3)(keras.layers.GlobalAveragePooling1D()(x))
    return keras.Model(inputs, outputs)


def _batches(count=4):
    rng = np.random.default_rng(0)
    return [
        (rng.integers(0, 20, (6, 5)).astype("int32"), rng.integers(0, 3, (6,)).astype("int32"))
        for _ in range(count)
    ]


def _train(make_optimizer, strategy=None):
    """Weights after `fit`-like steps from the same start; the
    strategy's replicas split each batch.
    """
    strategy = strategy or tf.distribute.get_strategy()
    keras.utils.set_random_seed(7)
    with strategy.scope():
        model, optimizer = _model(), make_optimizer()
        optimizer.build(model.trainable_variables)
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction="sum")

    @tf.function
    def step(inputs, labels):
        def replica(inputs, labels):
            with tf.GradientTape() as tape:
                loss = loss_fn(labels, model(inputs, training=True)) / 6.0
            gradients = tape.gradient(loss, model.trainable_variables)
            optimizer.apply_gradients(zip(gradients, model.trainable_variables))

        strategy.run(replica, args=(inputs, labels))

    data = tf.data.Dataset.from_tensor_slices(tuple(np.concatenate(a) for a in zip(*_batches())))
    for inputs, labels in strategy.experimental_distribute_dataset(data.batch(6)):
        step(inputs, labels)
    return [w.numpy() for w in model.trainable_weights], optimizer


def _max_difference(a, b):
    return max(float(np.max(np.abs(x - y))) for x, y in zip(a, b))


def _schedule():
    return WarmupLinearDecay(1e-2, 2, 10)


@pytest.mark.parametrize("clipnorm", [None, 1.0])
def test_the_fused_update_equals_keras(clipnorm):
    arguments = dict(beta_2=0.98, epsilon=1e-9, clipnorm=clipnorm)
    expected, _ = _train(lambda: keras.optimizers.Adam(_schedule(), **arguments))
    start, _ = _train(lambda: keras.optimizers.Adam(0.0))
    got, optimizer = _train(lambda: FusedAdam(_schedule(), **arguments))
    assert _max_difference(expected, start) > 1e-2  # the steps moved the weights
    assert _max_difference(got, expected) < 1e-6
    assert int(optimizer.iterations) == 4


def test_two_replicas_equal_one_device():
    one, _ = _train(lambda: FusedAdam(_schedule()))
    two, _ = _train(lambda: FusedAdam(_schedule()), get_strategy("mirrored", ["/cpu:0", "/cpu:1"]))
    assert _max_difference(one, two) < 1e-6


def test_keras_adam_checkpoints_restore_into_the_fused_one(tmp_path):
    weights, optimizer = _train(lambda: keras.optimizers.Adam(1e-2))
    path = tf.train.Checkpoint(optimizer=optimizer).save(str(tmp_path / "ckpt"))

    fused = FusedAdam(1e-2)
    fused.build(_model().trainable_variables)
    tf.train.Checkpoint(optimizer=fused).restore(path).assert_consumed()
    assert int(fused.iterations) == 4
    for ours, theirs in zip(fused.variables, optimizer.variables):
        np.testing.assert_array_equal(ours.numpy(), theirs.numpy())


def test_serialization_round_trip():
    optimizer = FusedAdam(3e-4, beta_2=0.98, epsilon=1e-9, clipnorm=1.0)
    restored = keras.optimizers.deserialize(keras.optimizers.serialize(optimizer))
    assert type(restored) is FusedAdam
    assert restored.get_config() == optimizer.get_config()


def test_embedding_slices_keep_keras_update():
    """Keras squares each looked-up row's slice: a row looked up
    twice gets v = Σ gᵢ², kept as is.
    """
    rows = tf.IndexedSlices(tf.ones((2, 2)), tf.constant([0, 0]), tf.constant([3, 2]))
    velocities = []
    for optimizer in (keras.optimizers.Adam(1e-2), FusedAdam(1e-2)):
        variable = keras.Variable(np.ones((3, 2), "float32"))
        optimizer.build([variable])
        optimizer.apply_gradients([(rows, variable)])
        velocities.append(optimizer._velocities[0].numpy())  # noqa: SLF001
    np.testing.assert_allclose(velocities[0][0], [0.002, 0.002], rtol=1e-5)  # (1 - β2)(1² + 1²)
    np.testing.assert_array_equal(velocities[1], velocities[0])


def test_a_step_makes_the_scalars_every_weight_shares_once():
    """β1ᵗ and β2ᵗ are two `Pow` ops in a step's graph, not two per
    weight (fewer ops to trace and optimize).
    """
    model, optimizer = _model(), FusedAdam(_schedule())
    optimizer.build(model.trainable_variables)

    @tf.function
    def step():
        # dense gradients
        optimizer.apply([tf.ones_like(weight) for weight in model.trainable_variables])

    operations = step.get_concrete_function().graph.get_operations()
    assert len(model.trainable_variables) == 5
    assert [op.type for op in operations].count("Pow") == 2
    assert [op.type for op in operations].count("ResourceApplyAdam") == 5
