import os

import numpy as np
import pytest

from keras_attn import plots

SOURCE = ["ein", "hund", "läuft", "."]
OUTPUT = ["a", "dog", "runs", ".", "[EOS]"]


def _weights(layers=2, heads=3):
    weights = np.random.default_rng(0).random((len(OUTPUT), layers, heads, len(SOURCE)))
    return weights / weights.sum(-1, keepdims=True)


def test_heat_maps_have_a_colour_bar_and_axis_titles():
    import matplotlib.pyplot as plt

    figure = plots.cross_attention_figure(_weights(), SOURCE, OUTPUT, title="a dog runs.")
    try:
        maps = [axis for axis in figure.axes if axis.get_title()]
        bars = [axis for axis in figure.axes if axis.get_ylabel() == "attention weight"]
        assert len(maps) == 6 and len(bars) == 1  # one map per layer and head, one shared bar
        bottom_left = maps[3]  # layer 2, head 1
        assert bottom_left.get_title() == "layer 2, head 1"
        assert (
            bottom_left.get_xlabel() == "source tokens"
            and bottom_left.get_ylabel() == "target tokens"
        )
        assert [t.get_text() for t in bottom_left.get_xticklabels()] == SOURCE
        assert [t.get_text() for t in bottom_left.get_yticklabels()] == OUTPUT
        assert bars[0].get_ylim() == (0.0, 1.0)
        np.testing.assert_allclose(maps[4].images[0].get_array(), _weights()[:, 1, 1, :])
    finally:
        plt.close(figure)


def test_nothing_to_plot_and_unknown_formats_are_one_line_errors(tmp_path):
    with pytest.raises(ValueError, match="no tokens"):
        plots.cross_attention_figure(np.zeros((0, 1, 1, 4)), SOURCE, [])
    with pytest.raises(ValueError, match=r"a\.xyz: not an image name .* \.png"):
        plots.plot_cross_attention(_weights(), SOURCE, OUTPUT, str(tmp_path / "a.xyz"))


def test_the_image_goes_into_new_folders_under_a_temporary_name(tmp_path):
    path = tmp_path / "new" / "folders" / "attention.png"
    plots.plot_cross_attention(_weights(1, 1), SOURCE, OUTPUT, str(path))
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert os.listdir(path.parent) == ["attention.png"]  # no temporary file left
