"""Training-step speed of keras_attn's layers against keras-hub / Keras.

Run from the repository root:

    python -m benchmarks.layers            # about 1 minute on an idle machine
    python -m benchmarks.layers --quick    # fewer, shorter repeats
    python -m benchmarks.layers --jit      # also XLA-compiled steps, ~2 minutes

One training step is a `tf.function` that runs the layer forward, reduces
its output to a scalar loss and takes the gradients of that loss with
respect to the layer's trainable weights (no optimizer). Every case is
timed in float32 and under the `mixed_bfloat16` policy, ours and the anchor
in the same process. After a warm-up (compilation excluded), each step
function is timed over several repeats of N steps, the repeats of ours and
the anchor interleaved so that background load hits both alike; the table
shows medians, and ours/anchor is the median of the side-by-side ratios.
Shapes: batch 32, length 64, width 256, 8 heads, feed-forward width 1024,
dropout 0.

GFLOP/s counts matmul FLOPs only, 2·m·n·k for each of the projections, the
attention scores and weighted sum and the feed-forward layers, and takes a
step as 3x the forward pass (the backward pass is about twice the forward;
slightly less here, since no gradient flows into the constant inputs).
"% of peak" compares it with the best plain matmul speed of the same dtype,
measured in the same run.
"""

import argparse
import dataclasses
import os
import statistics
from collections.abc import Callable

os.environ["TF_CPP_MIN_LOG_LEVEL"] = "2"

import keras  # noqa: E402
import keras_hub  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

import keras_attn.layers  # noqa: E402
from benchmarks.alternate import alternate  # noqa: E402

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
        lambda: keras_attn.layers.TransformerEncoderBlock(num_heads=HEADS, intermediate_dim=FFN),
        lambda: keras_hub.layers.TransformerEncoder(intermediate_dim=FFN, num_heads=HEADS),
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

    # Traced here, as a concrete function: TensorFlow warns about frequent
    # retracing when many `tf.function`s share one Python function.
    return step.get_concrete_function(x, memory)


def random_inputs():
    """`(x, memory)`: the layer input and the encoder outputs, `(BATCH, LENGTH, WIDTH)`."""
    rng = np.random.default_rng(0)
    x = tf.constant(rng.standard_normal((BATCH, LENGTH, WIDTH), np.float32))
    memory = tf.constant(rng.standard_normal((BATCH, LENGTH, WIDTH), np.float32))
    return x, memory


def interleaved_samples(fns, args, repeats, repeat_seconds, warmup=3):
    """Seconds per call of each of `fns(*args)`, one sample per repeat (`benchmarks.alternate`).

    Each function is warmed up (`warmup` calls, tracing and compilation
    included there), then timed `repeats` times, each repeat lasting about
    `repeat_seconds`, interleaved so that background load hits every
    function alike.
    """
    cases = {name: (lambda fn=fn: fn(*args)) for name, fn in fns.items()}
    samples = alternate(cases, repeats, warmup=warmup, seconds=repeat_seconds)
    return {name: [ms / 1000 for ms in values] for name, values in samples.items()}


def paired_ratio(numerators, denominators):
    """Median of the ratios of samples taken side by side."""
    return statistics.median(a / b for a, b in zip(numerators, denominators))


def matmul_peak_gflops(dtype, repeats, repeat_seconds):
    """Best GFLOP/s of a compiled matmul over a few sizes (fastest repeat)."""
    best = 0.0
    for m, k, n in MATMUL_SIZES:
        a = tf.cast(tf.random.normal((m, k)), dtype)
        b = tf.cast(tf.random.normal((k, n)), dtype)
        matmul = tf.function(tf.linalg.matmul)
        samples = interleaved_samples({"matmul": matmul}, (a, b), repeats, repeat_seconds)
        best = max(best, 2 * m * n * k / min(samples["matmul"]) / 1e9)
    return best


# --------------------------------------------------------------------------
# Report.


