"""Sentences per second of a trained run's translator: cached greedy and beam 4.

    python -m benchmarks.translation_speed seq2seq:runs/multi30k-bahdanau [--batch-size 64]

Loads a finished run folder (`MODEL:RUN_DIR`, as in `attention_maps.py`), and
translates its whole `test.src` (Multi30k test2016 for `benchmarks/multi30k.py`
runs) in batches through the same `serving.Translator` an export serves, once to
warm up (traces) and once timed, at beam width 1 (greedy) and 4.
"""

import os
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

from benchmarks.attention_maps import load_run, run_parser  # noqa: E402


def main():
    parser = run_parser(__doc__)
    parser.add_argument("--batch-size", type=int, default=64)
    args = parser.parse_args()

    import tensorflow as tf

    translator, sentences = load_run(args.run)
    batches = [sentences[i : i + args.batch_size] for i in range(0, len(sentences), args.batch_size)]
    for beam_width in (1, 4):
        for timed in (False, True):
            started, cpu = time.perf_counter(), time.process_time()
            for batch in batches:
                translator.translate(tf.constant(batch), tf.constant(beam_width))
            wall, cpu = time.perf_counter() - started, time.process_time() - cpu
        print(f"beam {beam_width}: {len(sentences)} sentences in {wall:.1f} s "
              f"({len(sentences) / wall:.1f} sentences/s, {cpu / wall:.2f} cores busy), batch {args.batch_size}")


if __name__ == "__main__":
    main()
