"""Bahdanau attention in a few lines: an RNN encoder-decoder learns to reverse sequences.

The model is a `Seq2SeqBackbone`: two of `keras_attn.layers`, a bidirectional
`RNNEncoder` and an `AttentionDecoder` with `attention="bahdanau"`, trained with plain
`model.fit` under `tf.distribute.MirroredStrategy`: every local GPU, or the
devices given with `--devices`. Then it decodes held-out sequences greedily
and prints the exact-match rate.

    python examples/bahdanau_seq2seq.py                  # about a minute on a laptop CPU
    python examples/bahdanau_seq2seq.py --tiny           # a few seconds (the test suite's setting)
    python examples/bahdanau_seq2seq.py --devices /cpu:0 /cpu:1   # needs 2 logical CPUs

`KERAS_ATTN_EXAMPLES_TINY=1` in the environment is the same as `--tiny`.
"""

import argparse
import os

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from keras_attn import decoding  # noqa: E402
from keras_attn.models import Seq2SeqBackbone  # noqa: E402
from pipelines.special_tokens import PAD_ID  # noqa: E402
from pipelines.synthetic import reversal_task  # noqa: E402


def bahdanau_seq2seq(vocabulary_size, hidden_dim):
    """Embedding → bidirectional LSTM → LSTM decoder attending with vᵀ tanh(W s + U h).

    The backbone's `encoder` gives every encoder state h_j = [h→_j; h←_j] and the final
    states the decoder starts from; its `decoder` runs over the whole `target_in`
    (teacher forcing), step by step inside, attending to the h_j at each step.
    """
    return Seq2SeqBackbone(
        vocabulary_size,
        vocabulary_size,
        hidden_dim=hidden_dim,
        bidirectional=True,
        attention="bahdanau",
        dropout=0.0,
    )


def exact_match(model, source, target):
    """Greedy decoding with the cached stepper; the share of outputs equal to the target."""
    tokens = decoding.greedy_search(decoding.Stepper(model), source, target.shape[1])[
        "tokens"
    ].numpy()
    lengths = (target != PAD_ID).sum(1) - 1  # output tokens, [EOS] included
    return float(
        np.mean(
            [
                tokens.shape[1] >= n and np.array_equal(tokens[i, :n], target[i, 1 : n + 1])
                for i, n in enumerate(lengths)
            ]
        )
    )


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tiny", action="store_true", help="a few seconds' run (for tests)")
    parser.add_argument("--devices", nargs="+", default=None, help="MirroredStrategy's devices")
    parser.add_argument("--epochs", type=int, default=None)
    args = parser.parse_args(argv)
    tiny = args.tiny or os.environ.get("KERAS_ATTN_EXAMPLES_TINY") == "1"
    vocabulary_size, longest, hidden_dim = (10, 6, 32) if tiny else (20, 16, 64)
    examples, epochs = (6400, 1) if tiny else (20000, 5)
    epochs = args.epochs or epochs

    keras.utils.set_random_seed(0)
    source, target = reversal_task(examples, vocabulary_size, longest, seed=0)
    strategy = tf.distribute.MirroredStrategy(args.devices)
    print(f"{strategy.num_replicas_in_sync} replica(s): {strategy.extended.worker_devices}")
    with strategy.scope():  # variables are mirrored on every replica
        model = bahdanau_seq2seq(vocabulary_size, hidden_dim)
        model.compile(
            optimizer=keras.optimizers.Adam(2e-2, clipnorm=1.0),
            loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True, ignore_class=PAD_ID),
        )
    # fit splits each global batch of 64 between the replicas.
    model.fit(
        {"source": source, "target_in": target[:, :-1]},
        target[:, 1:],
        batch_size=64,
        epochs=epochs,
        verbose=0 if tiny else "auto",
    )
    test_source, test_target = reversal_task(200, vocabulary_size, longest, seed=1)
    score = exact_match(model, test_source, test_target)
    print(f"exact match on held-out sequences: {score:.3f}")
    return {"exact_match": score, "replicas": strategy.num_replicas_in_sync}


if __name__ == "__main__":
    main()