def time_case(case, precision, args):
    """Milliseconds per step and ours/anchor ratios of one case."""
    keras.mixed_precision.set_global_policy(precision)
    x, memory = random_inputs()
    fns = {}
    for suffix, jit in (("", False), (" xla", True))[: 2 if args.jit else 1]:
        fns["ours" + suffix] = training_step(case.ours(), case.call, x, memory, jit)
        fns["anchor" + suffix] = training_step(case.anchor(), case.call, x, memory, jit)
    samples = interleaved_samples(fns, (x, memory), args.repeats, args.repeat_seconds)
    result = {name: 1000 * statistics.median(s) for name, s in samples.items()}
    result["ratio"] = paired_ratio(samples["ours"], samples["anchor"])
    if args.jit:
        result["xla ratio"] = paired_ratio(samples["ours xla"], samples["anchor xla"])
    return result


def format_row(values, widths):
    """Left-aligns the first two columns, right-aligns the numbers."""
    return "  ".join(
        value.ljust(width) if i < 2 else value.rjust(width)
        for i, (value, width) in enumerate(zip(values, widths))
    )


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer, shorter repeats")
    parser.add_argument("--jit", action="store_true", help="also time jit_compile=True (XLA) steps")
    args = parser.parse_args()
    args.repeats, args.repeat_seconds = (5, 0.1) if args.quick else (9, 0.25)

    print(
        f"TensorFlow {tf.__version__}, Keras {keras.__version__}, "
        f"keras-hub {keras_hub.__version__}, {os.cpu_count()} CPUs, "
        f"load average {os.getloadavg()[0]:.1f}\n"
        f"batch {BATCH}, length {LENGTH}, width {WIDTH}, {HEADS} heads, "
        f"FFN {FFN}; median of {args.repeats} interleaved repeats"
    )
    peaks = {
        precision: matmul_peak_gflops(dtype, args.repeats, args.repeat_seconds)
        for precision, dtype in zip(PRECISIONS, (tf.float32, tf.bfloat16))
    }
    print(
        f"matmul peak: float32 {peaks['float32']:.0f} GFLOP/s, "
        f"bfloat16 {peaks['mixed_bfloat16']:.0f} GFLOP/s\n"
    )

    columns = ["case", "precision", "ours ms", "anchor ms", "ours/anchor"]
    if args.jit:
        columns += ["ours xla ms", "anchor xla ms", "xla ours/anchor"]
    columns += ["ours GFLOP/s", "% of peak"]
    widths = [21, 14] + [max(len(column), 8) for column in columns[2:]]
    print(format_row(columns, widths))
    print(format_row(["-" * width for width in widths], widths))

    misses = []
    try:
        for case in CASES:
            for precision in PRECISIONS:
                ms = time_case(case, precision, args)
                row = [
                    case.name,
                    precision,
                    f"{ms['ours']:.2f}",
                    f"{ms['anchor']:.2f}",
                    f"{ms['ratio']:.2f}",
                ]
                if args.jit:
                    row += [
                        f"{ms['ours xla']:.2f}",
                        f"{ms['anchor xla']:.2f}",
                        f"{ms['xla ratio']:.2f}",
                    ]
                gflops = case.step_flops / ms["ours"] / 1e6
                row += [f"{gflops:.0f}", f"{100 * gflops / peaks[precision]:.0f}%"]
                print(format_row(row, widths), flush=True)
                if ms["ratio"] > TARGET_RATIO:
                    misses.append(f"{case.name} {precision} {ms['ratio']:.2f}")
    finally:
        keras.mixed_precision.set_global_policy("float32")

    load = os.getloadavg()[0]
    print(f"\nload average at the end {load:.1f}")
    if load > os.cpu_count() + 0.5:  # this benchmark alone keeps it near 2
        print("The machine was busy: trust the ratios more than the times.")
    if misses:
        print(f"Slower than {TARGET_RATIO}x the anchor: " + "; ".join(misses))
    else:
        print(f"All cases within {TARGET_RATIO}x the anchor.")


if __name__ == "__main__":
    main()
