"""Attention heat maps of trained translation runs, side by side, for the README.

    python -m benchmarks.attention_maps --out docs/images/attention_maps.png \
        --run bahdanau=seq2seq:runs/multi30k-bahdanau \
        --run transformer=transformer:runs/multi30k-de-en-transformer \
        --sentences 2

Each `--run LABEL=MODEL:RUN_DIR` names a finished run folder of `benchmarks/multi30k.py`
(or of `keras-attn train`): its vocabularies, `settings.json` and best weights are
loaded, and the first `--sentences` sentences of its `test.src` are translated greedily.
A row per sentence, a column per run: the RNN's one attention, and the Transformer's
last decoder layer's cross-attention averaged over its heads (what its output is read
from). Rebuilding the model takes the settings the run folder keeps, so only runs of
those two jobs load.
"""

import argparse
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")


def load_translator(model, run_dir, weights=None):
    """An in-process `serving.Translator` of a finished run folder, with its best weights or those of `weights`
    (`model`: the family the `RUN_SPEC` names; the run folder's settings say it too)."""
    from keras_attn import serving
    from keras_attn.jobs.translation import load_run

    return serving.Translator(load_run(run_dir, weights))


def load_weights_of_any_age(task, path):
    """Loads a run's weights file into `task`: the task's own, or a bare backbone's (older run folders
    saved the backbone alone)."""
    try:
        task.load_weights(path)
    except ValueError:
        task.backbone.load_weights(path)


RUN_SPEC = "MODEL:RUN_DIR (MODEL: seq2seq or transformer)"


def run_parser(doc):
    """An argument parser described by a script's `doc`, with its positional `run` (`RUN_SPEC`)."""
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run", help=RUN_SPEC)
    return parser


def load_run(spec, weights=None):
    """`(translator, test sentences)` of a finished run named by `RUN_SPEC` (`weights`: another weights file)."""
    model, run_dir = spec.split(":", 1)
    from keras_attn import run_folder

    with open(run_folder.path(run_dir, run_folder.TEST_SOURCE), encoding="utf-8") as f:
        sentences = [line.strip() for line in f]
    return load_translator(model, run_dir, weights), sentences


def sentence_attention(translator, sentence):
    """`(weights (L, S), source tokens, output tokens)`: the last layer, heads averaged."""
    import numpy as np
    import tensorflow as tf

    out = translator.attention(tf.constant([sentence]))
    source = [t.decode() for t in out["source_tokens"].numpy()[0] if t != b"[PAD]"]
    output = [t.decode() for t in out["output_tokens"].numpy()[0] if t != b"[PAD]"]
    weights = out["cross_attention"].numpy()[0, :, -1].mean(axis=1)  # (L, S)
    return np.asarray(weights)[: len(output), : len(source)], source, output


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--run", action="append", required=True, help="LABEL=MODEL:RUN_DIR")
    parser.add_argument("--sentences", type=int, default=2)
    parser.add_argument("--out", default="docs/images/attention_maps.png")
    args = parser.parse_args()

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = []
    for spec in args.run:
        label, rest = spec.split("=", 1)
        model, run_dir = rest.split(":", 1)
        runs.append((label, load_translator(model, run_dir)))
    from keras_attn import run_folder

    with open(run_folder.path(args.run[0].split(":", 1)[1], run_folder.TEST_SOURCE)) as f:
        sentences = [line.strip() for line in f][: args.sentences]

    figure, axes = plt.subplots(
        len(sentences), len(runs), figsize=(5.2 * len(runs), 4.2 * len(sentences)),
        squeeze=False, layout="constrained",
    )
    for row, sentence in enumerate(sentences):
        for column, (label, translator) in enumerate(runs):
            weights, source, output = sentence_attention(translator, sentence)
            axis = axes[row][column]
            image = axis.imshow(weights, cmap="viridis", vmin=0.0, vmax=1.0, aspect="auto")
            axis.set_xticks(range(len(source)), source, rotation=90, fontsize=7)
            axis.set_yticks(range(len(output)), output, fontsize=7)
            axis.set_title(label, fontsize=9)
    figure.colorbar(image, ax=axes, shrink=0.6, label="attention weight")
    figure.savefig(args.out, dpi=80)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
