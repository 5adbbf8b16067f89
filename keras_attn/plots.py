"""Attention heat maps (matplotlib, no display needed)."""

import os

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402


def cross_attention_figure(weights, source_tokens, output_tokens, title=None):
    """One heat map per decoder layer and head, with a shared colour bar.

    Args:
        weights: float array of shape `(L, layers, heads, S)`. The cross-attention weights of
            one sentence: output step × layer × head × source position.
        source_tokens: list of str. The S source tokens (x axis).
        output_tokens: list of str. The L output tokens (y axis).
        title: str or `None`. The figure's title. Defaults to `None` (no title).

    Returns:
        A matplotlib `Figure` (close it with `plt.close` when done).

    Raises:
        ValueError: when there are no source or no output tokens (nothing to draw).
    """
    weights = np.asarray(weights)
    if not len(source_tokens) or not len(output_tokens):
        raise ValueError("Nothing to plot: the input or its translation has no tokens.")
    steps, layers, heads, _ = weights.shape
    figure, axes = plt.subplots(
        layers,
        heads,
        figsize=(2.2 + 0.32 * len(source_tokens) * heads, 1.4 + 0.3 * steps * layers),
        squeeze=False,
        layout="constrained",
    )
    for layer in range(layers):
        for head in range(heads):
            axis = axes[layer][head]
            image = axis.imshow(
                weights[:, layer, head, :], cmap="viridis", vmin=0, vmax=1, aspect="auto"
            )
            axis.set_xticks(range(len(source_tokens)))
            axis.set_xticklabels(source_tokens, rotation=90, fontsize=7)
            axis.set_yticks(range(len(output_tokens)))
            axis.set_yticklabels(output_tokens if head == 0 else [], fontsize=7)
            axis.set_title(f"layer {layer + 1}, head {head + 1}", fontsize=8)
            if layer == layers - 1:
                axis.set_xlabel("source tokens", fontsize=8)
            if head == 0:
                axis.set_ylabel("target tokens", fontsize=8)
    figure.colorbar(image, ax=axes, label="attention weight", shrink=0.8)
    if title:
        figure.suptitle(title)
    return figure


def caption_attention_figure(image, words, weights, grid_shape, title=None):
    """The image once per written word, with that word's attention over the grid laid on it.

    Args:
        image: array of shape `(H, W, 3)`. The pixels, uint8 or float in [0, 1].
        words: list of str. The caption's words (one panel each).
        weights: float array of shape `(len(words), rows·columns)`. Each word's attention over
            the grid cells.
        grid_shape: tuple. `(rows, columns)` of the encoder's grid.
        title: str or `None`. The figure's title. Defaults to `None` (no title).

    Returns:
        A matplotlib `Figure` (close it with `plt.close` when done).
    """
    image = np.asarray(image)
    rows, columns = grid_shape
    height, width = image.shape[:2]
    panels = max(len(words), 1)
    per_row = min(panels, 6)
    figure, axes = plt.subplots(
        -(-panels // per_row),
        per_row,
        figsize=(1.9 * per_row, 2.1 * -(-panels // per_row)),
        squeeze=False,
        layout="constrained",
    )
    for axis in axes.flat:
        axis.axis("off")
    for axis, word, weight in zip(axes.flat, words, weights):
        axis.imshow(image)
        axis.imshow(
            np.asarray(weight).reshape(rows, columns),
            cmap="magma",
            alpha=0.6,
            extent=(-0.5, width - 0.5, height - 0.5, -0.5),
            interpolation="nearest",
        )
        axis.set_title(word, fontsize=9)
    if title:
        figure.suptitle(title, fontsize=9)
    return figure


def check_image_path(path):
    """Returns the image format of `path`'s suffix, or raises a one-line `ValueError`.

    Args:
        path: str. The image's file name.

    Returns:
        A str: the suffix, lowercased and without its dot (`"png"`, `"pdf"`, ...).

    Raises:
        ValueError: when matplotlib cannot write images of that suffix.
    """
    suffix = os.path.splitext(path)[1].lstrip(".").lower()
    formats = Figure().canvas.get_supported_filetypes()
    if suffix not in formats:
        raise ValueError(
            f"{path}: not an image name matplotlib can write; end it in "
            f"{', '.join('.' + name for name in sorted(formats))}"
        )
    return suffix


def plot_cross_attention(weights, source_tokens, output_tokens, path, title=None):
    """Saves `cross_attention_figure(...)` to `path` (see `save_figure`).

    Args:
        weights: float array of shape `(L, layers, heads, S)`. As for
            `cross_attention_figure`.
        source_tokens: list of str. As for `cross_attention_figure`.
        output_tokens: list of str. As for `cross_attention_figure`.
        path: str. Where to write the image; its suffix names the format.
        title: str or `None`. As for `cross_attention_figure`. Defaults to `None`.

    Raises:
        ValueError: when there is nothing to plot, or `path` has a suffix matplotlib cannot
            write.
        OSError: when the folder cannot be created or written.
    """
    suffix = check_image_path(path)
    save_figure(cross_attention_figure(weights, source_tokens, output_tokens, title), path, suffix)


def save_figure(figure, path, suffix=None):
    """Writes `figure` to `path`, creating its folder, and closes it.

    The image is written under a temporary name and renamed, so `path` is
    never half-written; its format follows the suffix (PNG, PDF, SVG, ...).

    Args:
        figure: `matplotlib.figure.Figure`. The figure to write; closed afterwards.
        path: str. Where to write the image.
        suffix: str or `None`. The format, as `check_image_path` returns it. Defaults to
            `None`: `check_image_path(path)`.

    Raises:
        ValueError: when `suffix` is `None` and matplotlib cannot write `path`'s suffix.
        OSError: when the folder cannot be created or written.
    """
    suffix = suffix or check_image_path(path)
    folder = os.path.dirname(path)
    if folder:
        os.makedirs(folder, exist_ok=True)
    temporary = os.path.join(folder, f".{os.path.basename(path)}.tmp-{os.getpid()}")
    try:
        figure.savefig(temporary, dpi=110, format=suffix)
        os.replace(temporary, path)
    finally:
        plt.close(figure)
        if os.path.exists(temporary):
            os.remove(temporary)
