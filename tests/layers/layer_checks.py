"""One helper that every layer test runs: config, saving, strategy, precision, XLA.

`check_layer(make_layer, inputs, call)` builds a functional model around a fresh
layer and checks that:
- `get_config()` / `from_config()` round-trip;
- the model saved to `.keras` and loaded with `safe_mode=True` gives identical
  outputs;
- `tf.function(jit_compile=True)` gives the same outputs as eager;
- under the `mixed_bfloat16` policy, with the same weights, the outputs are
  bfloat16 and within bfloat16 rounding of the float32 ones;
- one training step under MirroredStrategy with 2 replicas gives the weights
  of the same step on one device (once per layer class: it is the slow part).
"""

import keras
import numpy as np
import tensorflow as tf

from keras_attn.training import get_strategy

_DISTRIBUTED = set()  # layer classes already checked under MirroredStrategy


class _DropMask(keras.layers.Layer):
    """Passes its input on without its Keras mask.

    Keras averages a masked loss over each replica's unmasked entries, then
    over replicas: not the one-device mean when replicas hold different
    counts. The strategy check compares plain means.
    """

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.supports_masking = True

    def call(self, x):
        return keras.ops.copy(x)  # a new tensor: `x` itself carries the mask

    def compute_mask(self, x, mask=None):
        return None


def _model(make_layer, inputs, call, drop_mask=False):
    symbolic = [keras.Input(shape=array.shape[1:], dtype=str(array.dtype)) for array in inputs]
    outputs = call(make_layer(), *symbolic)
    if isinstance(outputs, (tuple, list)):
        outputs = outputs[0]
    if drop_mask:
        outputs = _DropMask()(outputs)
    return keras.Model(symbolic, outputs)


def _without_dropout(make_layer):
    """The same layer with every dropout rate 0 (replicas draw other masks)."""
    layer = make_layer()
    config = {key: 0.0 if "dropout" in key else value for key, value in layer.get_config().items()}
    return lambda: type(layer).from_config(config)


def assert_close_to_float32(half, full, tolerance=0.02):
    """bfloat16 outputs within `tolerance` of float32, relative to the output's scale.

    bfloat16 keeps 8 significant bits (relative rounding 2^-8 = 0.4%); a few
    roundings in a row stay within 2% of the output's largest magnitude.
    """
    half = np.asarray(keras.ops.cast(half, "float32"))
    full = np.asarray(full)
    scale = max(float(np.max(np.abs(full))), 1e-3)
    error = float(np.max(np.abs(half - full)))
    assert error <= tolerance * scale, (
        f"bfloat16 differs from float32 by {error:.4g} (scale {scale:.3g})"
    )


def check_layer(make_layer, inputs, call=lambda layer, *xs: layer(*xs), tmp_path=None):
    """Runs the standard layer checks.

    Args:
        make_layer: zero-argument function returning a fresh layer.
        inputs: list of NumPy arrays, batch first, batch size even.
        call: `call(layer, *symbolic_inputs)` → output (or a tuple whose
            first element is the output).
        tmp_path: a directory for the `.keras` file.
    """
    layer = make_layer()
    config = layer.get_config()
    assert type(layer).from_config(config).get_config() == config

    model = _model(make_layer, inputs, call)
    expected = np.asarray(model(inputs))
    assert np.all(np.isfinite(expected))

    if tmp_path is not None:
        path = str(tmp_path / "model.keras")
        model.save(path)
        loaded = keras.saving.load_model(path, safe_mode=True)
        np.testing.assert_allclose(np.asarray(loaded(inputs)), expected, atol=1e-6)

    compiled = tf.function(model, jit_compile=True)
    np.testing.assert_allclose(np.asarray(compiled(inputs)), expected, atol=1e-4)

    keras.mixed_precision.set_global_policy("mixed_bfloat16")
    try:
        half = _model(make_layer, inputs, call)
    finally:
        keras.mixed_precision.set_global_policy("float32")
    half.set_weights(model.get_weights())
    output = half(inputs)
    assert keras.backend.standardize_dtype(output.dtype) == "bfloat16"
    assert_close_to_float32(output, expected)

    if type(layer) not in _DISTRIBUTED:
        _DISTRIBUTED.add(type(layer))
        _check_mirrored_step_equals_one_device(_without_dropout(make_layer), inputs, call)


def _check_mirrored_step_equals_one_device(make_layer, inputs, call):
    """Two SGD steps on 2 replicas (half the batch each) equal them on one device."""
    target = np.ones_like(np.asarray(_model(make_layer, inputs, call)(inputs)))

    def trained(strategy):
        with strategy.scope():
            model = _model(make_layer, inputs, call, drop_mask=True)
            model.set_weights(initial)
            model.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse")
        history = model.fit(inputs, target, batch_size=len(target), epochs=2, verbose=0)
        return model, history.history["loss"]

    initial = _model(make_layer, inputs, call).get_weights()
    mirrored = get_strategy("mirrored", ["/cpu:0", "/cpu:1"])
    assert mirrored.num_replicas_in_sync == 2
    two, two_losses = trained(mirrored)
    one, one_losses = trained(get_strategy("one_device", ["/cpu:0"]))
    np.testing.assert_allclose(two_losses, one_losses, rtol=1e-5, atol=1e-6)
    moved = False
    for a, b, start in zip(two.get_weights(), one.get_weights(), initial):
        np.testing.assert_allclose(a, b, atol=1e-5)
        moved |= not np.allclose(a, start)
    assert moved or not initial, "no weight moved in two training steps"
