import numpy as np
import pytest

from keras_attn.layers import AddAndNorm, FeedForward
from tests.layers.layer_checks import check_layer

RNG = np.random.default_rng(2)
X = RNG.normal(size=(2, 5, 8)).astype("float32")
Y = RNG.normal(size=(2, 5, 8)).astype("float32")


def _layer_norm(x):
    return (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + 1e-5)


def test_post_norm_is_layer_norm_of_the_sum():
    layer = AddAndNorm()
    np.testing.assert_allclose(layer(X, Y), _layer_norm(X + Y), atol=1e-5)
    np.testing.assert_array_equal(layer.normalize_input(X), X)


def test_pre_norm_normalizes_the_sublayer_input_and_adds_plainly():
    layer = AddAndNorm(norm_first=True)
    np.testing.assert_allclose(layer(X, Y), X + Y, atol=1e-6)
    np.testing.assert_allclose(layer.normalize_input(X), _layer_norm(X), atol=1e-5)


def test_feed_forward_is_two_dense_layers_with_relu_between():
    layer = FeedForward(16)
    output = layer(X)
    w1, b1 = [np.asarray(w) for w in layer.inner.weights]
    w2, b2 = [np.asarray(w) for w in layer.outer.weights]
    np.testing.assert_allclose(output, np.maximum(X @ w1 + b1, 0) @ w2 + b2, atol=1e-5)


@pytest.mark.slow
def test_standard_layer_checks(tmp_path):
    check_layer(lambda: AddAndNorm(dropout=0.1), [X, Y], tmp_path=tmp_path)
    check_layer(lambda: FeedForward(16, activation="gelu"), [X], tmp_path=tmp_path)
