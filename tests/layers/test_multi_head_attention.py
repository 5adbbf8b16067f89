import keras
import numpy as np
import pytest
import tensorflow as tf
from hypothesis import given, settings
from hypothesis import strategies as st

from keras_attn.layers import MultiHeadAttention
from tests.layers.layer_checks import check_layer

RNG = np.random.default_rng(0)


def _pair(num_heads=4, key_dim=8, query_dim=16, value_dim=12, self_attention=False):
    """Our layer and keras.layers.MultiHeadAttention with the same weights."""
    query = RNG.normal(size=(3, 6, query_dim)).astype("float32")
    value = query if self_attention else RNG.normal(size=(3, 9, value_dim)).astype("float32")
    reference = keras.layers.MultiHeadAttention(num_heads, key_dim)
    reference(query, value)
    ours = MultiHeadAttention(num_heads, key_dim)
    ours(query, value)
    ours.set_weights(reference.get_weights())
    return ours, reference, query, value


@pytest.mark.parametrize("self_attention", [True, False])
def test_matches_keras_multi_head_attention(self_attention):
    ours, reference, query, value = _pair(self_attention=self_attention)
    expected, expected_scores = reference(query, value, return_attention_scores=True)
    output, scores = ours(query, value, return_attention_scores=True)
    np.testing.assert_allclose(output, expected, atol=1e-5)
    np.testing.assert_allclose(scores, expected_scores, atol=1e-5)


def test_matches_keras_with_padding_mask():
    ours, reference, query, value = _pair()
    keep = np.ones((3, 9), bool)
    keep[0, 5:] = False
    keep[2, 1:] = False
    mask = np.broadcast_to(keep[:, None, :], (3, 6, 9))
    expected, expected_scores = reference(
        query, value, attention_mask=mask, return_attention_scores=True
    )
    output, scores = ours(query, value, attention_mask=mask, return_attention_scores=True)
    np.testing.assert_allclose(output, expected, atol=1e-5)
    np.testing.assert_allclose(scores, expected_scores, atol=1e-5)


def test_matches_keras_with_a_key_and_distinct_value_and_key_masks():
    """A key is padding where its value is, or where the key mask says so (Keras's rule)."""
    ours, reference, query, value = _pair()
    key = RNG.normal(size=value.shape).astype("float32")
    value_mask, key_mask = np.ones((3, 9), bool), np.ones((3, 9), bool)
    value_mask[0, 6:], key_mask[0, 3:5], key_mask[1, 8:] = False, False, False
    masks = dict(value_mask=value_mask, key_mask=key_mask)
    expected, expected_scores = reference(query, value, key, **masks, return_attention_scores=True)
    output, scores = ours(query, value, key, **masks, return_attention_scores=True)
    np.testing.assert_allclose(scores, expected_scores, atol=1e-5)
    np.testing.assert_allclose(output, expected, atol=1e-5)
    assert np.all(np.asarray(scores)[0, :, :, 6:] == 0)


def test_matches_keras_with_causal_and_keras_masks():
    ours, reference, query, _ = _pair(self_attention=True)
    ids = np.array([[1, 2, 3, 4, 5, 6], [1, 2, 3, 0, 0, 0], [4, 4, 0, 0, 0, 0]])
    embed = keras.layers.Embedding(10, 16, mask_zero=True)
    x = embed(ids)  # keras.layers.MultiHeadAttention deletes its inputs' masks
    expected, expected_scores = reference(x, x, use_causal_mask=True, return_attention_scores=True)
    x = embed(ids)
    output, scores = ours(x, x, use_causal_mask=True, return_attention_scores=True)
    real = ids != 0  # Keras gives padded queries uniform weights, we give zeros
    np.testing.assert_allclose(np.asarray(output)[real], np.asarray(expected)[real], atol=1e-5)
    scores, expected_scores = np.asarray(scores), np.asarray(expected_scores)
    for b, h in np.ndindex(3, 4):
        np.testing.assert_allclose(scores[b, h][real[b]], expected_scores[b, h][real[b]], atol=1e-5)
    assert np.all(scores[~real.astype(bool)[:, None, :].repeat(4, 1)] == 0)


@settings(max_examples=15, deadline=None)
@given(position=st.integers(0, 6), causal=st.booleans())
@pytest.mark.slow
def test_causality_changing_a_later_token_never_changes_earlier_outputs(position, causal):
    layer = MultiHeadAttention(2, 4)
    x = RNG.normal(size=(2, 7, 8)).astype("float32")
    changed = x.copy()
    changed[:, position] += 5.0
    before = np.asarray(layer(x, x, use_causal_mask=True))
    after = np.asarray(layer(changed, changed, use_causal_mask=True))
    np.testing.assert_allclose(after[:, :position], before[:, :position], atol=1e-5)
    assert not np.allclose(after[:, position], before[:, position])


