"""Every weight starts from its own draw; sublayers follow the layer's dtype policy.

A Keras 3 random initializer fixes its seed when constructed, so an instance
shared by several weights gives them the same values (or, for other shapes,
the same first values). These tests build every public layer and every model
preset and compare all pairs of weights.
"""

import itertools

import keras
import numpy as np
import pytest

from keras_attn import layers
from keras_attn.models import (
    SEQ2SEQ_PRESETS,
    TRANSFORMER_PRESETS,
    Seq2SeqBackbone,
    TransformerBackbone,
)

X = np.random.default_rng(0).normal(size=(2, 6, 16)).astype("float32")
IDS = np.array([[5, 7, 9, 2, 0, 0], [3, 4, 8, 1, 6, 2]], "int32")


# name -> (make_layer(kernel_initializer or None), call(layer))
LAYERS = {
    "MultiHeadAttention": (
        lambda init: layers.MultiHeadAttention(4, 16, **_kernel(init)),
        lambda layer: layer(X, X),
    ),
    "MultiHeadAttention cross": (
        lambda init: layers.MultiHeadAttention(4, 16, **_kernel(init)),
        lambda layer: layer(X, X[:, :4] * 2),
    ),
    "AdditiveAttention": (
        lambda init: layers.AdditiveAttention(units=16),
        lambda layer: layer(X, X),
    ),
    "DotProductAttention general": (
        lambda init: layers.DotProductAttention(score="general"),
        lambda layer: layer(X, X),
    ),
    "DotProductAttention concat local-p": (
        lambda init: layers.DotProductAttention(score="concat", window=2, alignment="predictive"),
        lambda layer: layer(X, X),
    ),
    "TokenAndPositionEmbedding learned": (
        lambda init: layers.TokenAndPositionEmbedding(
            100, 16, 16, position="learned", **_embeddings(init)
        ),
        lambda layer: layer(IDS),
    ),
    "BertEmbedding": (
        lambda init: layers.BertEmbedding(100, 16, 2, 16, **_embeddings(init)),
        lambda layer: layer(IDS, np.minimum(IDS, 1)),
    ),
    "PositionEmbedding": (
        lambda init: layers.PositionEmbedding(16, **({"initializer": init} if init else {})),
        lambda layer: layer(X),
    ),
    "FeedForward": (
        lambda init: layers.FeedForward(64),
        lambda layer: layer(X),
    ),
    "TransformerEncoderBlock": (
        lambda init: layers.TransformerEncoderBlock(num_heads=4, intermediate_dim=64),
        lambda layer: layer(X),
    ),
    "TransformerDecoderBlock": (
        lambda init: layers.TransformerDecoderBlock(num_heads=4, intermediate_dim=64),
        lambda layer: layer(X, X[:, :4]),
    ),
    "RNNEncoder bidirectional GRU": (
        lambda init: layers.RNNEncoder(100, 16, cell="gru", num_layers=2, bidirectional=True),
        lambda layer: layer(IDS),
    ),
}


def _kernel(init):
    return {"kernel_initializer": init} if init else {}


def _embeddings(init):
    return {"embeddings_initializer": init} if init else {}


def _built(name, initializer=None, seed=1234):
    keras.utils.set_random_seed(seed)
    make, call = LAYERS[name]
    layer = make(initializer)
    call(layer)
    return layer


def assert_independent(weights, min_size=64):
    """No two weights of `min_size` or more elements share values or first values.

    Weights that are not drawn (zero biases, LayerNorm's ones, an LSTM's
    0/1 forget-gate biases: at most two distinct values) are left out. "First
    values" compares the first 32 elements up to a scale factor: stateless
    draws from one seed share their prefix whatever the shape and scale.
    """
    values = [(w.path, np.asarray(w).ravel()) for w in weights if np.prod(w.shape) >= min_size]
    # Counted on the first 4096 elements: a constant or 0/1 weight has at most two
    # values there too, a drawn one thousands; sorting millions (the base presets) is spared.
    drawn = [(path, x) for path, x in values if len(np.unique(x[:4096])) > 2]
    assert len(drawn) >= 1
    for (path_a, a), (path_b, b) in itertools.combinations(drawn, 2):
        head_a, head_b = a[:32].astype("float64"), b[:32].astype("float64")
        if np.ptp(head_a) > 0 and np.ptp(head_b) > 0:  # a correlation is defined
            correlation = np.corrcoef(head_a, head_b)[0, 1]
            assert abs(correlation) < 0.99, f"{path_a} and {path_b} start with the same draw"
        if a.shape == b.shape:  # equal arrays have equal prefixes: compare those first
            equal = np.allclose(a[:1024], b[:1024]) and np.allclose(a, b)
            assert not equal, f"{path_a} equals {path_b}"


