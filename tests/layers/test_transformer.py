import keras
import keras_hub
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from keras_attn.layers import TransformerDecoderBlock, TransformerEncoderBlock
from tests.layers.layer_checks import check_layer

RNG = np.random.default_rng(3)
X = RNG.normal(size=(2, 6, 8)).astype("float32")
ENCODED = RNG.normal(size=(2, 7, 8)).astype("float32")
KEEP_X = np.array([[1, 1, 1, 1, 1, 1], [1, 1, 1, 1, 0, 0]], bool)
KEEP_ENC = np.array([[1, 1, 1, 0, 0, 0, 0], [1, 1, 1, 1, 1, 1, 1]], bool)


@pytest.mark.parametrize("norm_first", [False, True])
def test_encoder_block_matches_keras_hub(norm_first):
    reference = keras_hub.layers.TransformerEncoder(32, 2, normalize_first=norm_first)
    reference(X)
    ours = TransformerEncoderBlock(2, 32, norm_first=norm_first)
    ours(X)
    theirs = reference.get_weights()
    # keras-hub creates its feed-forward LayerNorm before the dense layers.
    ours.set_weights(theirs[:10] + theirs[12:16] + theirs[10:12])
    expected = np.asarray(reference(X, padding_mask=KEEP_X))
    np.testing.assert_allclose(
        np.asarray(ours(X, padding_mask=KEEP_X))[KEEP_X], expected[KEEP_X], atol=1e-5
    )


@pytest.mark.parametrize("norm_first", [False, True])
def test_decoder_block_matches_keras_hub(norm_first):
    reference = keras_hub.layers.TransformerDecoder(32, 2, normalize_first=norm_first)
    reference(X, ENCODED)
    ours = TransformerDecoderBlock(2, 32, norm_first=norm_first)
    ours(X, ENCODED)
    ours.set_weights(reference.get_weights())
    expected = np.asarray(
        reference(X, ENCODED, decoder_padding_mask=KEEP_X, encoder_padding_mask=KEEP_ENC)
    )
    output = np.asarray(
        ours(X, ENCODED, decoder_padding_mask=KEEP_X, encoder_padding_mask=KEEP_ENC)
    )
    np.testing.assert_allclose(output[KEEP_X], expected[KEEP_X], atol=1e-5)


@settings(max_examples=10, deadline=None)
@given(position=st.integers(0, 5), norm_first=st.booleans())
@pytest.mark.slow
def test_decoder_block_is_causal(position, norm_first):
    block = TransformerDecoderBlock(2, 16, norm_first=norm_first)
    changed = X.copy()
    changed[:, position] += 3.0
    before = np.asarray(block(X, ENCODED))
    after = np.asarray(block(changed, ENCODED))
    np.testing.assert_allclose(after[:, :position], before[:, :position], atol=1e-5)
    assert not np.allclose(after[:, position], before[:, position])


def test_padded_source_tokens_change_nothing():
    encoder = TransformerEncoderBlock(2, 16)
    decoder = TransformerDecoderBlock(2, 16)
    garbage = ENCODED.copy()
    garbage[~KEEP_ENC] = 50.0
    encoded = encoder(ENCODED, padding_mask=KEEP_ENC)
    encoded_garbage = encoder(garbage, padding_mask=KEEP_ENC)
    np.testing.assert_allclose(
        np.asarray(encoded_garbage)[KEEP_ENC], np.asarray(encoded)[KEEP_ENC], atol=1e-5
    )
    out = decoder(X, encoded, encoder_padding_mask=KEEP_ENC)
    out_garbage = decoder(X, encoded_garbage, encoder_padding_mask=KEEP_ENC)
    np.testing.assert_allclose(out_garbage, out, atol=1e-5)


