"""Training-step speed of keras_attn's layers against keras-hub / Keras.

Run from the repository root:

    python benchmarks/layers.py            # full run, about 2-3 minutes
    python benchmarks/layers.py --quick    # fewer, shorter repeats
    python benchmarks/layers.py --jit      # also time XLA-compiled steps

One training step is a `tf.function` that runs the layer forward, reduces
its output to a scalar loss and takes the gradients of that loss with
respect to the layer's trainable weights (no optimizer). Every case is
timed in float32 and under the `mixed_bfloat16` policy, ours and the
anchor in the same process, with their repeats interleaved so background
noise hits both alike. Shapes: batch 32, length 64, width 256, 8 heads,
feed-forward width 1024, dropout 0.

Achieved GFLOP/s counts the matmul FLOPs only (projections, attention
scores and weighted sum, feed-forward; 2·m·n·k each), times 3 for the
backward pass, and is compared with the best plain matmul speed measured
in the same run for the same dtype.
"""

import argparse
import dataclasses
import os
import statistics
import time
from typing import Callable

os.environ["TF_CPP_MIN_LOG_LEVEL"] = "2"

import keras  # noqa: E402
import keras_hub  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

import keras_attn.layers  # noqa: E402

BATCH, LENGTH, WIDTH, HEADS, FFN = 32, 64, 256, 8, 1024
PRECISIONS = ("float32", "mixed_bfloat16")
TARGET_RATIO = 0.8
MATMUL_SIZES = ((2048, 1024, 1024), (2048, 2048, 2048), (4096, 1024, 4096))


# --------------------------------------------------------------------------
# Analytic FLOPs (forward pass; a training step is about 3x forward).


def attention_flops(query_length, key_length):
    """Q/K/V/output projections plus the score and weighted-sum products."""
    projections = 2 * BATCH * WIDTH * WIDTH * (2 * query_length + 2 * key_length)
    attention = 2 * (2 * BATCH * query_length * key_length * WIDTH)
    return projections + attention


FEED_FORWARD_FLOPS = 2 * (2 * BATCH * LENGTH * WIDTH * FFN)
SELF_ATTENTION_FLOPS = attention_flops(LENGTH, LENGTH)


# --------------------------------------------------------------------------
# The cases: a pair of layer factories and how to call them.


@dataclasses.dataclass
class Case:
    name: str
    ours: Callable[[], keras.layers.Layer]
    anchor: Callable[[], keras.layers.Layer]
    call: Callable  # (layer, x, memory) -> output
    forward_flops: float

    @property
    def step_flops(self):
        return 3 * self.forward_flops


