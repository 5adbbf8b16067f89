"""Has a trained translator's attention collapsed onto one source position?

    python -m benchmarks.attention_focus seq2seq:runs/like-luong-12 [--sentences 100]

For the first `--sentences` sentences of a finished run's `test.src`, decoded
greedily, prints the share of output tokens whose likeliest source position is
the first token, and the mean entropy of their attention rows in nats (the
attention of `benchmarks/attention_maps.py`: the RNN's one, the Transformer's
last layer averaged over its heads). A model that aligns spreads its likeliest
positions over the sentence; one that decodes from a fixed summary of the
source puts nearly all of them on one position, with rows close to one-hot.
"""


import numpy as np

from benchmarks.attention_maps import load_run, run_parser, sentence_attention  # noqa: E402


def attention_focus(weights):
    """`(share of rows whose largest weight is on position 0, mean row entropy)` of `(L, S)` rows."""
    rows = np.asarray(weights, "float64")
    entropy = -(rows * np.log(np.clip(rows, 1e-12, None))).sum(axis=-1)
    return float(np.mean(rows.argmax(axis=-1) == 0)), float(np.mean(entropy))


def main():
    parser = run_parser(__doc__)
    parser.add_argument("--sentences", type=int, default=100)
    args = parser.parse_args()
    translator, sentences = load_run(args.run)
    sentences = sentences[: args.sentences]
    first = entropy = rows = 0.0
    for sentence in sentences:
        weights, _, _ = sentence_attention(translator, sentence)
        share, mean_entropy = attention_focus(weights)
        first, entropy, rows = first + share * len(weights), entropy + mean_entropy * len(weights), rows + len(weights)
    print(
        f"{args.run}: {len(sentences)} sentences, {rows:.0f} output tokens; likeliest source position the "
        f"first: {first / rows:.1%}; mean attention entropy {entropy / rows:.3f} nats"
    )


if __name__ == "__main__":
    main()