def test_padded_keys_get_zero_weight_and_changing_them_changes_nothing():
    layer = MultiHeadAttention(2, 4)
    query = RNG.normal(size=(2, 5, 8)).astype("float32")
    value = RNG.normal(size=(2, 6, 8)).astype("float32")
    keep = np.array([[1, 1, 1, 0, 0, 0], [1, 1, 1, 1, 1, 0]], bool)
    output, scores = layer(query, value, value_mask=keep, return_attention_scores=True)
    assert np.all(np.asarray(scores)[~keep[:, None, None, :].repeat(2, 1).repeat(5, 2)] == 0)
    np.testing.assert_allclose(np.asarray(scores).sum(-1), 1.0, atol=1e-5)
    garbage = value.copy()
    garbage[~keep] = RNG.normal(size=garbage[~keep].shape) * 100
    np.testing.assert_allclose(layer(query, garbage, value_mask=keep), output, atol=1e-5)


def test_all_masked_rows_give_zero_weights_not_nan():
    layer = MultiHeadAttention(2, 4)
    x = RNG.normal(size=(2, 4, 8)).astype("float32")
    keep = np.zeros((2, 4), bool)
    keep[0, 0] = True
    output, scores = layer(x, x, value_mask=keep, return_attention_scores=True)
    assert np.all(np.isfinite(output)) and np.all(np.isfinite(scores))
    assert np.all(np.asarray(scores)[1] == 0)
    keras.mixed_precision.set_global_policy("mixed_bfloat16")
    half = MultiHeadAttention(2, 4)
    output, scores = half(x, x, value_mask=keep, use_causal_mask=True, return_attention_scores=True)
    assert np.all(np.isfinite(keras.ops.cast(output, "float32")))
    assert np.all(np.asarray(keras.ops.cast(scores, "float32"))[1] == 0)


@pytest.mark.parametrize("chunk", [1, 2, 6])  # steps fed per call
def test_cached_steps_equal_the_full_causal_pass(chunk):
    layer = MultiHeadAttention(2, 4)
    x = RNG.normal(size=(2, 6, 8)).astype("float32")
    full, full_scores = layer(x, x, use_causal_mask=True, return_attention_scores=True)
    cache = layer.empty_cache(2)
    assert cache["key"].shape == cache["value"].shape == (2, 2, 0, 4)  # (B, h, L, d)
    steps, scores = [], []
    for t in range(0, 6, chunk):
        new = x[:, t : t + chunk]
        out, step_scores, cache = layer(
            new, new, cache=cache, cache_index=t, return_attention_scores=True
        )
        steps.append(np.asarray(out))
        assert step_scores.shape[-1] == t + new.shape[1]  # the steps so far
        pad = [(0, 0)] * 3 + [(0, 6 - step_scores.shape[-1])]
        scores.append(np.pad(np.asarray(step_scores), pad))
    np.testing.assert_allclose(np.concatenate(steps, axis=1), full, atol=1e-5)
    np.testing.assert_allclose(np.concatenate(scores, axis=2), full_scores, atol=1e-5)
    # The cache ends up holding the keys and values of every step.
    projected = layer.project_key_value(x)
    for name in ("key", "value"):
        np.testing.assert_allclose(cache[name], projected[name], atol=1e-6)


@pytest.mark.parametrize("chunk", [1, 2, 6])  # steps fed per call
def test_preallocated_cache_steps_equal_the_full_causal_pass(chunk):
    layer = MultiHeadAttention(2, 4)
    x = RNG.normal(size=(2, 6, 8)).astype("float32")
    full, full_scores = layer(x, x, use_causal_mask=True, return_attention_scores=True)
    cache = layer.empty_cache(2, length=9)
    assert cache["key"].shape == cache["value"].shape == (2, 2, 9, 4)  # (B, h, L, d)
    # Not zeros: the steps not written yet must be masked, whatever they hold.
    cache = {name: RNG.normal(size=(2, 2, 9, 4)).astype("float32") for name in cache}
    steps, scores = [], []
    for t in range(0, 6, chunk):
        new = x[:, t : t + chunk]
        out, step_scores, cache = layer(
            new, new, cache=cache, cache_index=t, preallocated=True, return_attention_scores=True
        )
        assert cache["key"].shape == (2, 2, 9, 4) and step_scores.shape[-1] == 9
        steps.append(np.asarray(out))
        scores.append(np.asarray(step_scores))
    np.testing.assert_allclose(np.concatenate(steps, axis=1), full, atol=1e-5)
    scores = np.concatenate(scores, axis=2)
    np.testing.assert_allclose(scores[..., :6], full_scores, atol=1e-5)
    assert np.all(scores[..., 6:] == 0)
    projected = layer.project_key_value(x)
    for name in ("key", "value"):
        np.testing.assert_allclose(cache[name][:, :, :6], projected[name], atol=1e-6)