def _values(layer_or_model):
    return [np.asarray(w) for w in layer_or_model.weights]


@pytest.mark.parametrize("name", sorted(LAYERS))
@pytest.mark.parametrize(
    "initializer",
    [
        None,
        "glorot_uniform",
        keras.initializers.GlorotUniform(seed=7),
        keras.initializers.TruncatedNormal(stddev=0.02, seed=7),
    ],
    ids=["default", "by-name", "glorot-seeded", "normal-seeded"],
)
def test_layer_weights_start_independent_and_reproducible(name, initializer):
    layer = _built(name, initializer)
    assert_independent(layer.weights)
    again = _built(name, initializer)
    for a, b in zip(_values(layer), _values(again)):
        np.testing.assert_array_equal(a, b)
    other_seed = _built(name, initializer, seed=99)
    if initializer is None or isinstance(initializer, str):
        # Unseeded initializers follow the global seed.
        assert any(
            a.shape == b.shape and np.ptp(a) > 0 and not np.array_equal(a, b)
            for a, b in zip(_values(layer), _values(other_seed))
        )


def test_seeded_initializer_ignores_the_global_seed():
    seeded = keras.initializers.GlorotUniform(seed=7)
    a = _built("MultiHeadAttention", seeded, seed=1)
    b = _built("MultiHeadAttention", seeded, seed=2)
    for x, y in zip(_values(a), _values(b)):
        np.testing.assert_array_equal(x, y)


PRESETS = [("transformer", p) for p in sorted(TRANSFORMER_PRESETS)] + [
    ("seq2seq", p) for p in sorted(SEQ2SEQ_PRESETS)
]


@pytest.mark.parametrize("family, preset", PRESETS)
@pytest.mark.slow
def test_model_preset_weights_start_independent_and_reproducible(family, preset):
    def build():
        keras.utils.set_random_seed(5)
        if family == "seq2seq":
            # Luong's general score and Bahdanau's additive one: every kind of weight.
            attention = "luong" if preset != "small" else "bahdanau"
            return Seq2SeqBackbone(300, 300, preset=preset, attention=attention, score="general")
        return TransformerBackbone(
            300, 300, max_sequence_length=16, preset=preset, tie_output=False
        )

    model = build()
    assert_independent(model.weights)
    # tens of millions of parameters: building twice costs ~10 s for nothing new
    if preset != "base":
        for a, b in zip(_values(model), _values(build())):
            np.testing.assert_array_equal(a, b)


def test_shared_initializer_bug_is_caught():
    """The check itself: one instance for Q, K and V is what it must flag."""
    shared = keras.initializers.GlorotUniform()
    query = keras.Variable(shared((16, 64)), name="query")
    key = keras.Variable(shared((16, 64)), name="key")
    wider = keras.Variable(shared((32, 64)), name="wider")
    with pytest.raises(AssertionError, match="same draw"):
        assert_independent([query, key])
    with pytest.raises(AssertionError, match="same draw"):
        assert_independent([query, wider])


@pytest.mark.parametrize(
    "name",
    [
        "TransformerEncoderBlock",
        "TransformerDecoderBlock",
        "BertEmbedding",
        "MultiHeadAttention",
        "AdditiveAttention",
        "TokenAndPositionEmbedding learned",
    ],
)
def test_dtype_policy_reaches_every_sublayer(name):
    """Built with dtype="mixed_bfloat16" under a float32 global policy."""
    make, call = LAYERS[name]
    layer = make(None)
    half = type(layer).from_config({**layer.get_config(), "dtype": "mixed_bfloat16"})
    output = call(half)
    output = output[0] if isinstance(output, tuple) else output
    assert keras.backend.standardize_dtype(output.dtype) == "bfloat16"
    for sublayer in half._flatten_layers(include_self=False):
        if sublayer.name.startswith("position_") and isinstance(half, layers.DotProductAttention):
            continue  # local-p's position network is float32 on purpose
        assert sublayer.dtype_policy.name == "mixed_bfloat16", sublayer.name
    for weight in half.weights:
        assert weight.dtype == "float32", weight.path
