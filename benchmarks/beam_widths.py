"""Test BLEU of a finished translation run at several beam widths.

    python -m benchmarks.beam_widths transformer:runs/multi30k-en-de-transformer --beams 1 4 5 --tokenized

Loads a finished run folder (`MODEL:RUN_DIR`, as in `attention_maps.py`: its
vocabularies, settings and best weights), translates its `test.src` through
the same `serving.Translator` an export serves at each beam width, and scores
against `test.ref`: SacreBLEU on the text as written (cased, its 13a tokens)
and lowercased, and with `--tokenized` BLEU on the text as tokenized
(`evaluation.tokenized_bleu`, for runs trained on Moses-tokenized text).
"""

import json
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

from benchmarks.attention_maps import load_run, run_parser  # noqa: E402


def main():
    parser = run_parser(__doc__)
    parser.add_argument("--beams", type=int, nargs="+", default=[1, 4, 5])
    parser.add_argument("--tokenized", action="store_true", help="also BLEU on the text as tokenized")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--weights", help="a weights file of the run to use instead of its best weights, e.g. "
                                          "RUN_DIR/epochs/epoch-50.weights.h5 (one epoch, not averaged)")
    args = parser.parse_args()

    import tensorflow as tf

    from keras_attn import evaluation, run_folder

    translator, sentences = load_run(args.run, args.weights)
    with open(run_folder.path(args.run.split(":", 1)[1], run_folder.TEST_REFERENCE), encoding="utf-8") as f:
        references = [line.rstrip("\n") for line in f]
    for beam_width in args.beams:
        hypotheses = []
        for start in range(0, len(sentences), args.batch_size):
            out = translator.translate(tf.constant(sentences[start:start + args.batch_size]), tf.constant(beam_width))
            hypotheses += [text.decode() for text in out["translation"].numpy()]
        scores = evaluation.bleu(hypotheses, references)
        row = {"beam": beam_width, "bleu": round(scores["bleu"], 2), "bleu_tok_lc": round(scores["bleu_tok_lc"], 2)}
        if args.tokenized:
            row["bleu_tokenized"] = round(evaluation.tokenized_bleu(hypotheses, references)["bleu_tokenized"], 2)
        print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
