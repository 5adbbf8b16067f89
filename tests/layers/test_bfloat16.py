"""Every layer under mixed_bfloat16, masks included, against float32 with the same weights.

bfloat16 keeps 8 significant bits (relative rounding 2^-8 ≈ 0.4%); the
outputs must stay within 2% of the float32 output's scale, and masked
positions must get exactly zero attention weight in both.
"""

import keras
import numpy as np
import pytest

from keras_attn import layers
from tests.layers.layer_checks import assert_close_to_float32

RNG = np.random.default_rng(0)
X = RNG.normal(size=(2, 6, 16)).astype("float32")
MEMORY = RNG.normal(size=(2, 5, 16)).astype("float32")
KEEP_X = np.array([[1, 1, 1, 1, 0, 0], [1, 1, 1, 1, 1, 1]], bool)
KEEP_MEMORY = np.array([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]], bool)

CASES = {
    "MultiHeadAttention, padding + causal": (
        lambda: layers.MultiHeadAttention(4, 4),
        lambda layer: layer(
            X,
            X,
            query_mask=KEEP_X,
            value_mask=KEEP_X,
            use_causal_mask=True,
            return_attention_scores=True,
        ),
    ),
    "MultiHeadAttention, cross": (
        lambda: layers.MultiHeadAttention(4, 4),
        lambda layer: layer(X, MEMORY, value_mask=KEEP_MEMORY, return_attention_scores=True),
    ),
    "AdditiveAttention": (
        lambda: layers.AdditiveAttention(units=16),
        lambda layer: layer(X, MEMORY, value_mask=KEEP_MEMORY, return_attention_scores=True),
    ),
    "DotProductAttention general": (
        lambda: layers.DotProductAttention("general"),
        lambda layer: layer(X, MEMORY, value_mask=KEEP_MEMORY, return_attention_scores=True),
    ),
    "DotProductAttention local-p": (
        lambda: layers.DotProductAttention("concat", window=2, alignment="predictive"),
        lambda layer: layer(X, MEMORY, value_mask=KEEP_MEMORY, return_attention_scores=True),
    ),
    "TransformerEncoderBlock": (
        lambda: layers.TransformerEncoderBlock(num_heads=4, intermediate_dim=32),
        lambda layer: layer(X, padding_mask=KEEP_X, return_attention_scores=True),
    ),
    "TransformerDecoderBlock": (
        lambda: layers.TransformerDecoderBlock(num_heads=4, intermediate_dim=32),
        lambda layer: layer(
            X,
            MEMORY,
            decoder_padding_mask=KEEP_X,
            encoder_padding_mask=KEEP_MEMORY,
            return_attention_scores=True,
        ),
    ),
    "TransformerDecoderBlock, pre-norm": (
        lambda: layers.TransformerDecoderBlock(num_heads=4, intermediate_dim=32, norm_first=True),
        lambda layer: layer(
            X,
            MEMORY,
            decoder_padding_mask=KEEP_X,
            encoder_padding_mask=KEEP_MEMORY,
            return_attention_scores=True,
        ),
    ),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_bfloat16_matches_float32_with_masks(name):
    make, call = CASES[name]
    full_layer = make()
    full = call(full_layer)
    half_layer = type(full_layer).from_config(
        {**full_layer.get_config(), "dtype": "mixed_bfloat16"}
    )
    call(half_layer)  # build
    half_layer.set_weights(full_layer.get_weights())
    half = call(half_layer)
    output, *weights = full
    half_output, *half_weights = half
    assert keras.backend.standardize_dtype(half_output.dtype) == "bfloat16"
    real_queries = KEEP_X if output.shape[1] == KEEP_X.shape[1] else np.ones(output.shape[:2], bool)
    assert_close_to_float32(
        np.asarray(keras.ops.cast(half_output, "float32"))[real_queries],
        np.asarray(output)[real_queries],
    )
    for w, hw in zip(weights, half_weights):
        w, hw = np.asarray(w), np.asarray(keras.ops.cast(hw, "float32"))
        np.testing.assert_allclose(hw, w, atol=0.02)  # probabilities: 2% absolute
        np.testing.assert_array_equal(hw == 0, w == 0)  # the same positions masked