@pytest.mark.parametrize("norm_first", [False, True])
def test_cached_decoding_equals_the_full_pass(norm_first):
    block = TransformerDecoderBlock(2, 16, norm_first=norm_first)
    full, full_self, full_cross = block(
        X, ENCODED, encoder_padding_mask=KEEP_ENC, return_attention_scores=True
    )
    cache = block.empty_cache(2)
    memory = block.cross_attention.project_key_value(ENCODED)
    assert cache["key"].shape == cache["value"].shape == (2, 2, 0, 4)  # (B, h, L, d/h)
    assert memory["key"].shape == memory["value"].shape == (2, 2, 7, 4)  # (B, h, S, d/h)
    steps, self_steps, cross_steps = [], [], []
    for t in range(6):
        out, cache, self_scores, cross = block(
            X[:, t : t + 1],
            encoder_padding_mask=KEEP_ENC,
            cache=cache,
            cache_index=t,
            cross_attention_cache=memory,
            return_attention_scores=True,
        )
        steps.append(np.asarray(out))
        assert self_scores.shape == (2, 2, 1, t + 1)  # the steps so far
        self_steps.append(np.pad(np.asarray(self_scores), [(0, 0)] * 3 + [(0, 5 - t)]))
        cross_steps.append(np.asarray(cross))
    np.testing.assert_allclose(np.concatenate(steps, 1), full, atol=1e-5)
    np.testing.assert_allclose(np.concatenate(self_steps, 2), full_self, atol=1e-5)
    np.testing.assert_allclose(np.concatenate(cross_steps, 2), full_cross, atol=1e-5)


def test_rows_sharing_a_memory_row_equal_a_tiled_memory():
    """Beam search: 3 hypotheses per source attend to its memory, kept once."""
    block = TransformerDecoderBlock(2, 16)
    block(X, ENCODED, encoder_padding_mask=KEEP_ENC)  # build
    memory = block.cross_attention.project_key_value(ENCODED)
    tiled = {name: np.repeat(x, 3, axis=0) for name, x in memory.items()}
    hypotheses = RNG.normal(size=(6, 1, 8)).astype("float32")  # (B·W, T, d)
    outputs = []
    for rows, memory_mask in ((memory, KEEP_ENC), (tiled, np.repeat(KEEP_ENC, 3, 0))):
        out, cache, _, cross = block(
            hypotheses,
            encoder_padding_mask=memory_mask,
            cache=block.empty_cache(6),
            cache_index=0,
            cross_attention_cache=rows,
            return_attention_scores=True,
        )
        assert cross.shape == (6, 2, 1, 7)
        outputs.append((out, cross))
    for shared, copied in zip(*outputs):
        np.testing.assert_allclose(shared, copied, atol=1e-6)


def test_decoder_without_encoder_is_a_language_model_block():
    block = TransformerDecoderBlock(2, 16)
    output, self_scores = block(X, return_attention_scores=True)
    assert output.shape == X.shape and self_scores.shape == (2, 2, 6, 6)
    assert np.all(np.triu(np.asarray(self_scores), k=1) == 0)
    with pytest.raises(ValueError, match="without cross-attention"):
        block(X, ENCODED)


def test_num_heads_must_divide_the_width():
    with pytest.raises(ValueError, match=r"num_heads=3 does not divide the feature size 8"):
        TransformerEncoderBlock(3, 16)(X)
    with pytest.raises(ValueError, match=r"`x` must have rank 3"):
        TransformerDecoderBlock(2, 16)(X[:, 0])


@pytest.mark.slow
def test_standard_layer_checks(tmp_path):
    check_layer(
        lambda: TransformerEncoderBlock(2, 16, dropout=0.1, norm_first=True),
        [X],
        tmp_path=tmp_path,
    )
    check_layer(
        lambda: TransformerDecoderBlock(2, 16, dropout=0.1), [X, ENCODED], tmp_path=tmp_path
    )


def test_keras_masks_from_embeddings_are_used():
    ids = np.array([[4, 5, 6, 0, 0], [7, 8, 9, 3, 2]])
    tokens = keras.Input((None,), dtype="int32")
    embed = keras.layers.Embedding(10, 8, mask_zero=True)
    encoder = TransformerEncoderBlock(2, 16)
    decoder = TransformerDecoderBlock(2, 16)
    x = embed(tokens)
    model = keras.Model(tokens, decoder(x, encoder(x)))
    embedded = np.asarray(embed(ids))
    keep = ids != 0
    encoded = encoder(embedded, padding_mask=keep)
    expected = decoder(embedded, encoded, decoder_padding_mask=keep, encoder_padding_mask=keep)
    np.testing.assert_allclose(np.asarray(model(ids))[keep], np.asarray(expected)[keep], atol=1e-5)