def test_preallocated_needs_a_cache_and_its_index():
    layer = MultiHeadAttention(2, 4)
    x = RNG.normal(size=(2, 1, 8)).astype("float32")
    with pytest.raises(ValueError, match="cache_index"):
        layer(x, x, cache=layer.empty_cache(2, length=3), preallocated=True)


def test_optimization_barrier_on_the_kernels_only_when_compiled_by_xla():
    layer = MultiHeadAttention(2, 4)
    x = RNG.normal(size=(1, 1, 8)).astype("float32")
    layer(x, x)

    def ops_of(jit_compile):
        project = tf.function(
            lambda x: layer.project(x, layer.query_kernel, layer.query_bias),
            jit_compile=jit_compile,
        )
        return project, {op.type for op in project.get_concrete_function(x).graph.get_operations()}

    compiled, compiled_ops = ops_of(True)
    plain, plain_ops = ops_of(False)
    assert "XlaOptimizationBarrier" in compiled_ops and "XlaOptimizationBarrier" not in plain_ops
    np.testing.assert_allclose(compiled(x), plain(x), atol=1e-6)


def test_cached_steps_in_a_tf_function_with_other_value_dim():
    layer = MultiHeadAttention(2, 4, value_dim=3)
    x = RNG.normal(size=(2, 5, 8)).astype("float32")
    full = np.asarray(layer(x, x, use_causal_mask=True))

    @tf.function
    def decode(x):
        cache = layer.empty_cache(tf.shape(x)[0])
        growing = {  # the cache grows by a step each time
            "key": tf.TensorShape([2, 2, None, 4]),
            "value": tf.TensorShape([2, 2, None, 3]),
        }
        steps = tf.TensorArray(tf.float32, size=5)
        for t in tf.range(5):
            tf.autograph.experimental.set_loop_options(shape_invariants=[(cache, growing)])
            new = x[:, t : t + 1]
            out, cache = layer(new, new, cache=cache, cache_index=t)
            steps = steps.write(t, out[:, 0])
        return tf.transpose(steps.stack(), (1, 0, 2)), cache

    steps, cache = decode(x)
    assert cache["key"].shape == (2, 2, 5, 4) and cache["value"].shape == (2, 2, 5, 3)
    np.testing.assert_allclose(steps, full, atol=1e-5)


def test_precomputed_cross_attention_cache_equals_plain_call():
    layer = MultiHeadAttention(2, 4)
    query = RNG.normal(size=(2, 3, 8)).astype("float32")
    memory = RNG.normal(size=(2, 5, 8)).astype("float32")
    keep = np.array([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]], bool)
    expected, expected_scores = layer(query, memory, value_mask=keep, return_attention_scores=True)
    cache = layer.project_key_value(memory)
    assert cache["key"].shape == cache["value"].shape == (2, 2, 5, 4)  # (B, h, S, d)
    output, scores = layer(
        query,
        memory,
        cache=cache,
        attention_mask=keep[:, None, :],
        return_attention_scores=True,
    )
    np.testing.assert_allclose(output, expected, atol=1e-5)
    np.testing.assert_allclose(scores, expected_scores, atol=1e-5)


@pytest.mark.parametrize(
    "kwargs, message",
    [({"num_heads": 0, "key_dim": 4}, "num_heads"), ({"num_heads": 2, "key_dim": 2.5}, "key_dim")],
)
def test_bad_configuration_names_the_argument(kwargs, message):
    with pytest.raises(ValueError, match=message):
        MultiHeadAttention(**kwargs)


def test_bad_shapes_name_the_argument_and_shapes():
    layer = MultiHeadAttention(2, 4)
    with pytest.raises(ValueError, match=r"`query` must have rank 3.*\(2, 8\)"):
        layer(np.zeros((2, 8), "float32"), np.zeros((2, 5, 8), "float32"))
    with pytest.raises(ValueError, match=r"`key` and `value` must have the same length"):
        MultiHeadAttention(2, 4)(
            np.zeros((2, 3, 8), "float32"),
            np.zeros((2, 5, 8), "float32"),
            key=np.zeros((2, 4, 8), "float32"),
        )


@pytest.mark.slow
def test_standard_layer_checks(tmp_path):
    x = RNG.normal(size=(4, 5, 8)).astype("float32")
    m = RNG.normal(size=(4, 7, 6)).astype("float32")
    check_layer(
        lambda: MultiHeadAttention(2, 4, dropout=0.1),
        [x, m],
        call=lambda layer, q, v: layer(q, v),
        tmp_path=tmp_path,
    )
    check_layer(
        lambda: MultiHeadAttention(2, 4),
        [x],
        call=lambda layer, q: layer(q, q, use_causal_mask=True),
        tmp_path=tmp_path,
    )
