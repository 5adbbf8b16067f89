"""LSTM and GRU steps on weights read once, and a masked loop over a sequence.

Keras's `LSTMCell` and `GRUCell` read their variables at every call, and
under a mixed precision policy every read casts the float32 variable to
the compute dtype: inside a time loop, one cast of every kernel per step,
forward and backward. Here a Keras cell's variables are read once
(`cell_weights`), and a step is split as cuDNN splits it: the input
projection x W + b, which does not recur and so can run for all time steps
at once (`input_projection`), and the recurrence on h_{t-1}
(`recurrence`). The equations are Keras's (`implementation=2`; GRU with
`reset_after=True`), so Keras's cells hold the weights unchanged.
"""

import tensorflow as tf
from keras import ops


def cell_weights(cell, dtype):
    """A Keras `LSTMCell` or `GRUCell`'s weights in `dtype`, read once.

    Args:
        cell: keras.layers.LSTMCell or keras.layers.GRUCell. A built cell.
        dtype: str. The dtype the weights are cast to (the compute dtype).

    Returns:
        dict. `kernel` W, `recurrent_kernel` U, `bias` (added to x W) and, for a
        GRU, `recurrent_bias` (added to h U).
    """
    weights = {
        "kernel": ops.cast(cell.kernel, dtype),
        "recurrent_kernel": ops.cast(cell.recurrent_kernel, dtype),
    }
    bias = ops.cast(cell.bias, dtype)
    if len(cell.bias.shape) == 2:  # a GRU's (2, 3 · units): the input's and the state's
        weights["bias"], weights["recurrent_bias"] = bias[0], bias[1]
    else:
        weights["bias"] = bias
    return weights


def input_projection(x, weights):
    """x W + b: the part of every gate that does not depend on the state.

    Args:
        x: tensor of shape `(..., input_dim)`. The inputs, one step or many.
        weights: dict. From `cell_weights`.

    Returns:
        A tensor of shape `(..., 4 · units)` (LSTM) or `(..., 3 · units)` (GRU).
    """
    return ops.matmul(x, weights["kernel"]) + weights["bias"]


def lstm_recurrence(projected, state, weights):
    """One LSTM step (Hochreiter & Schmidhuber 1997, with a forget gate).

    z = x W + b + h_{t-1} U split into the input, forget, candidate and
    output gates (Keras's order); c_t = σ(f) c_{t-1} + σ(i) tanh(g),
    h_t = σ(o) tanh(c_t).

    Args:
        projected: tensor of shape `(B, 4 · units)`. `input_projection` of the
            step's input.
        state: list. `[h_{t-1}, c_{t-1}]`, each of shape `(B, units)`.
        weights: dict. From `cell_weights`.

    Returns:
        tuple. `(h_t, [h_t, c_t])`, as `LSTMCell` returns them.
    """
    h, c = state
    z = projected + ops.matmul(h, weights["recurrent_kernel"])
    i, f, g, o = ops.split(z, 4, axis=-1)
    c = ops.sigmoid(f) * c + ops.sigmoid(i) * ops.tanh(g)
    h = ops.sigmoid(o) * ops.tanh(c)
    return h, [h, c]


def gru_recurrence(projected, state, weights):
    """One GRU step (Cho et al. 2014), the reset gate applied after the matmul.

    With x W + b_x = [x_z; x_r; x_h] and h_{t-1} U + b_h = [u_z; u_r; u_h]:
    z = σ(x_z + u_z), r = σ(x_r + u_r), ĥ = tanh(x_h + r ⊙ u_h),
    h_t = z h_{t-1} + (1 − z) ĥ.

    Args:
        projected: tensor of shape `(B, 3 · units)`. `input_projection` of the
            step's input.
        state: list. `[h_{t-1}]`, of shape `(B, units)`.
        weights: dict. From `cell_weights`.

    Returns:
        tuple. `(h_t, [h_t])`, as `GRUCell` returns them.
    """
    (h,) = state
    x_z, x_r, x_h = ops.split(projected, 3, axis=-1)
    recurrent = ops.matmul(h, weights["recurrent_kernel"]) + weights["recurrent_bias"]
    u_z, u_r, u_h = ops.split(recurrent, 3, axis=-1)
    z = ops.sigmoid(x_z + u_z)
    r = ops.sigmoid(x_r + u_r)
    candidate = ops.tanh(x_h + r * u_h)
    h = z * h + (1 - z) * candidate
    return h, [h]


