"""Decoding speed: cached vs uncached greedy search, beam search vs greedy.

Run from the repository root:

    python -m benchmarks.decoding             # about 2 minutes
    python -m benchmarks.decoding --quick     # fewer repeats

A randomly initialised `TransformerBackbone(..., preset="small")` (3+3 layers,
width 256, 8 heads, feed-forward 512, tied 8000-token vocabulary, dropout
0) decodes 32 sources of 10 to 30 tokens for exactly 64 tokens:
`eos_id=-1` never matches, so no sequence stops early (random weights
would emit [EOS] at random moments). Every search is a `tf.function` with
the `(None, None)` input signature of an export, traced and warmed up
once; the repeats of all searches are interleaved, so background load hits
them alike, and the medians of wall and process CPU time are reported.

- greedy, cached: `greedy_search` over `Stepper`.
- greedy, uncached: `uncached_greedy_search`, the whole model rerun on the
  growing output (the TensorFlow tutorials' loop). Goal: cached >= 10x
  faster.
- beam 4: `beam_search`, width 4, α = 0.6. Goal: <= 2.5x greedy.
- greedy, 128 rows: cached greedy search of the 32 sources repeated 4
  times: the decoder work of beam 4 without the beam bookkeeping (the
  state reordering, the selection of hypotheses), but with the encoder
  side held 4 times (beam search holds it once per source).
"""

import argparse
import os
import statistics

os.environ["TF_CPP_MIN_LOG_LEVEL"] = "2"

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from keras_attn.decoding import (  # noqa: E402
    Stepper,
    beam_search,
    greedy_search,
)
from keras_attn.models import TransformerBackbone  # noqa: E402
from benchmarks.alternate import alternate  # noqa: E402
from benchmarks.measures import uncached_greedy_search  # noqa: E402

BATCH, STEPS, VOCAB, BEAM_WIDTH = 32, 64, 8000, 4
NO_EOS = -1  # never emitted: every search runs all STEPS steps
CACHED_SPEEDUP_GOAL, BEAM_COST_GOAL = 10.0, 2.5


def make_source(rng, batch, vocab_size):
    """`(batch, 30)` ids: 10 to 30 tokens ending in [EOS], padded with 0."""
    lengths = rng.integers(10, 31, size=batch)
    source = np.zeros((batch, lengths.max()), "int32")
    for row, length in enumerate(lengths):
        source[row, : length - 1] = rng.integers(7, vocab_size, size=length - 1)
        source[row, length - 1] = 3
    return source


def time_interleaved(cases, repeats):
    """Median wall and process-CPU seconds per call, warm-up excluded (`benchmarks.alternate`)."""
    calls = {name: (lambda function=function, source=source: function(source)) for name, (function, source) in cases.items()}
    wall, cpu = alternate(calls, repeats, calls=1, warmup=1, cpu=True)
    median = statistics.median
    return (
        {name: median(times) / 1000 for name, times in wall.items()},
        {name: median(times) / 1000 for name, times in cpu.items()},
    )


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="3 repeats, not 7")
    parser.add_argument("--vocab-size", type=int, default=VOCAB)
    args = parser.parse_args()
    repeats = 3 if args.quick else 7

    keras.utils.set_random_seed(0)
    model = TransformerBackbone(
        args.vocab_size, args.vocab_size, max_sequence_length=128, preset="small", dropout=0.0
    )
    stepper = Stepper(model)
    source = make_source(np.random.default_rng(0), BATCH, args.vocab_size)

    def compiled(search):
        signature = [tf.TensorSpec([None, None], tf.int32)]
        return tf.function(search, input_signature=signature)

    greedy = compiled(lambda s: greedy_search(stepper, s, STEPS, eos_id=NO_EOS))
    uncached = compiled(
        lambda s: uncached_greedy_search(model, s, STEPS, eos_id=NO_EOS)
    )
    beam = compiled(
        lambda s: beam_search(stepper, s, STEPS, beam_width=BEAM_WIDTH, eos_id=NO_EOS)
    )
    rows = f"greedy, {BATCH * BEAM_WIDTH} rows"
    cases = {
        "greedy, cached": (greedy, source),
        "greedy, uncached": (uncached, source),
        f"beam {BEAM_WIDTH}": (beam, source),
        rows: (greedy, np.repeat(source, BEAM_WIDTH, axis=0)),
    }
    wall, cpu = time_interleaved(cases, repeats)

    print(
        f"\n{BATCH} sources of up to {source.shape[1]} tokens, {STEPS} tokens out, "
        f"vocabulary {args.vocab_size}; median of {repeats}; load average "
        f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs\n"
    )
    print("| search | ms (wall) | ms / step | ms (process CPU) |")
    print("|---|---:|---:|---:|")
    for name in cases:
        print(
            f"| {name} | {wall[name] * 1e3:.0f} | {wall[name] * 1e3 / STEPS:.1f} "
            f"| {cpu[name] * 1e3:.0f} |"
        )

    def ratio(a, b):
        return wall[a] / wall[b], cpu[a] / cpu[b]

    speedup = ratio("greedy, uncached", "greedy, cached")
    cost = ratio(f"beam {BEAM_WIDTH}", "greedy, cached")
    floor = ratio(rows, "greedy, cached")
    print(
        f"\ncached speed-up: {speedup[0]:.1f}x wall, {speedup[1]:.1f}x CPU "
        f"(goal >= {CACHED_SPEEDUP_GOAL:g}x: "
        f"{'met' if speedup[0] >= CACHED_SPEEDUP_GOAL else 'missed'})"
    )
    print(
        f"beam {BEAM_WIDTH} / greedy: {cost[0]:.2f}x wall, {cost[1]:.2f}x CPU "
        f"(goal <= {BEAM_COST_GOAL:g}x: "
        f"{'met' if cost[0] <= BEAM_COST_GOAL else 'missed'})"
    )
    print(
        f"{rows} / greedy: {floor[0]:.2f}x wall, "
        f"{floor[1]:.2f}x CPU"
    )


if __name__ == "__main__":
    main()
