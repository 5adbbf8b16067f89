"""Long sequences: time and peak memory of an encoder-block training step against length.

    python -m benchmarks.long_sequences [--lengths 128 256 ... 8192] [--tokens 65536]
        [--out docs/images/long_sequences.png] [--memory-limit-gb 20]

One `TransformerEncoderBlock` (width 256, 8 heads, FFN 1024, float32), forward
and backward, batch × length = `--tokens` (so the linear parts cost the same at
every length and the growth is attention's). Each (path, length) runs in its
own process, so its peak resident memory (`ru_maxrss`) is its own and a case
that exhausts memory (capped with RLIMIT_AS) only ends itself. Paths: the
plain one (`memory_efficient=False`, the (B, h, T, T) weights) and the
memory-efficient one (`memory_efficient=True`, key blocks of 512). Then one
more case: batch 8 at the longest length, where the plain path does not fit.
Prints a table and the fitted exponents (time ∝ T^k at constant tokens: k ≈ 1
for attention-bound steps, 0 when linear parts dominate), plots to `--out`.
"""

import argparse
import json
import os
import subprocess
import sys
import time

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")

CHILD = r"""
import json, os, resource, sys, time
os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
limit = int(float(sys.argv[4]) * 2**30)
resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
import numpy as np, tensorflow as tf, keras
from keras_attn.layers import TransformerEncoderBlock
path, length, batch = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
block = TransformerEncoderBlock(num_heads=8, intermediate_dim=1024)
block.build((batch, length, 256))
for layer in block._flatten_layers():
    if hasattr(layer, "memory_efficient"):
        layer.memory_efficient = path == "blockwise"
x = tf.random.normal((batch, length, 256))
@tf.function
def step(x):
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(block(x, training=True) ** 2)
    return tape.gradient(loss, block.trainable_weights)
step(x)  # trace and warm up
times = []
for _ in range(3):
    start = time.perf_counter()
    grads = step(x)
    float(tf.reduce_sum(grads[0]))
    times.append(time.perf_counter() - start)
peak_gb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
print(json.dumps({"seconds": sorted(times)[1], "peak_gb": peak_gb}))
"""


def run_case(path, length, batch, memory_limit_gb):
    started = time.time()
    result = subprocess.run(
        [sys.executable, "-c", CHILD, path, str(length), str(batch), str(memory_limit_gb)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=1800,
    )
    lines = [line for line in result.stdout.splitlines() if line.startswith("{")]
    if result.returncode != 0 or not lines:
        reason = (
            "out of memory"
            if (
                "alloc" in result.stderr.lower()
                or "memory" in result.stderr.lower()
                or result.returncode < 0
            )
            else result.stderr.strip().splitlines()[-1:]
        )
        return {
            "path": path,
            "length": length,
            "batch": batch,
            "failed": str(reason),
            "wall": round(time.time() - started),
        }
    return {"path": path, "length": length, "batch": batch, **json.loads(lines[-1])}


def fitted_exponent(rows):
    import numpy as np

    ok = [r for r in rows if "seconds" in r]
    if len(ok) < 2:
        return float("nan")
    return float(
        np.polyfit(np.log([r["length"] for r in ok]), np.log([r["seconds"] for r in ok]), 1)[0]
    )


def plot(rows, out):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, (timing, memory) = plt.subplots(1, 2, figsize=(11, 4.2))
    for path, style in (("plain", "o-"), ("blockwise", "s-")):
        ok = [r for r in rows if r["path"] == path and "seconds" in r and r.get("sweep")]
        lengths = [r["length"] for r in ok]
        label = f"{path} (time ∝ T^{fitted_exponent(ok):.2f})"
        timing.loglog(lengths, [r["seconds"] for r in ok], style, base=2, label=label)
        memory.loglog(lengths, [r["peak_gb"] for r in ok], style, base=2, label=path)
    timing.set(
        xlabel="sequence length T (batch × T constant)",
        ylabel="seconds per training step",
        title="encoder block, forward + backward",
    )
    memory.set(
        xlabel="sequence length T (batch × T constant)",
        ylabel="peak resident memory (GB)",
        title="peak memory of the process",
    )
    for axis in (timing, memory):
        axis.grid(True, which="both", alpha=0.3)
        axis.legend()
    figure.tight_layout()
    figure.savefig(out, dpi=90)


def main():
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--lengths", type=int, nargs="+", default=[128, 256, 512, 1024, 2048, 4096, 8192]
    )
    parser.add_argument("--tokens", type=int, default=65536, help="batch × length")
    parser.add_argument("--memory-limit-gb", type=float, default=20.0)
    parser.add_argument(
        "--out", default=os.path.join(os.path.dirname(__file__), "long_sequences.png")
    )
    args = parser.parse_args()

    rows = []
    print(f"{'path':10} {'length':>6} {'batch':>5} {'s/step':>8} {'peak GB':>8}")
    cases = [
        (path, length, max(1, args.tokens // length), True)
        for length in args.lengths
        for path in ("plain", "blockwise")
    ]
    longest = max(args.lengths)
    if args.tokens // longest != 8:  # batch 8 at the longest length, unless the sweep has it
        cases += [(path, longest, 8, False) for path in ("plain", "blockwise")]
    for path, length, batch, sweep in cases:
        row = run_case(path, length, batch, args.memory_limit_gb)
        row["sweep"] = sweep
        rows.append(row)
        shown = (
            f"{row['seconds']:8.3f} {row['peak_gb']:8.2f}"
            if "seconds" in row
            else f"  {row['failed']}"
        )
        print(f"{path:10} {length:6d} {batch:5d} {shown}", flush=True)
    for path in ("plain", "blockwise"):
        sweep = [r for r in rows if r["path"] == path and r["sweep"]]
        print(f"{path}: time ∝ T^{fitted_exponent(sweep):.2f} at constant batch × T")
    plot(rows, args.out)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
