"""What finished translation runs do: their attention maps, where it looks, their BLEU by beam.

    python -m benchmarks.finished_runs maps --out docs/images/attention_maps.png \
        --run bahdanau=seq2seq:runs/multi30k-bahdanau \
        --run transformer=transformer:runs/multi30k-de-en-transformer --sentences 2
    python -m benchmarks.finished_runs focus seq2seq:runs/like-luong-12 [--sentences 100]
    python -m benchmarks.finished_runs beams transformer:runs/en-de-bpe --beams 1 4 5 --tokenized

A run is `MODEL:RUN_DIR` (MODEL: seq2seq or transformer), a finished run
folder of `benchmarks/multi30k.py` or `keras-attn train`: its vocabularies,
`settings.json` and best weights are loaded into the `serving.Translator` an
export serves, and its `test.src` is translated. The attention read is the
RNN's one, or the Transformer's last decoder layer's cross-attention averaged
over its heads (what its output is read from).

- `maps`: heat maps of the first `--sentences` test sentences decoded
  greedily, a row per sentence, a column per `--run LABEL=MODEL:RUN_DIR`.
- `focus`: has the attention collapsed onto one source position? Over the
  first `--sentences` sentences decoded greedily, the share of output tokens
  whose likeliest source position is the first token, and the mean entropy
  of their attention rows in nats. A model that aligns spreads its likeliest
  positions over the sentence; one that decodes from a fixed summary of the
  source puts nearly all of them on one position, rows close to one-hot.
- `beams`: test BLEU at each of `--beams` against `test.ref`: SacreBLEU on
  the text as written (cased, its 13a tokens) and lowercased, and with
  `--tokenized` BLEU on the text as tokenized (`evaluation.tokenized_bleu`,
  for runs trained on Moses-tokenized text).
"""

import argparse
import json
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

RUN_SPEC = "MODEL:RUN_DIR (MODEL: seq2seq or transformer)"


def load_run(spec, weights=None):
    """`(translator, test sentences)` of a finished run named by `RUN_SPEC`, with its best weights
    or those of `weights` (another weights file of the run)."""
    from keras_attn import run_folder, serving
    from keras_attn.jobs.translation import load_run as load_task

    _, run_dir = spec.split(":", 1)
    with open(run_folder.path(run_dir, run_folder.TEST_SOURCE), encoding="utf-8") as f:
        sentences = [line.strip() for line in f]
    return serving.Translator(load_task(run_dir, weights)), sentences


def sentence_attention(translator, sentence):
    """`(weights (L, S), source tokens, output tokens)`: the last layer, heads averaged."""
    import numpy as np
    import tensorflow as tf

    out = translator.attention(tf.constant([sentence]))
    source = [t.decode() for t in out["source_tokens"].numpy()[0] if t != b"[PAD]"]
    output = [t.decode() for t in out["output_tokens"].numpy()[0] if t != b"[PAD]"]
    weights = out["cross_attention"].numpy()[0, :, -1].mean(axis=1)  # (L, S)
    return np.asarray(weights)[: len(output), : len(source)], source, output


def attention_focus(weights):
    """`(share of rows whose largest weight is on position 0, mean
    row entropy)` of `(L, S)` rows.
    """
    import numpy as np

    rows = np.asarray(weights, "float64")
    entropy = -(rows * np.log(np.clip(rows, 1e-12, None))).sum(axis=-1)
    return float(np.mean(rows.argmax(axis=-1) == 0)), float(np.mean(entropy))


def maps(args):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = [(label, *load_run(run)) for label, run in (spec.split("=", 1) for spec in args.run)]
    sentences = runs[0][2][: args.sentences]  # the first run's test sentences
    figure, axes = plt.subplots(
        len(sentences),
        len(runs),
        figsize=(5.2 * len(runs), 4.2 * len(sentences)),
        squeeze=False,
        layout="constrained",
    )
    for row, sentence in enumerate(sentences):
        for column, (label, translator, _) in enumerate(runs):
            weights, source, output = sentence_attention(translator, sentence)
            axis = axes[row][column]
            image = axis.imshow(weights, cmap="viridis", vmin=0.0, vmax=1.0, aspect="auto")
            axis.set_xticks(range(len(source)), source, rotation=90, fontsize=7)
            axis.set_yticks(range(len(output)), output, fontsize=7)
            axis.set_title(label, fontsize=9)
    figure.colorbar(image, ax=axes, shrink=0.6, label="attention weight")
    figure.savefig(args.out, dpi=80)
    print(f"wrote {args.out}")


def focus(args):
    translator, sentences = load_run(args.run)
    sentences = sentences[: args.sentences]
    first = entropy = rows = 0.0
    for sentence in sentences:
        weights, _, _ = sentence_attention(translator, sentence)
        share, mean_entropy = attention_focus(weights)
        first, entropy, rows = (
            first + share * len(weights),
            entropy + mean_entropy * len(weights),
            rows + len(weights),
        )
    print(
        f"{args.run}: {len(sentences)} sentences, {rows:.0f} output tokens; likeliest source "
        f"position the first: {first / rows:.1%}; mean attention entropy {entropy / rows:.3f} nats"
    )


def beams(args):
    import tensorflow as tf

    from keras_attn import evaluation, run_folder

    translator, sentences = load_run(args.run, args.weights)
    with open(
        run_folder.path(args.run.split(":", 1)[1], run_folder.TEST_REFERENCE), encoding="utf-8"
    ) as f:
        references = [line.rstrip("\n") for line in f]
    for beam_width in args.beams:
        hypotheses = []
        for start in range(0, len(sentences), args.batch_size):
            out = translator.translate(
                tf.constant(sentences[start : start + args.batch_size]), tf.constant(beam_width)
            )
            hypotheses += [text.decode() for text in out["translation"].numpy()]
        scores = evaluation.bleu(hypotheses, references)
        row = {
            "beam": beam_width,
            "bleu": round(scores["bleu"], 2),
            "bleu_tok_lc": round(scores["bleu_tok_lc"], 2),
        }
        if args.tokenized:
            row["bleu_tokenized"] = round(
                evaluation.tokenized_bleu(hypotheses, references)["bleu_tokenized"], 2
            )
        print(json.dumps(row), flush=True)


def main():
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    commands = parser.add_subparsers(dest="command", required=True)
    drawn = commands.add_parser("maps", help="attention heat maps, a column per run")
    drawn.add_argument("--run", action="append", required=True, help=f"LABEL={RUN_SPEC}")
    drawn.add_argument("--sentences", type=int, default=2)
    drawn.add_argument("--out", default="docs/images/attention_maps.png")
    focused = commands.add_parser(
        "focus", help="has the attention collapsed onto one source position?"
    )
    focused.add_argument("run", help=RUN_SPEC)
    focused.add_argument("--sentences", type=int, default=100)
    scored = commands.add_parser("beams", help="test BLEU at several beam widths")
    scored.add_argument("run", help=RUN_SPEC)
    scored.add_argument("--beams", type=int, nargs="+", default=[1, 4, 5])
    scored.add_argument(
        "--tokenized", action="store_true", help="also BLEU on the text as tokenized"
    )
    scored.add_argument("--batch-size", type=int, default=64)
    scored.add_argument(
        "--weights",
        help="a weights file of the run to use instead of its best weights, e.g. "
        "RUN_DIR/epochs/epoch-50.weights.h5 (one epoch, not averaged)",
    )
    args = parser.parse_args()
    {"maps": maps, "focus": focus, "beams": beams}[args.command](args)


if __name__ == "__main__":
    main()
