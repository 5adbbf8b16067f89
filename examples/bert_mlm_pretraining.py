"""BERT's masked-language-model pretraining, built from
`keras_attn.layers`, trained with `model.fit`.

The model is BERT's encoder (`BertEmbedding`, `TransformerEncoderBlock`s
with GELU) and its MLM head (`MaskedLMHead`, whose output weights are the
token embedding itself, run only at the masked positions). The data is the
built-in generated document corpus, masked in tf.data by
`pipelines.pretraining`: 15% of the tokens, 80% of them replaced by
[MASK], 10% by a random token, 10% kept, and a new mask every epoch.

    python examples/bert_mlm_pretraining.py          # a few minutes on a laptop CPU
    python examples/bert_mlm_pretraining.py --tiny   # seconds (the test suite's setting)

`KERAS_ATTN_EXAMPLES_TINY=1` in the environment is the same as `--tiny`.
"""

import argparse
import os

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import keras  # noqa: E402
import tensorflow as tf  # noqa: E402

from keras_attn import layers  # noqa: E402
from pipelines import pretraining, synthetic_documents, tokenizers  # noqa: E402
from pipelines.preprocessors import BertPreprocessor  # noqa: E402


def bert_mlm(vocabulary_size, max_length, hidden_dim, num_layers, num_heads):
    token_ids = keras.Input((None,), dtype="int32", name="token_ids")
    segment_ids = keras.Input((None,), dtype="int32", name="segment_ids")
    mask_positions = keras.Input((None,), dtype="int32", name="mask_positions")
    # Token + segment + learned position embeddings; [PAD] (id 0) becomes the Keras mask.
    embedding = layers.BertEmbedding(
        vocabulary_size, max_length, num_segments=2, hidden_dim=hidden_dim
    )
    x = embedding(token_ids, segment_ids)
    for _ in range(num_layers):  # post-norm blocks, as in BERT
        x = layers.TransformerEncoderBlock(
            num_heads, intermediate_dim=4 * hidden_dim, activation="gelu", layer_norm_epsilon=1e-12
        )(x)
    # Logits at the masked positions only, projected with the token embedding table itself.
    logits = layers.MaskedLMHead(vocabulary_size, token_embedding=embedding.token_embedding)(
        x, mask_positions
    )
    return keras.Model(
        {"token_ids": token_ids, "segment_ids": segment_ids, "mask_positions": mask_positions},
        logits,
    )


def masked_batches(corpus, preprocessor, epoch, **settings):
    """(features, original tokens, weights): the weights are 0 where a row has fewer masks."""
    data = pretraining.pretraining_dataset(corpus, preprocessor, epoch=epoch, **settings)
    return data.map(
        lambda features, labels: (features, labels["mlm_labels"], labels["mlm_weights"])
    )


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tiny", action="store_true", help="a few seconds' run (for tests)")
    parser.add_argument("--epochs", type=int, default=None)
    args = parser.parse_args(argv)
    tiny = args.tiny or os.environ.get("KERAS_ATTN_EXAMPLES_TINY") == "1"
    documents, hidden_dim, num_layers, max_length = (800, 64, 2, 32) if tiny else (3000, 128, 2, 64)
    epochs = args.epochs or (6 if tiny else 10)
    settings = dict(batch_size=32, max_predictions=max_length // 6, seed=0)

    keras.utils.set_random_seed(0)
    docs = synthetic_documents.document_corpus(documents, seed=0)
    train_docs, test_docs = docs[: -documents // 10], docs[-documents // 10 :]
    # An uncased WordPiece vocabulary learned from the training documents.
    vocabulary = tokenizers.learn_wordpiece_vocabulary(
        [sentence for doc in train_docs for sentence in doc], vocabulary_size=1000, lowercase=True
    )
    tokenizer = tokenizers.WordPieceTokenizer(vocabulary, lowercase=True)
    train = pretraining.tokenize_documents(train_docs, tokenizer)
    test = pretraining.tokenize_documents(test_docs, tokenizer)
    preprocessor = BertPreprocessor(tokenizer, max_length)  # the vocabulary and the tokens per pair

    # Epoch e's pairs and masks come from a dataset of its own: a new mask every epoch.
    steps = int(masked_batches(train, preprocessor, 0, **settings).cardinality())
    data = tf.data.Dataset.range(epochs).flat_map(
        lambda epoch: masked_batches(train, preprocessor, epoch, **settings)
    )

    model = bert_mlm(len(vocabulary), max_length, hidden_dim, num_layers, num_heads=2)
    model.compile(
        optimizer=keras.optimizers.AdamW(2e-3, weight_decay=0.01),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        weighted_metrics=["accuracy"],  # over the real masked positions only
    )
    model.fit(data, epochs=epochs, steps_per_epoch=steps, shuffle=False, verbose=0 if tiny else 2)
    _, accuracy = model.evaluate(masked_batches(test, preprocessor, 0, **settings), verbose=0)
    print(f"masked-token accuracy on held-out documents: {accuracy:.3f}")
    return {"accuracy": float(accuracy), "steps": steps * epochs}


if __name__ == "__main__":
    main()
