"""The training step's matrix products alone: TensorFlow's (oneDNN) against PyTorch's (its BLAS).

    python -m benchmarks.anchors.matmuls --threads 1

float32 products of the shapes preset small's Transformer step makes on the
anchors' batches (about 880 target tokens a batch, width 256): the tied
vocabulary projection (10,000 logits), an attention projection and the
feed-forward's first layer. Both frameworks in this process, alternated
three times; prints ms a product and GFLOP/s, and which BLAS PyTorch was
built with. A gap here is the frameworks' kernels on this CPU, not ours.
"""

import argparse
import os
import re

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
import torch  # noqa: E402

from benchmarks.alternate import alternate  # noqa: E402

TOKENS, WIDTH = 880, 256
SHAPES = {"vocabulary projection": 10000, "attention projection": WIDTH, "feed-forward": 2 * WIDTH}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--threads", type=int, default=1, help="intra-op threads of both frameworks"
    )
    args = parser.parse_args()
    tf.config.threading.set_intra_op_parallelism_threads(args.threads)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    torch.set_num_threads(args.threads)
    blas = re.search(r"BLAS_INFO=(\w+)", torch.__config__.show())
    print(
        f"torch {torch.__version__} (BLAS: {blas[1] if blas else 'unknown'}), tensorflow "
        f"{tf.__version__}, {args.threads} thread(s)"
    )
    rng = np.random.default_rng(0)
    matmul = tf.function(tf.matmul)
    for name, columns in SHAPES.items():
        a = rng.normal(size=(TOKENS, WIDTH)).astype("float32")
        b = rng.normal(size=(WIDTH, columns)).astype("float32")
        tf_a, tf_b, torch_a, torch_b = (
            tf.constant(a),
            tf.constant(b),
            torch.tensor(a),
            torch.tensor(b),
        )
        times = alternate(
            {
                "TensorFlow": lambda a=tf_a, b=tf_b: matmul(a, b),
                "PyTorch": lambda a=torch_a, b=torch_b: tf.constant(torch.mm(a, b)[0, 0].item()),
            },
            repeats=3,
            calls=30,
            warmup=2,
        )
        flops = 2 * TOKENS * WIDTH * columns
        line = ", ".join(
            f"{framework} {min(values):.2f} ms ({flops / min(values) / 1e6:.0f} GFLOP/s)"
            for framework, values in times.items()
        )
        print(f"{name} ({TOKENS} x {WIDTH} by {WIDTH} x {columns}): {line}")
    print(f"load average {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
