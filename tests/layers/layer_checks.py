"""One helper that every layer test runs: config, saving, strategy, precision, XLA.

`check_layer(make_layer, inputs, call)` builds a functional model around a fresh
layer and checks that:
- `get_config()` / `from_config()` round-trip;
- the model saved to `.keras` and loaded with `safe_mode=True` gives identical
  outputs;
- the model trains a step under MirroredStrategy with 2 replicas;
- it runs under the `mixed_bfloat16` policy with bfloat16 outputs;
- `tf.function(jit_compile=True)` gives the same outputs as eager.
"""

import numpy as np
import keras
import tensorflow as tf

from keras_attn.training import get_strategy


def _model(make_layer, inputs, call):
    symbolic = [
        keras.Input(shape=array.shape[1:], dtype=str(array.dtype)) for array in inputs
    ]
    outputs = call(make_layer(), *symbolic)
    if isinstance(outputs, (tuple, list)):
        outputs = outputs[0]
    return keras.Model(symbolic, outputs)


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

    strategy = get_strategy("mirrored", ["/cpu:0", "/cpu:1"])
    assert strategy.num_replicas_in_sync == 2
    with strategy.scope():
        distributed = _model(make_layer, inputs, call)
        distributed.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse")
    before = [np.array(w) for w in distributed.trainable_weights]
    target = np.ones_like(expected)
    history = distributed.fit(
        inputs, target, batch_size=len(target), epochs=1, verbose=0
    )
    assert np.isfinite(history.history["loss"][0])
    if before:
        after = distributed.trainable_weights
        assert any(not np.allclose(b, np.array(a)) for b, a in zip(before, after))

    keras.mixed_precision.set_global_policy("mixed_bfloat16")
    try:
        half = _model(make_layer, inputs, call)
        output = half(inputs)
        assert keras.backend.standardize_dtype(output.dtype) == "bfloat16"
        assert np.all(np.isfinite(np.asarray(keras.ops.cast(output, "float32"))))
    finally:
        keras.mixed_precision.set_global_policy("float32")
