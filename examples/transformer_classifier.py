"""A Transformer encoder classifies sequences: does token A come before token B?

Built from `keras_attn.layers` (`TokenAndPositionEmbedding` and
`TransformerEncoderBlock`; Keras padding masks flow from the embedding
through the blocks and the pooling) and trained with plain `model.fit`.
The label depends on the order of two tokens anywhere in the sequence, so
the model needs both attention and positions.

    python examples/transformer_classifier.py          # under a minute on a laptop CPU
    python examples/transformer_classifier.py --tiny   # a few seconds (the test suite's setting)

`KERAS_ATTN_EXAMPLES_TINY=1` in the environment is the same as `--tiny`.
"""

import argparse
import os

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import keras  # noqa: E402
import numpy as np  # noqa: E402

from keras_attn import layers  # noqa: E402

PAD, A, B, FIRST_FILLER = 0, 1, 2, 3


def order_data(count, vocabulary_size, longest, seed):
    """Sequences of 4..`longest` filler tokens holding one A and one B; label 1 if A comes first."""
    rng = np.random.default_rng(seed)
    tokens = np.zeros((count, longest), "int32")
    labels = rng.integers(0, 2, size=count)
    for row in range(count):
        length = rng.integers(4, longest + 1)
        tokens[row, :length] = rng.integers(FIRST_FILLER, vocabulary_size, size=length)
        first, second = sorted(rng.choice(length, size=2, replace=False))
        tokens[row, first], tokens[row, second] = (A, B) if labels[row] else (B, A)
    return tokens, labels.astype("float32")


def transformer_classifier(vocabulary_size, longest, hidden_dim, num_layers):
    tokens = keras.Input((None,), dtype="int32")
    # Token + sinusoidal position embedding; mask_zero makes [PAD] a Keras mask.
    x = layers.TokenAndPositionEmbedding(vocabulary_size, longest, hidden_dim, mask_zero=True)(
        tokens
    )
    for _ in range(num_layers):
        x = layers.TransformerEncoderBlock(num_heads=4, intermediate_dim=2 * hidden_dim)(x)
    x = keras.layers.GlobalAveragePooling1D()(x)  # the mean over real tokens only
    logit = keras.layers.Dense(1)(x)
    return keras.Model(tokens, logit)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tiny", action="store_true", help="a few seconds' run (for tests)")
    parser.add_argument("--epochs", type=int, default=None)
    args = parser.parse_args(argv)
    tiny = args.tiny or os.environ.get("KERAS_ATTN_EXAMPLES_TINY") == "1"
    vocabulary_size, longest, hidden_dim, num_layers = (12, 10, 32, 1) if tiny else (50, 32, 64, 2)
    examples, epochs = (4096, 2) if tiny else (20000, 5)
    epochs = args.epochs or epochs

    keras.utils.set_random_seed(0)
    tokens, labels = order_data(examples, vocabulary_size, longest, seed=0)
    model = transformer_classifier(vocabulary_size, longest, hidden_dim, num_layers)
    model.compile(
        optimizer=keras.optimizers.Adam(1e-3),
        loss=keras.losses.BinaryCrossentropy(from_logits=True),
        metrics=[keras.metrics.BinaryAccuracy(threshold=0.0)],  # logits: 0 is p = 0.5
    )
    model.fit(tokens, labels, batch_size=64, epochs=epochs, verbose=0 if tiny else "auto")
    test_tokens, test_labels = order_data(1000, vocabulary_size, longest, seed=1)
    _, accuracy = model.evaluate(test_tokens, test_labels, verbose=0)
    print(f"accuracy on held-out sequences: {accuracy:.3f}")
    return {"accuracy": float(accuracy)}


if __name__ == "__main__":
    main()
