"""A bf16 / float32 matmul of the feed-forward layer's size, in every layout its gradients use.

    python -m benchmarks.matmul_transposes

x (2048 × 256) by W (256 × 1024): the forward pass, the weight gradient
xᵀ dy (as `transpose_a`, an explicit transpose, and (dyᵀ x)ᵀ) and the input
gradient dy Wᵀ (as `transpose_b` and an explicit transpose), each a
`tf.function`; the twelve cases interleaved (`alternate`), best of 5
rounds of 50 calls. What a layer's matmuls can reach at this size when
nothing else runs beside them (the bound in RESULTS.md, "The same
benchmark on the AMD machine").
"""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import tensorflow as tf  # noqa: E402

from benchmarks.alternate import alternate  # noqa: E402  (benchmarks/alternate.py, beside this script)

M, K, N = 2048, 256, 1024


def main():
    layouts = {
        "forward x W": (lambda x, dy, w: tf.matmul(x, w)),
        "dW: matmul(x, dy, transpose_a)": (lambda x, dy, w: tf.matmul(x, dy, transpose_a=True)),
        "dW: transpose(x) dy": (lambda x, dy, w: tf.matmul(tf.transpose(x), dy)),
        "dW: transpose(dyᵀ x)": (lambda x, dy, w: tf.transpose(tf.matmul(dy, x, transpose_a=True))),
        "dx: matmul(dy, W, transpose_b)": (lambda x, dy, w: tf.matmul(dy, w, transpose_b=True)),
        "dx: dy transpose(W)": (lambda x, dy, w: tf.matmul(dy, tf.transpose(w))),
    }
    cases, flops = {}, 2 * M * K * N
    for dtype in (tf.float32, tf.bfloat16):
        x = tf.cast(tf.random.normal((M, K)), dtype)
        dy = tf.cast(tf.random.normal((M, N)), dtype)
        w = tf.cast(tf.random.normal((K, N)), dtype)
        for name, layout in layouts.items():
            function = tf.function(layout)
            function(x, dy, w).numpy()  # trace
            cases[f"{dtype.name:8} {name}"] = lambda f=function, x=x, dy=dy, w=w: f(x, dy, w)
    for name, times in alternate(cases, repeats=5, calls=50).items():
        ms = min(times)
        print(f"{name:41} {ms:6.2f} ms  {flops / ms / 1e6:4.0f} GFLOP/s")
    print(f"load average {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