CASES = (
    Case(
        "encoder block",
        lambda: keras_attn.layers.TransformerEncoderBlock(
            num_heads=HEADS, intermediate_dim=FFN
        ),
        lambda: keras_hub.layers.TransformerEncoder(
            intermediate_dim=FFN, num_heads=HEADS
        ),
        lambda layer, x, memory: layer(x),
        SELF_ATTENTION_FLOPS + FEED_FORWARD_FLOPS,
    ),
    Case(
        "decoder block + cross",
        lambda: keras_attn.layers.TransformerDecoderBlock(HEADS, FFN),
        lambda: keras_hub.layers.TransformerDecoder(FFN, HEADS),
        lambda layer, x, memory: layer(x, memory),
        2 * SELF_ATTENTION_FLOPS + FEED_FORWARD_FLOPS,
    ),
    Case(
        "decoder block, causal",
        lambda: keras_attn.layers.TransformerDecoderBlock(HEADS, FFN),
        lambda: keras_hub.layers.TransformerDecoder(FFN, HEADS),
        lambda layer, x, memory: layer(x),
        SELF_ATTENTION_FLOPS + FEED_FORWARD_FLOPS,
    ),
    Case(
        "multi-head attention",
        lambda: keras_attn.layers.MultiHeadAttention(HEADS, WIDTH // HEADS),
        lambda: keras.layers.MultiHeadAttention(HEADS, WIDTH // HEADS),
        lambda layer, x, memory: layer(x, x),
        SELF_ATTENTION_FLOPS,
    ),
)


# --------------------------------------------------------------------------
# Timing.


def training_step(layer, call, x, memory, jit_compile):
    """A compiled forward + backward step of a layer (built here, eagerly)."""
    call(layer, x, memory)
    variables = layer.trainable_variables

    @tf.function(jit_compile=jit_compile)
    def step(x, memory):
        with tf.GradientTape() as tape:
            output = call(layer, x, memory)
            loss = tf.reduce_mean(tf.square(tf.cast(output, tf.float32)))
        return loss, tape.gradient(loss, variables)

    return step


def seconds_per_call(fn, args, n):
    start = time.perf_counter()
    for _ in range(n):
        result = fn(*args)
    tf.nest.flatten(result)[0].numpy()  # wait for the last call
    return (time.perf_counter() - start) / n


def interleaved_medians(fns, args, repeats, repeat_seconds, warmup=3):
    """Median seconds per call of each of `fns`, repeats interleaved.

    Each function is warmed up (`warmup` calls, compilation included there),
    then timed `repeats` times over `n` calls, `n` chosen so one repeat lasts
    about `repeat_seconds`. The order alternates between repeats.
    """
    counts = {}
    for name, fn in fns.items():
        for _ in range(warmup - 1):
            fn(*args)
        estimate = seconds_per_call(fn, args, 1)
        counts[name] = max(1, round(repeat_seconds / estimate))
    samples = {name: [] for name in fns}
    names = list(fns)
    for repeat in range(repeats):
        for name in names if repeat % 2 == 0 else reversed(names):
            samples[name].append(seconds_per_call(fns[name], args, counts[name]))
    return {name: statistics.median(times) for name, times in samples.items()}


def matmul_peak_gflops(dtype, repeats, repeat_seconds):
    """Best GFLOP/s of a compiled matmul over a few sizes."""
    best = 0.0
    for m, k, n in MATMUL_SIZES:
        a = tf.random.normal((m, k), dtype=tf.float32)
        b = tf.random.normal((k, n), dtype=tf.float32)
        a, b = tf.cast(a, dtype), tf.cast(b, dtype)
        matmul = tf.function(tf.linalg.matmul)
        seconds = interleaved_medians({"matmul": matmul}, (a, b), repeats, repeat_seconds)
        best = max(best, 2 * m * n * k / seconds["matmul"] / 1e9)
    return best


# --------------------------------------------------------------------------
# Report.


def time_case(case, precision, args):
    keras.mixed_precision.set_global_policy(precision)
    rng = np.random.default_rng(0)
    x = tf.constant(rng.standard_normal((BATCH, LENGTH, WIDTH), np.float32))
    memory = tf.constant(rng.standard_normal((BATCH, LENGTH, WIDTH), np.float32))
    fns = {}
    for jit in (False, True) if args.jit else (False,):
        suffix = " xla" if jit else ""
        fns["ours" + suffix] = training_step(case.ours(), case.call, x, memory, jit)
        fns["anchor" + suffix] = training_step(
            case.anchor(), case.call, x, memory, jit
        )
    seconds = interleaved_medians(fns, (x, memory), args.repeats, args.repeat_seconds)
    return {name: 1000 * s for name, s in seconds.items()}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer, shorter repeats")
    parser.add_argument(
        "--jit", action="store_true", help="also time jit_compile=True (XLA) steps"
    )
    args = parser.parse_args()
    args.repeats, args.repeat_seconds = (5, 0.15) if args.quick else (9, 0.3)

    print(
        f"TensorFlow {tf.__version__}, Keras {keras.__version__}, "
        f"keras-hub {keras_hub.__version__}; {os.cpu_count()} CPUs; "
        f"batch {BATCH}, length {LENGTH}, width {WIDTH}, {HEADS} heads, "
        f"FFN {FFN}; median of {args.repeats} repeats"
    )
    peaks = {
        "float32": matmul_peak_gflops(tf.float32, args.repeats, args.repeat_seconds),
        "mixed_bfloat16": matmul_peak_gflops(
            tf.bfloat16, args.repeats, args.repeat_seconds
        ),
    }
    print(
        f"matmul peak: float32 {peaks['float32']:.0f} GFLOP/s, "
        f"bfloat16 {peaks['mixed_bfloat16']:.0f} GFLOP/s\n"
    )

    columns = ["case", "precision", "ours ms", "anchor ms", "ours/anchor"]
    if args.jit:
        columns += ["ours xla ms", "anchor xla ms", "xla ours/anchor"]
    columns += ["ours GFLOP/s", "% of peak"]
    widths = [22, 14] + [max(len(c), 9) for c in columns[2:]]
    print("  ".join(c.ljust(w) if i < 2 else c.rjust(w)
                    for i, (c, w) in enumerate(zip(columns, widths))))
    print("  ".join("-" * w for w in widths))

    misses = []
    try:
        for case in CASES:
            for precision in PRECISIONS:
                ms = time_case(case, precision, args)
                ratio = ms["ours"] / ms["anchor"]
                row = [case.name, precision, f"{ms['ours']:.2f}",
                       f"{ms['anchor']:.2f}", f"{ratio:.2f}"]
                if args.jit:
                    row += [f"{ms['ours xla']:.2f}", f"{ms['anchor xla']:.2f}",
                            f"{ms['ours xla'] / ms['anchor xla']:.2f}"]
                gflops = case.step_flops / ms["ours"] / 1e6
                row += [f"{gflops:.0f}", f"{100 * gflops / peaks[precision]:.0f}%"]
                print("  ".join(v.ljust(w) if i < 2 else v.rjust(w)
                                for i, (v, w) in enumerate(zip(row, widths))),
                      flush=True)
                if ratio > TARGET_RATIO:
                    misses.append(f"{case.name} ({precision}): {ratio:.2f}")
    finally:
        keras.mixed_precision.set_global_policy("float32")

    print()
    if misses:
        print(f"Above the {TARGET_RATIO}x target: " + "; ".join(misses))
    else:
        print(f"All cases within the {TARGET_RATIO}x target.")


if __name__ == "__main__":
    main()
