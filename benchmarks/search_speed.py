"""Greedy and beam-4 search of a trained Transformer run, in process, at batches of 1, 32 and 256 sentences.

    python benchmarks/search_speed.py RUN_DIR [--export]

Runs as a file, so it can time another checkout's `keras_attn` (the one on
`PYTHONPATH`), alternated with this one's, as the session-32 rows of
benchmarks/RESULTS.md did ("Speed against CTranslate2 and PyTorch"):

    git worktree add /tmp/before 7f42c31
    for tree in /tmp/before . /tmp/before . ; do
        (cd $tree && TF_NUM_INTRAOP_THREADS=2 PYTHONPATH=$tree python /path/to/benchmarks/search_speed.py RUN_DIR)
    done

Sources: one 14-token sentence (batch 1), else the first 32 or 256 lines of
the run's test split, tokenized by the run's preprocessor; each search is a
`tf.function` over `decoding.greedy_search` / `beam_search` with the
export's step budget (`max_decode_length`), traced once, then timed (20
calls at batch 1, 3 otherwise). `--export` times two `serving.export`s of
the run's `Translator` instead (tracing and writing the signatures).
"""

import argparse
import os
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import tensorflow as tf  # noqa: E402

from keras_attn import decoding, serving  # noqa: E402
from keras_attn.jobs.translation import load_run  # noqa: E402

SENTENCE = "a man in a red shirt is riding a bike down the street ."


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run_dir")
    parser.add_argument("--export", action="store_true")
    args = parser.parse_args()
    task = load_run(args.run_dir)
    if args.export:
        for i in range(2):
            started = time.perf_counter()
            serving.export(serving.Translator(task), tempfile.mkdtemp(), "translator")
            print(f"export {i + 1}: {time.perf_counter() - started:.1f} s", flush=True)
        return
    preprocessor, stepper = task.preprocessor, task.stepper
    with open(os.path.join(args.run_dir, "test.src"), encoding="utf-8") as f:
        lines = f.read().splitlines()

    def budget(source):
        return decoding.max_decode_length(source, cap=preprocessor.max_length)

    greedy = tf.function(lambda source: decoding.greedy_search(stepper, source, budget(source))["tokens"])
    beam = tf.function(lambda source: decoding.beam_search(stepper, source, budget(source), beam_width=4)["tokens"])
    for size in (1, 32, 256):
        texts = [SENTENCE] if size == 1 else lines[:size]
        source = preprocessor.tokenize_source(tf.constant(texts))[0]
        for name, search in (("greedy", greedy), ("beam4", beam)):
            tokens = search(source)
            calls = 20 if size == 1 else 3
            started = time.perf_counter()
            for _ in range(calls):
                tokens = search(source)
            tokens.numpy()
            print(f"{name} b{size:<4} {(time.perf_counter() - started) / calls * 1000:9.1f} ms  "
                  f"steps {tokens.shape[1]}", flush=True)


if __name__ == "__main__":
    sys.exit(main())
