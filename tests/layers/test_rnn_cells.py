"""The cell equations and the masked loop the RNN layers run equal Keras's own cells and layers."""

import keras
import numpy as np
import pytest

from keras_attn.layers.rnn_cells import cell_step, cell_weights, masked_rnn

CELLS = {
    "lstm": (keras.layers.LSTMCell, keras.layers.LSTM),
    "gru": (keras.layers.GRUCell, keras.layers.GRU),
}


@pytest.mark.parametrize("cell_type", ["lstm", "gru"])
def test_cell_step_equals_the_keras_cell(cell_type):
    keras.utils.set_random_seed(0)
    # biases non-zero: their order counts
    cell = CELLS[cell_type][0](6, bias_initializer="random_normal")
    cell.build((None, 5))
    rng = np.random.default_rng(0)
    x = rng.normal(size=(3, 5)).astype("float32")
    state = [
        rng.normal(size=(3, 6)).astype("float32") for _ in range(2 if cell_type == "lstm" else 1)
    ]

    expected_output, expected_state = cell(x, state)
    output, new_state = cell_step(cell_type, x, state, cell_weights(cell, "float32"))

    np.testing.assert_allclose(output, expected_output, atol=1e-6)
    for got, want in zip(new_state, expected_state, strict=True):
        np.testing.assert_allclose(got, want, atol=1e-6)


@pytest.mark.parametrize("go_backwards", [False, True])
@pytest.mark.parametrize("cell_type", ["lstm", "gru"])
def test_masked_rnn_equals_the_keras_layer_on_right_padded_rows(cell_type, go_backwards):
    keras.utils.set_random_seed(1)
    layer = CELLS[cell_type][1](
        6,
        return_sequences=True,
        return_state=True,
        go_backwards=go_backwards,
        bias_initializer="random_normal",
    )
    rng = np.random.default_rng(1)
    inputs = rng.normal(size=(3, 7, 5)).astype("float32")
    lengths = np.array([7, 4, 1])
    mask = np.arange(7)[None, :] < lengths[:, None]
    expected, *expected_state = layer(inputs, mask=mask)
    expected = np.asarray(expected)
    if go_backwards:  # Keras returns a backward layer's outputs in reading order
        expected = expected[:, ::-1]

    outputs, state = masked_rnn(
        cell_type, inputs, mask, cell_weights(layer.cell, "float32"), go_backwards
    )

    outputs = np.asarray(outputs)
    np.testing.assert_allclose(outputs[mask], expected[mask], atol=1e-6)
    np.testing.assert_array_equal(outputs[~mask], 0.0)
    for got, want in zip(state, expected_state, strict=True):
        np.testing.assert_allclose(got, want, atol=1e-6)


def test_cell_weights_are_cast_to_the_compute_dtype():
    cell = keras.layers.GRUCell(4)
    cell.build((None, 3))
    weights = cell_weights(cell, "bfloat16")
    assert {name: str(w.dtype) for name, w in weights.items()} == dict.fromkeys(
        ["kernel", "recurrent_kernel", "bias", "recurrent_bias"], "<dtype: 'bfloat16'>"
    )
    np.testing.assert_allclose(
        np.asarray(keras.ops.cast(weights["kernel"], "float32")), cell.kernel.numpy(), rtol=1e-2
    )
