"""An export's Multi30k scores the way the published de→en baselines were scored.

    python -m benchmarks.published_scoring saved_models/transformer/1
    python -m benchmarks.published_scoring saved_models/seq2seq/1 --caps 24 --out out/bahdanau.json
    python -m benchmarks.published_scoring EXPORT --src test.de --ref test.en

The published rows we set our scores beside (benchmarks/REFERENCES.md: the
3+3 Transformer's 36.52, the Bahdanau model's 28.30, the GRU's 20.61)
decoded greedily in a loop of 50 (Transformer) or 25 (the RNNs) steps and
dropped the last token
of what came out, [EOS] or not: at most 49 or 24 output words. They scored
corpus BLEU-4 (uniform weights, no smoothing) on spaCy's English tokens,
lowercased, hypotheses and references alike. Our other figures are beam 4
and SacreBLEU's 13a tokens, lowercased.

This script translates the test split with the export's `translate`
signature, greedy and beam 4, and scores every translation that way after
cutting it to its first N spaCy tokens for each cap N of `--caps` (default
49 and 24, the published caps). Our decoders' own budget is in target
WordPieces, min(64, ⌈1.5 S⌉ + 10) for a source of S WordPieces with the
Multi30k settings, which no cap in words can be set from, so the cut is
made on the words of the finished translation: the same words a 50- or
25-step word-level loop would have kept, as long as our own budget did not
end the translation first (the script counts the greedy translations our
budget ended: they have no [EOS]). Beside each: SacreBLEU 13a lowercased of the
uncut translations, the figure the other quality benchmarks give.

spaCy's rule-based English tokenizer (`spacy.blank("en")`, no model to
download; the published runs used `en_core_web_sm`'s, built from the same
English rules) is a benchmark-only requirement: `pip install -e ".[bench]"`.
Whitespace tokens, which spaCy makes of repeated spaces, are dropped (test2016
has none). The data defaults to test2016 in ../shared/data/multi30k (read,
never copied).
"""

import argparse
import json
import os
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

DATA = os.path.normpath(
    os.path.join(os.path.dirname(os.path.abspath(__file__)), "../../shared/data/multi30k/raw")
)
PUBLISHED_CAPS = (49, 24)  # words kept by a 50- and a 25-step loop that drops its last token
BEAMS = (1, 4)


def spacy_tokenizer():
    """`text -> lowercased spaCy English tokens`, the published runs' tokenization."""
    import spacy

    tokenizer = spacy.blank("en").tokenizer
    return lambda text: [token.text.lower() for token in tokenizer(text) if not token.is_space]


def corpus_bleu(hypotheses, references):
    """Corpus BLEU-4 of token lists: uniform weights, no smoothing, one reference each.

    The formula of torchtext's `bleu_score` and of tensorflow/nmt's
    `compute_bleu` (HF `evaluate`'s "bleu"), computed by SacreBLEU on the
    tokens joined with spaces, with no tokenization or casing of its own.

    Args:
        hypotheses: lists of tokens.
        references: lists of tokens, aligned with `hypotheses`.

    Returns:
        BLEU × 100.

    Example: matched n-grams (1- to 4-grams) 6/7, 4/6, 2/5, 1/4 in the first
    pair and 3/3, 1/2, 0/1, 0/0 in the second; 10 hypothesis tokens against
    11 reference tokens, so the brevity penalty is exp(1 − 11/10), and BLEU =
    exp(−0.1) · (9/10 · 5/8 · 2/6 · 1/4)^(1/4) = 42.10:

    >>> hypotheses = [["a", "cat", "sat", "on", "the", "mat", "."], ["two", "dogs", "."]]
    >>> references = [["a", "cat", "sat", "on", "a", "mat", "."], ["two", "dogs", "run", "."]]
    >>> round(corpus_bleu(hypotheses, references), 2)
    42.1
    >>> corpus_bleu([["the", "cat", "sat", "on", "mats"]], [["a", "cat", "sat", "on", "a", "mat"]])
    0.0
    >>> corpus_bleu([["a", "cat", "."]], [["a", "cat", "."]])
    0.0

    (No 4-gram matched, or none to match: 0 without smoothing.)
    """
    import sacrebleu

    if len(hypotheses) != len(references):
        raise ValueError(f"{len(hypotheses)} hypotheses but {len(references)} references.")
    bleu = sacrebleu.metrics.BLEU(tokenize="none", smooth_method="none", force=True)
    joined = lambda rows: [" ".join(tokens) for tokens in rows]  # noqa: E731
    return bleu.corpus_score(joined(hypotheses), [joined(references)]).score


