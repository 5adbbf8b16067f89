import keras
import numpy as np
import pytest

from keras_attn.layers import PositionEmbedding, SinusoidalPositionEncoding
from tests.layers.layer_checks import check_layer


def _paper_encoding(length, dim):
    pe = np.zeros((length, dim))
    for pos in range(length):
        for i in range(0, dim, 2):
            pe[pos, i] = np.sin(pos / 10000 ** (i / dim))
            pe[pos, i + 1] = np.cos(pos / 10000 ** (i / dim))
    return pe


def test_sinusoidal_matches_the_paper_formula():
    x = np.zeros((2, 50, 16), "float32")
    encoding = SinusoidalPositionEncoding(max_sequence_length=64)(x)
    assert encoding.shape == (1, 50, 16)
    np.testing.assert_allclose(encoding[0], _paper_encoding(50, 16), atol=1e-5)


def test_start_index_shifts_positions():
    layer = SinusoidalPositionEncoding(max_sequence_length=64)
    full = np.asarray(layer(np.zeros((1, 20, 8), "float32")))
    step = layer(np.zeros((1, 1, 8), "float32"), start_index=keras.ops.convert_to_tensor(13))
    np.testing.assert_allclose(step[0, 0], full[0, 13], atol=1e-6)
    learned = PositionEmbedding(max_sequence_length=32)
    table = np.asarray(learned(np.zeros((1, 20, 8), "float32")))
    np.testing.assert_allclose(
        learned(np.zeros((1, 3, 8), "float32"), start_index=5)[0], table[0, 5:8]
    )


def test_too_long_and_wrong_rank_are_clear_errors():
    with pytest.raises(ValueError, match=r"exceed max_sequence_length=8"):
        SinusoidalPositionEncoding(max_sequence_length=8)(np.zeros((1, 9, 4), "float32"))
    with pytest.raises(ValueError, match=r"rank 3"):
        PositionEmbedding(max_sequence_length=8)(np.zeros((1, 4), "float32"))


@pytest.mark.parametrize(
    "make", [lambda: SinusoidalPositionEncoding(16), lambda: PositionEmbedding(16)]
)
def test_standard_layer_checks(make, tmp_path):
    x = np.random.default_rng(0).normal(size=(2, 10, 8)).astype("float32")
    check_layer(
        make,
        [x],
        call=lambda layer, x: keras.layers.Dense(8)(x + layer(x)),
        tmp_path=tmp_path,
    )
