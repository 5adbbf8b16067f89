"""The RNN encoder's loop: Keras's LSTM/GRU layers against `masked_rnn`, same weights.

    python -m benchmarks.rnn_loop                      # LSTM and GRU, float32 and bfloat16
    python -m benchmarks.rnn_loop --cells lstm --batch 128

Keras 3 runs an LSTM or GRU layer as one fused op only through cuDNN (a GPU,
and the cuDNN-compatible configuration: tanh/sigmoid, no recurrent dropout,
not unrolled, with biases, GRU `reset_after`, right-padded masks). On a CPU
it loops the cell, and each step multiplies the input by the kernel (and,
under mixed precision, casts every kernel again). `RNNEncoder` keeps
Keras's layers as the holders of its weights but runs
`keras_attn.layers.rnn_cells.masked_rnn`: weights cast once, the input
projection one matmul for all steps, the loop only h U. This times, in one
process and interleaved, a forward and backward pass (`tf.function`) of the
preset "small" encoder (2 layers × 256 per direction, bidirectional) on
right-padded rows both ways: Keras's layers called as they are (what the
encoder ran before), and the encoder itself. The outputs agree (see
`tests/layers/test_rnn_cells.py`).
"""

import argparse
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from benchmarks.alternate import alternate  # noqa: E402

from keras_attn.layers import RNNEncoder  # noqa: E402


def keras_layers_forward(encoder, token_ids):
    """The encoder as it ran before: every Keras RNN layer called on the whole sequence."""
    mask = keras.ops.not_equal(token_ids, 0)
    x = encoder.embedding(token_ids)
    for rnn in encoder.rnn_layers:
        x, *_ = rnn(x, mask=mask)
    return x


def cases_for(cell, precision, batch, length):
    keras.mixed_precision.set_global_policy(precision)
    keras.utils.set_random_seed(0)
    encoder = RNNEncoder(8000, 256, cell=cell, num_layers=2, bidirectional=True)
    rng = np.random.default_rng(0)
    lengths = rng.integers(length // 2, length + 1, batch)
    ids = rng.integers(4, 8000, (batch, length)) * (np.arange(length)[None] < lengths[:, None])
    token_ids = tf.constant(ids, tf.int32)
    encoder(token_ids)

    def timed(forward):
        @tf.function
        def step():
            with tf.GradientTape() as tape:
                outputs = forward()
                loss = tf.reduce_sum(tf.cast(outputs, "float32") ** 2)
            return tape.gradient(loss, encoder.trainable_variables)

        return step

    cases = {
        f"{cell} {precision} Keras layers": timed(lambda: keras_layers_forward(encoder, token_ids)),
        f"{cell} {precision} masked_rnn": timed(lambda: encoder(token_ids)[0]),
    }
    for function in cases.values():
        function()
    keras.mixed_precision.set_global_policy("float32")
    return cases


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cells", nargs="+", default=["lstm", "gru"])
    parser.add_argument("--precisions", nargs="+", default=["float32", "mixed_bfloat16"])
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--length", type=int, default=24)
    args = parser.parse_args()
    print(f"batch {args.batch}, up to {args.length} tokens, forward + backward, ms (3 interleaved rounds)")
    for cell in args.cells:
        for precision in args.precisions:
            times = alternate(cases_for(cell, precision, args.batch, args.length), repeats=3, calls=10)
            (old, old_ms), (new, new_ms) = times.items()
            old_median, new_median = sorted(old_ms)[1], sorted(new_ms)[1]
            print(f"{old:35} {old_median:7.1f}   {new:35} {new_median:7.1f}   {old_median / new_median:.2f}x",
                  flush=True)


if __name__ == "__main__":
    main()