def load(export_dir):
    """The export's SavedModel (TensorFlow and tensorflow-text only)."""
    import tensorflow as tf
    import tensorflow_text  # noqa: F401  (registers the tokenizer ops)

    return tf.saved_model.load(export_dir)


def batches(sentences, batch_size):
    import tensorflow as tf

    for start in range(0, len(sentences), batch_size):
        yield tf.constant(sentences[start : start + batch_size])


def translate(saved_model, sentences, beam_width, batch_size=64):
    """The translations of the export's `translate` signature."""
    import tensorflow as tf

    signature = saved_model.signatures["translate"]
    translations = []
    for batch in batches(sentences, batch_size):
        out = signature(text=batch, beam_width=tf.constant(beam_width))
        translations += [t.decode("utf-8") for t in out["translation"].numpy()]
    return translations


def ended_by_budget(saved_model, sentences, batch_size=64):
    """How many greedy translations our decoder's own step budget ended.

    A translation the budget cuts off has no [EOS]; the export's
    `attention` signature (greedy) returns the output tokens that show it.
    """
    signature = saved_model.signatures["attention"]
    ended = 0
    for batch in batches(sentences, batch_size):
        for row in signature(text=batch)["output_tokens"].numpy():
            emitted = [token for token in row if token != b"[PAD]"]
            ended += bool(emitted) and b"[EOS]" not in emitted
    return ended


def scores(translations, references, tokenize, caps):
    """Published-way BLEU at each cap, and SacreBLEU 13a lowercased uncut."""
    from keras_attn import evaluation

    hypotheses = [tokenize(t) for t in translations]
    row = {"sacrebleu_13a_lc": round(evaluation.bleu(translations, references)["bleu_tok_lc"], 2)}
    reference_tokens = [tokenize(r) for r in references]
    for cap in caps:
        row[f"bleu_cap_{cap}"] = round(
            corpus_bleu([h[:cap] for h in hypotheses], reference_tokens), 2
        )
        row[f"cut_by_cap_{cap}"] = sum(len(h) > cap for h in hypotheses)
    row["words"] = sum(map(len, hypotheses))
    return row


def main():
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("export", help="an export folder, saved_models/<name>/<version>")
    parser.add_argument("--src", default=os.path.join(DATA, "test_2016_flickr.de.gz"))
    parser.add_argument("--ref", default=os.path.join(DATA, "test_2016_flickr.en.gz"))
    parser.add_argument(
        "--caps",
        type=int,
        nargs="+",
        default=list(PUBLISHED_CAPS),
        help="output words kept, each scored apart (default: 49 and 24, as published)",
    )
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--out", default=None, help="also write the scores as JSON here")
    args = parser.parse_args()
    if not os.path.isfile(os.path.join(args.export, "saved_model.pb")):
        parser.error(f"{args.export}: not a SavedModel folder")
    if min(args.caps) < 1:
        parser.error("--caps must be at least 1")
    try:
        tokenize = spacy_tokenizer()
    except ImportError:
        parser.error('spaCy is not installed: pip install -e ".[bench]"')

    from pipelines import text

    try:
        test = text.read_parallel(args.src, args.ref)
    except text.DataError as error:
        parser.error(str(error))
    saved_model = load(args.export)
    result = {"export": args.export, "src": args.src, "ref": args.ref, "sentences": len(test)}
    result["greedy_ended_by_our_budget"] = ended_by_budget(
        saved_model, test.sources, args.batch_size
    )
    print(
        f"{args.export}: {len(test)} sentences of {args.src}; greedy translations ended by our own "
        f"step budget (no [EOS]): {result['greedy_ended_by_our_budget']}"
    )
    print(
        "decoding   SacreBLEU 13a lc (uncut)   "
        + "   ".join(f"BLEU, cap {c} (cut)" for c in args.caps)
    )
    for beam_width in BEAMS:
        started = time.perf_counter()
        translations = translate(saved_model, test.sources, beam_width, args.batch_size)
        row = scores(translations, test.targets, tokenize, args.caps)
        row["seconds"] = round(time.perf_counter() - started, 1)
        name = "greedy" if beam_width == 1 else f"beam {beam_width}"
        result[name] = row
        cells = "   ".join(
            f"{row[f'bleu_cap_{c}']:>9.2f} ({row[f'cut_by_cap_{c}']:>3})" for c in args.caps
        )
        print(f"{name:<10} {row['sacrebleu_13a_lc']:>24.2f}   {cells}")
    if args.out:
        with open(args.out, "w") as f:
            json.dump(result, f, indent=2)


if __name__ == "__main__":
    main()
