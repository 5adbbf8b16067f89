import keras
import numpy as np
import pytest

from keras_attn.layers import AdditiveAttention, DotProductAttention
from tests.layers.layer_checks import check_layer

RNG = np.random.default_rng(1)
QUERY = RNG.normal(size=(2, 4, 6)).astype("float32")
VALUE = RNG.normal(size=(2, 5, 6)).astype("float32")
KEEP = np.array([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]], bool)


def _softmax(scores, keep):
    scores = np.where(keep, scores, -np.inf)
    weights = np.exp(scores - scores.max(-1, keepdims=True))
    return weights / weights.sum(-1, keepdims=True)


def test_additive_matches_bahdanau_formula():
    layer = AdditiveAttention(units=7)
    output, weights = layer(QUERY, VALUE, value_mask=KEEP, return_attention_scores=True)
    w_q, b_q = [np.asarray(w) for w in layer.query_projection.weights]
    w_k = np.asarray(layer.key_projection.kernel)
    v = np.asarray(layer.v)
    hidden = np.tanh((QUERY @ w_q + b_q)[:, :, None] + (VALUE @ w_k)[:, None])
    expected = _softmax(hidden @ v, KEEP[:, None])
    np.testing.assert_allclose(weights, expected, atol=1e-5)
    np.testing.assert_allclose(output, expected @ VALUE, atol=1e-5)


@pytest.mark.parametrize("causal", [False, True])
def test_dot_matches_keras_attention(causal):
    expected = keras.layers.Attention()([QUERY, VALUE], mask=[None, KEEP], use_causal_mask=causal)
    ours = DotProductAttention("dot")(QUERY, VALUE, value_mask=KEEP, use_causal_mask=causal)
    np.testing.assert_allclose(ours, expected, atol=1e-5)


def test_keras_masks_flow_in_and_out():
    """The value's mask hides padded keys; the query's mask comes out with the context."""
    value_ids = np.array([[3, 4, 0, 0], [5, 6, 7, 8]])
    query_ids = np.array([[1, 2, 3, 0, 0], [4, 0, 0, 0, 0]])
    embed_value = keras.layers.Embedding(10, 6, mask_zero=True)
    embed_query = keras.layers.Embedding(10, 6, mask_zero=True)
    value_tokens = keras.Input((None,), dtype="int32")
    query_tokens = keras.Input((None,), dtype="int32")
    context = DotProductAttention("dot")(embed_query(query_tokens), embed_value(value_tokens))
    pooled = keras.layers.GlobalAveragePooling1D()(context)  # uses the output mask
    model = keras.Model([query_tokens, value_tokens], [context, pooled])

    query, value = np.asarray(embed_query(query_ids)), np.asarray(embed_value(value_ids))
    expected = DotProductAttention("dot")(
        query, value, value_mask=value_ids != 0, query_mask=query_ids != 0
    )
    keep = (query_ids != 0)[..., None]
    got_context, got_pooled = model([query_ids, value_ids])
    np.testing.assert_allclose(got_context, expected, atol=1e-5)
    np.testing.assert_allclose(
        got_pooled, (np.asarray(expected) * keep).sum(1) / keep.sum(1), atol=1e-5
    )
    # Padded keys got no weight: changing their vectors changes nothing.
    other = value.copy()
    other[value_ids == 0] = 100.0
    np.testing.assert_allclose(
        DotProductAttention("dot")(
            query, other, value_mask=value_ids != 0, query_mask=query_ids != 0
        ),
        expected,
        atol=1e-5,
    )


@pytest.mark.parametrize(
    "score", ["dot", "scaled_dot", "general", "scaled_general", "concat", "cosine"]
)
def test_luong_scores_match_their_formulas(score):
    layer = DotProductAttention(score, units=5)
    output, weights = layer(QUERY, VALUE, value_mask=KEEP, return_attention_scores=True)
    q, k = QUERY, VALUE
    if score == "dot":
        logits = q @ k.transpose(0, 2, 1)
    elif score == "scaled_dot":
        logits = q @ k.transpose(0, 2, 1) / np.sqrt(6)
    elif score == "general":
        logits = q @ np.asarray(layer.kernel) @ k.transpose(0, 2, 1)
    elif score == "scaled_general":
        logits = q @ np.asarray(layer.kernel) @ k.transpose(0, 2, 1) / np.sqrt(6)
    elif score == "concat":
        w_q, b_q = [np.asarray(w) for w in layer.query_projection.weights]
        w_k = np.asarray(layer.key_projection.kernel)
        logits = np.tanh((q @ w_q + b_q)[:, :, None] + (k @ w_k)[:, None]) @ np.asarray(layer.v)
    else:
        qn = q / np.linalg.norm(q, axis=-1, keepdims=True)
        kn = k / np.linalg.norm(k, axis=-1, keepdims=True)
        logits = qn @ kn.transpose(0, 2, 1)
    expected = _softmax(logits, KEEP[:, None])
    np.testing.assert_allclose(weights, expected, atol=1e-5)
    np.testing.assert_allclose(output, expected @ VALUE, atol=1e-5)


@pytest.mark.parametrize(
    "make", [lambda: AdditiveAttention(8), lambda: DotProductAttention("general")]
)
def test_single_decoder_step_equals_a_length_one_sequence(make):
    layer = make()
    sequence, seq_weights = layer(
        QUERY[:, :1], VALUE, value_mask=KEEP, return_attention_scores=True
    )
    step, step_weights = layer(QUERY[:, 0], VALUE, value_mask=KEEP, return_attention_scores=True)
    assert step.shape == (2, 6) and step_weights.shape == (2, 5)
    np.testing.assert_allclose(step, np.asarray(sequence)[:, 0], atol=1e-6)
    np.testing.assert_allclose(step_weights, np.asarray(seq_weights)[:, 0], atol=1e-6)


