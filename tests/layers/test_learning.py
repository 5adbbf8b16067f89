"""A small encoder-decoder built from the blocks learns to reverse sequences.

This proves the masks and the wiring: a decoder that could see the future
would reach perfect teacher-forced accuracy and still fail greedy decoding.
"""

import keras
import numpy as np
import pytest

from keras_attn.layers import (
    TokenAndPositionEmbedding,
    TransformerDecoderBlock,
    TransformerEncoderBlock,
)
from keras_attn.schedules import warmup_cosine

pytestmark = pytest.mark.slow  # a training run

PAD, BOS, EOS, FIRST_SYMBOL, VOCAB = 0, 1, 2, 3, 13
MAX_LENGTH = 12


def reversal_data(count, seed):
    rng = np.random.default_rng(seed)
    source = np.zeros((count, MAX_LENGTH), "int32")
    target = np.zeros((count, MAX_LENGTH + 2), "int32")
    for row in range(count):
        length = rng.integers(4, MAX_LENGTH + 1)
        symbols = rng.integers(FIRST_SYMBOL, VOCAB, size=length)
        source[row, :length] = symbols
        target[row, 0] = BOS
        target[row, 1 : length + 1] = symbols[::-1]
        target[row, length + 1] = EOS
    return source, target


def encoder_decoder(width=64, heads=4, ffn=128, layers=2):
    source = keras.Input((None,), dtype="int32", name="source")
    target_in = keras.Input((None,), dtype="int32", name="target_in")
    source_embedding = TokenAndPositionEmbedding(VOCAB, MAX_LENGTH + 2, width)
    target_embedding = TokenAndPositionEmbedding(VOCAB, MAX_LENGTH + 2, width)
    x = source_embedding(source)
    for _ in range(layers):
        x = TransformerEncoderBlock(heads, ffn)(x)
    y = target_embedding(target_in)
    for _ in range(layers):
        y = TransformerDecoderBlock(heads, ffn)(y, x)
    logits = keras.layers.Dense(VOCAB)(y)
    return keras.Model([source, target_in], logits)


def greedy_decode(model, source):
    """Uncached greedy decoding: feeds the growing prefix back each step."""
    output = np.full((len(source), 1), BOS, "int32")
    for _ in range(MAX_LENGTH + 1):
        logits = model.predict_on_batch([source, output])
        output = np.concatenate([output, logits[:, -1].argmax(-1)[:, None]], axis=1)
    return output


# Long: the translation job's learning test covers the blocks in a model.
@pytest.mark.long
def test_two_plus_two_layers_learn_to_reverse():
    """282 steps, about 25 s on 2 cores; 0.99 and 0.98 exact match seen with seeds 7 and 1."""
    keras.utils.set_random_seed(7)
    source, target = reversal_data(6000, seed=0)
    model = encoder_decoder()
    steps = 3 * -(-len(source) // 64)
    model.compile(
        # Warm-up: a post-norm Transformer at 2e-3 from step 0 can diverge.
        optimizer=keras.optimizers.Adam(warmup_cosine(2e-3, 100, steps), clipnorm=1.0),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True, ignore_class=PAD),
    )
    # built inside the first trace, it makes TensorFlow trace twice
    model.optimizer.build(model.trainable_variables)
    model.fit([source, target[:, :-1]], target[:, 1:], batch_size=64, epochs=3, verbose=0)
    test_source, test_target = reversal_data(500, seed=1)
    decoded = greedy_decode(model, test_source)
    correct = [
        np.array_equal(
            decoded[i, : np.argmax(test_target[i] == EOS) + 1],
            test_target[i, : np.argmax(test_target[i] == EOS) + 1],
        )
        for i in range(len(test_source))
    ]
    assert np.mean(correct) >= 0.95, f"exact match {np.mean(correct):.3f}"
