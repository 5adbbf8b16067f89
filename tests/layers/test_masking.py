import keras
import numpy as np
import pytest

from keras_attn.layers import masking


def test_causal_mask_is_lower_triangular_and_shifts_with_the_query_start():
    np.testing.assert_array_equal(masking.causal_mask(4)[0], np.tril(np.ones((4, 4), bool)))
    # The query at step 2 of a 5-slot cache sees slots 0..2 only.
    np.testing.assert_array_equal(
        masking.causal_mask(1, 5, query_start=2)[0], [[True, True, True, False, False]]
    )


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
def test_masked_softmax_zeroes_masked_positions_and_all_masked_rows(dtype):
    scores = keras.ops.cast(np.random.default_rng(0).normal(size=(3, 4)) * 30, dtype)
    keep = np.array([[1, 1, 0, 1], [0, 0, 0, 0], [1, 0, 0, 0]], bool)
    weights = np.asarray(keras.ops.cast(masking.masked_softmax(scores, keep), "float32"))
    assert np.all(np.isfinite(weights))
    assert np.all(weights[~keep] == 0)
    np.testing.assert_allclose(weights.sum(-1), [1, 0, 1], atol=1e-2)


def test_masked_softmax_over_a_single_key():
    scores = np.ones((2, 3, 1), "float32")
    np.testing.assert_array_equal(masking.masked_softmax(scores), np.ones((2, 3, 1)))
    keep = np.array([[[True]], [[False]]])
    np.testing.assert_array_equal(masking.masked_softmax(scores, keep)[:, 0, 0], [1, 0])


def test_attention_mask_combines_padding_and_causal():
    query_keep = np.array([[1, 1, 0]], bool)
    key_keep = np.array([[1, 0, 1]], bool)
    mask = masking.attention_mask(query_keep, key_keep, masking.causal_mask(3))
    expected = query_keep[:, :, None] & key_keep[:, None, :] & np.tril(np.ones((3, 3), bool))
    np.testing.assert_array_equal(mask, expected)