def test_local_monotonic_attends_only_inside_the_window():
    layer = DotProductAttention("dot", window=1)
    query = RNG.normal(size=(2, 5, 6)).astype("float32")
    _, weights = layer(query, VALUE, return_attention_scores=True)
    distance = np.abs(np.arange(5)[:, None] - np.arange(5)[None, :])
    weights = np.asarray(weights)
    assert np.all(weights[:, distance > 1] == 0)
    assert np.all(weights[:, distance <= 1] > 0)
    step = layer(query[:, 3], VALUE, query_position=3, return_attention_scores=True)[1]
    np.testing.assert_allclose(step, weights[:, 3], atol=1e-6)


def test_local_predictive_is_gaussian_around_the_predicted_position():
    layer = DotProductAttention("general", window=2, alignment="predictive")
    value = RNG.normal(size=(2, 12, 6)).astype("float32")
    _, weights = layer(QUERY, value, return_attention_scores=True)
    q = QUERY
    hidden = np.tanh(
        q @ np.asarray(layer.position_hidden.kernel) + np.asarray(layer.position_hidden.bias)
    )
    centre = 11 * (1 / (1 + np.exp(-(hidden @ np.asarray(layer.position_output.kernel)))))
    distance = np.arange(12)[None, None, :] - centre
    logits = q @ np.asarray(layer.kernel) @ value.transpose(0, 2, 1)
    inside = np.abs(distance) <= 2
    expected = _softmax(logits, inside) * np.exp(-(distance**2) / (2 * 1.0**2))
    np.testing.assert_allclose(weights, np.where(inside, expected, 0), atol=1e-5)


@pytest.mark.parametrize("make", [lambda: AdditiveAttention(8), lambda: DotProductAttention("dot")])
def test_padded_queries_get_zero_weights_and_outputs(make):
    query_keep = np.array([[1, 1, 0, 0], [1, 1, 1, 1]], bool)
    output, weights = make()(
        QUERY, VALUE, query_mask=query_keep, key_mask=KEEP, return_attention_scores=True
    )
    assert np.all(np.asarray(weights)[~query_keep] == 0) and np.all(
        np.asarray(output)[~query_keep] == 0
    )
    np.testing.assert_allclose(np.asarray(weights)[query_keep].sum(-1), 1, atol=1e-5)


@pytest.mark.parametrize("alignment", ["monotonic", "predictive"])
def test_local_windows_stay_in_place_in_bfloat16(alignment):
    # bfloat16 counts exactly only to 256: positions past it must not round.
    value = RNG.normal(size=(1, 600, 6)).astype("float32")
    # same input to both
    query = np.asarray(keras.ops.cast(RNG.normal(size=(1, 6)), "bfloat16"), "float32")
    windows, weights = [], None
    for dtype in ("float32", "mixed_bfloat16"):
        layer = DotProductAttention("general", window=2, alignment=alignment, dtype=dtype)
        layer.build(query[:, None].shape, value.shape)
        if weights is None:
            weights = layer.get_weights()
        layer.set_weights(weights)
        step = layer(query, value, query_position=513, return_attention_scores=True)[1]
        windows.append(np.flatnonzero(np.asarray(step, "float32")[0]))
    assert list(windows[1]) == list(windows[0])
    if alignment == "monotonic":
        assert list(windows[0]) == [511, 512, 513, 514, 515]


def test_cosine_score_has_finite_gradients_for_zero_padding_keys_in_float16():
    import tensorflow as tf

    layer = DotProductAttention("cosine", dtype="mixed_float16")
    value = tf.Variable(np.concatenate([VALUE[:, :3], np.zeros_like(VALUE[:, 3:])], axis=1))
    query = tf.Variable(QUERY)
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(
            tf.cast(layer(query, value, key_mask=KEEP[:, :5] & (np.arange(5) < 3)), "float32")
        )
    for gradient in tape.gradient(loss, [query, value]):
        assert np.all(np.isfinite(gradient.numpy()))


def test_bad_input_is_a_clear_value_error():
    with pytest.raises(ValueError, match=r"`score` must be one of .*'dot'.*got 'bilinear'"):
        DotProductAttention("bilinear")
    with pytest.raises(ValueError, match=r"alignment"):
        DotProductAttention(window=2, alignment="middle")
    with pytest.raises(ValueError, match=r"same feature size.*query 6 and key 3"):
        DotProductAttention("dot")(QUERY, VALUE[..., :3])
    with pytest.raises(ValueError, match=r"`query` must have rank 2.*or 3"):
        AdditiveAttention(4)(QUERY[None], VALUE)
    with pytest.raises(ValueError, match=r"`value` must have rank 3"):
        AdditiveAttention(4)(QUERY, VALUE[:, 0])
    with pytest.raises(ValueError, match=r"units"):
        AdditiveAttention(0)


@pytest.mark.parametrize(
    "make",
    [
        lambda: AdditiveAttention(8, dropout=0.1),
        lambda: DotProductAttention("concat"),
        lambda: DotProductAttention("general", window=2, alignment="predictive"),
    ],
)
@pytest.mark.slow
def test_standard_layer_checks(make, tmp_path):
    check_layer(make, [QUERY, VALUE], tmp_path=tmp_path)
    check_layer(make, [QUERY[:, 0], VALUE], tmp_path=tmp_path)