def recurrence(cell_type, projected, state, weights):
    """`lstm_recurrence` or `gru_recurrence` by `cell_type`.

    Args:
        cell_type: str. One of `"lstm"`, `"gru"`.
        projected: tensor of shape `(B, G)`. `input_projection` of the step's
            input (G = 4 · units for an LSTM, 3 · units for a GRU).
        state: list. The cell's state, each tensor of shape `(B, units)`.
        weights: dict. From `cell_weights`.

    Returns:
        tuple. `(h_t, new_state)`.
    """
    step = lstm_recurrence if cell_type == "lstm" else gru_recurrence
    return step(projected, state, weights)


def cell_step(cell_type, x, state, weights):
    """One whole step of the cell on input `x`.

    Args:
        cell_type: str. One of `"lstm"`, `"gru"`.
        x: tensor of shape `(B, input_dim)`. The step's input.
        state: list. The cell's state, each tensor of shape `(B, units)`.
        weights: dict. From `cell_weights`.

    Returns:
        tuple. `(h_t, new_state)`.
    """
    return recurrence(cell_type, input_projection(x, weights), state, weights)


def masked_rnn(cell_type, inputs, mask, weights, go_backwards=False):
    """Runs a cell over `inputs` `(B, S, d)`; masked steps leave the state unchanged.

    The input projection runs once for the whole sequence (one large
    matmul); the loop only adds h_{t-1} U. With `go_backwards` the loop
    runs from the last position to the first, so that right padding is
    read first and the final state is that of the first token.

    Args:
        cell_type: str. One of `"lstm"`, `"gru"`.
        inputs: tensor of shape `(B, S, d)`, in the compute dtype.
        mask: bool tensor of shape `(B, S)`. `True` for real positions.
        weights: dict. From `cell_weights`.
        go_backwards: bool. Whether to run from position S − 1 down to 0.
            Defaults to False.

    Returns:
        tuple. `(outputs, final_state)`: `outputs` `(B, S, units)` with h_t at
        each real position (in input order, whatever the direction) and 0 at
        masked ones; `final_state` the list of the state's tensors after the
        last real step, `(B, units)` each.
    """
    units = ops.shape(weights["recurrent_kernel"])[0]
    batch, length = ops.shape(inputs)[0], ops.shape(inputs)[1]
    projected = ops.transpose(input_projection(inputs, weights), (1, 0, 2))  # (S, B, G)
    mask = ops.transpose(mask)  # (S, B)
    if go_backwards:
        projected, mask = ops.flip(projected, axis=0), ops.flip(mask, axis=0)
    projected = tf.TensorArray(inputs.dtype, size=length).unstack(projected)
    zeros = ops.zeros((batch, units), inputs.dtype)
    state = [zeros, zeros] if cell_type == "lstm" else [zeros]

    def body(t, state, outputs):
        h, new_state = recurrence(cell_type, projected.read(t), state, weights)
        real = mask[t][:, None]
        state = [ops.where(real, new, old) for new, old in zip(new_state, state)]
        return t + 1, state, outputs.write(t, ops.where(real, h, ops.zeros_like(h)))

    outputs = tf.TensorArray(inputs.dtype, size=length, element_shape=(None, None))
    _, state, outputs = tf.while_loop(
        lambda t, *_: t < length,
        body,
        (tf.constant(0), state, outputs),
        maximum_iterations=length,
    )
    outputs = outputs.stack()
    if go_backwards:
        outputs = ops.flip(outputs, axis=0)
    return ops.transpose(outputs, (1, 0, 2)), state
