import keras
import numpy as np
import pytest

from keras_attn.layers import BertEmbedding, TokenAndPositionEmbedding
from tests.layers.layer_checks import check_layer

IDS = np.array([[5, 7, 9, 0], [3, 0, 0, 0]])


def test_token_and_position_embedding_is_scaled_tokens_plus_positions():
    layer = TokenAndPositionEmbedding(20, max_sequence_length=8, hidden_dim=6)
    output = np.asarray(layer(IDS))
    table = np.asarray(layer.token_embedding.embeddings)
    positions = np.asarray(layer.position_embedding(np.zeros((1, 4, 6), "float32")))
    np.testing.assert_allclose(output, table[IDS] * np.sqrt(6) + positions, atol=1e-5)
    np.testing.assert_array_equal(layer.compute_mask(IDS), IDS != 0)


def test_reverse_is_the_tied_output_projection():
    layer = TokenAndPositionEmbedding(20, max_sequence_length=8, hidden_dim=6)
    layer(IDS)
    hidden = np.random.default_rng(0).normal(size=(2, 4, 6)).astype("float32")
    logits = layer(hidden, reverse=True)
    np.testing.assert_allclose(
        logits, hidden @ np.asarray(layer.token_embedding.embeddings).T, atol=1e-5
    )


@pytest.mark.parametrize("kind", ["token_and_position", "bert"])
def test_mask_reaches_downstream_layers(kind):
    """A masked mean downstream averages over the real tokens only."""
    if kind == "bert":
        embed = BertEmbedding(20, max_sequence_length=8, num_segments=2, hidden_dim=6)
    else:
        embed = TokenAndPositionEmbedding(20, max_sequence_length=8, hidden_dim=6)
    tokens = keras.Input((None,), dtype="int32")
    pooled = keras.layers.GlobalAveragePooling1D()(embed(tokens))
    model = keras.Model(tokens, pooled)
    embedded = np.asarray(embed(IDS))
    keep = (IDS != 0)[..., None]
    expected = (embedded * keep).sum(1) / keep.sum(1)
    np.testing.assert_allclose(model(IDS), expected, atol=1e-5)
    assert not np.allclose(expected, embedded.mean(1))  # the mask matters here
    np.testing.assert_array_equal(embed.compute_mask(IDS), IDS != 0)


def test_bert_embedding_is_layer_norm_of_the_three_sums():
    layer = BertEmbedding(20, max_sequence_length=8, num_segments=2, hidden_dim=6)
    segments = np.array([[0, 0, 1, 1], [0, 1, 1, 1]])
    output = np.asarray(layer(IDS, segments))
    total = (
        np.asarray(layer.token_embedding.embeddings)[IDS]
        + np.asarray(layer.segment_embedding.embeddings)[segments]
        + np.asarray(layer.position_embedding.embeddings)[:4]
    )
    normed = (total - total.mean(-1, keepdims=True)) / np.sqrt(total.var(-1, keepdims=True) + 1e-12)
    np.testing.assert_allclose(output, normed, atol=1e-4)


def test_bad_input_is_a_clear_value_error():
    with pytest.raises(ValueError, match="position"):
        TokenAndPositionEmbedding(20, 8, 6, position="rotary")
    with pytest.raises(ValueError, match=r"`token_ids` must have rank 2"):
        TokenAndPositionEmbedding(20, 8, 6)(np.zeros((2, 3, 4), "int32"))
    with pytest.raises(ValueError, match=r"`segment_ids` must have the shape"):
        BertEmbedding(20, 8, 2, 6)(IDS, np.zeros((2, 3), "int32"))


@pytest.mark.slow
def test_standard_layer_checks(tmp_path):
    check_layer(
        lambda: TokenAndPositionEmbedding(20, 8, 6, dropout=0.1),
        [IDS.astype("int32")],
        tmp_path=tmp_path,
    )
    check_layer(
        lambda: TokenAndPositionEmbedding(20, 8, 6, position="learned"),
        [IDS.astype("int32")],
        tmp_path=tmp_path,
    )
    check_layer(
        lambda: BertEmbedding(20, 8, 2, 6, dropout=0.1),
        [IDS.astype("int32"), (IDS > 6).astype("int32")],
        tmp_path=tmp_path,
    )
