"""One sentence translated greedily by CTranslate2 over and over, for a native profiler to sample.

    perf record -e cpu-clock -F 1000 -o ct2.perf -- python -m benchmarks.ct2_decode_loop CT2_FOLDER --seconds 10
    perf report -i ct2.perf --no-children --sort pid --stdio            # CTranslate2's worker: the busiest thread
    perf report -i ct2.perf --no-children --tid WORKER --sort symbol --stdio

`CT2_FOLDER` is a folder of `keras-attn export-ct2`; the sentence is tokenized
once with its preprocessor, then `translate_batch` runs it (beam 1, one
intra-op thread, float32) until `--seconds` have passed, and the script
prints the translations made and the decode steps of each. Python's share
of the samples (the imports) is outside the worker thread.
"""

import argparse
import time

from keras_attn.serving.ctranslate2_export import SEARCH_OPTIONS
from keras_attn.serving.ctranslate2_translator import load_ctranslate2


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder")
    parser.add_argument("--seconds", type=float, default=10)
    parser.add_argument("--sentence", default="a man in a red shirt is riding a bike down the street .")
    args = parser.parse_args()
    translator = load_ctranslate2(args.folder, compute_type="float32", threads=1)
    (tokens,), budgets, _, _ = translator.search_inputs([args.sentence])
    count, steps, end = 0, 0, time.time() + args.seconds
    while time.time() < end:
        result = translator.translator.translate_batch([tokens], beam_size=1, max_decoding_length=int(budgets[0]),
                                                       **SEARCH_OPTIONS)
        count, steps = count + 1, steps + len(result[0].hypotheses[0]) + 1  # + [EOS]
    print(f"{count} translations, {steps / count:.1f} decode steps each, {args.seconds / count * 1000:.2f} ms each")


if __name__ == "__main__":
    main()
