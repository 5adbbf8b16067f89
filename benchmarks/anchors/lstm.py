"""The encoder's recurrence alone: our loop against two fused LSTM kernels.

    python -m benchmarks.anchors.lstm --threads 1

One LSTM layer of preset small's Seq2Seq encoder (batch 64, width 256, a
source of `--length` tokens), forward and backward, float32, three ways in
this process, alternated three times: our `masked_rnn` (the input
projections for all steps at once, then a `tf.while_loop` over h U),
TensorFlow's fused `BlockLSTMV2` kernel (the whole sequence in one op) and
PyTorch's `nn.LSTM` (oneDNN's fused kernel on CPU). All three start from
the same weights; the script prints each one's gradients against ours
(the largest difference over the largest gradient), then ms a step.
"""

import argparse
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
import torch  # noqa: E402

from benchmarks.alternate import alternate  # noqa: E402
from benchmarks.measures import describe_cpu  # noqa: E402
from keras_attn.layers.rnn_cells import masked_rnn  # noqa: E402

BATCH, WIDTH = 64, 256


def keras_to_block_order(columns):
    """Keras's gate columns (input, forget, candidate, output) in `BlockLSTMV2`'s order (input,
    candidate, forget, output)."""
    i, f, g, o = tf.split(columns, 4, axis=-1)
    return tf.concat([i, g, f, o], axis=-1)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--threads", type=int, default=1, help="intra-op threads of both frameworks"
    )
    parser.add_argument(
        "--length",
        type=int,
        default=14,
        help="source tokens a sentence (the anchors' batches pad to about 14)",
    )
    args = parser.parse_args()
    tf.config.threading.set_intra_op_parallelism_threads(args.threads)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    torch.set_num_threads(args.threads)
    print(
        f"{describe_cpu()}; tensorflow {tf.__version__}, torch {torch.__version__}, "
        f"{args.threads} thread(s)"
    )

    rng = np.random.default_rng(0)
    inputs = rng.normal(size=(BATCH, args.length, WIDTH)).astype("float32")
    kernel, recurrent_kernel = (
        rng.normal(scale=0.05, size=(WIDTH, 4 * WIDTH)).astype("float32") for _ in range(2)
    )
    bias = rng.normal(scale=0.05, size=4 * WIDTH).astype("float32")

    x = tf.constant(inputs)
    weights = [tf.Variable(kernel), tf.Variable(recurrent_kernel), tf.Variable(bias)]
    mask = tf.ones((BATCH, args.length), tf.bool)

    def gradients(outputs_of):
        with tf.GradientTape() as tape:
            outputs = outputs_of(*weights)
            loss = tf.reduce_sum(outputs * outputs)
        return tape.gradient(loss, weights)

    @tf.function
    def ours():
        return gradients(
            lambda w, u, b: masked_rnn(
                "lstm", x, mask, {"kernel": w, "recurrent_kernel": u, "bias": b}
            )[0]
        )

    @tf.function
    def block():
        zeros, no_peephole = tf.zeros((BATCH, WIDTH)), tf.zeros((WIDTH,))

        def outputs_of(w, u, b):
            *_, h = tf.raw_ops.BlockLSTMV2(
                seq_len_max=tf.constant(args.length, tf.int64),
                x=tf.transpose(x, (1, 0, 2)),
                cs_prev=zeros,
                h_prev=zeros,
                w=keras_to_block_order(tf.concat([w, u], 0)),
                wci=no_peephole,
                wcf=no_peephole,
                wco=no_peephole,
                b=keras_to_block_order(b),
                cell_clip=0.0,
                use_peephole=False,
            )
            return tf.transpose(h, (1, 0, 2))

        return gradients(outputs_of)

    lstm = torch.nn.LSTM(WIDTH, WIDTH, batch_first=True)
    with torch.no_grad():  # PyTorch's rows are Keras's columns, in the same gate order
        lstm.weight_ih_l0.copy_(torch.tensor(kernel.T))
        lstm.weight_hh_l0.copy_(torch.tensor(recurrent_kernel.T))
        lstm.bias_ih_l0.copy_(torch.tensor(bias))
        lstm.bias_hh_l0.zero_()
    torch_x = torch.tensor(inputs)

    def pytorch():
        lstm.zero_grad()
        outputs, _ = lstm(torch_x)
        (outputs * outputs).sum().backward()
        return [
            lstm.weight_ih_l0.grad.T.numpy(),
            lstm.weight_hh_l0.grad.T.numpy(),
            lstm.bias_ih_l0.grad.numpy(),
        ]

    reference = [g.numpy() for g in ours()]
    for name, step in (("BlockLSTMV2", block), ("PyTorch nn.LSTM", pytorch)):
        differences = [
            float(np.max(np.abs(np.asarray(g) - r)) / np.max(np.abs(r)))
            for g, r in zip(step(), reference)
        ]
        print(
            f"{name} gradients against ours (kernel, recurrent kernel, bias): "
            + ", ".join(f"{d:.1e}" for d in differences)
        )

    times = alternate(
        {
            "ours": ours,
            "BlockLSTMV2": block,
            "PyTorch nn.LSTM": lambda: tf.constant(pytorch()[2][0]),
        },
        repeats=3,
        calls=30,
        warmup=3,
    )
    print(
        f"one LSTM layer, batch {BATCH} x {args.length} tokens x {WIDTH}, forward and backward, "
        "ms (best of 3; rounds):"
    )
    for name, values in times.items():
        print(f"  {name}: {min(values):.2f} ({', '.join(f'{v:.2f}' for v in values)})")
    print(f"load average {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
