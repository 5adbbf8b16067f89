"""Attention heat maps (matplotlib, no display needed)."""

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402


def plot_cross_attention(weights, source_tokens, output_tokens, path, title=None):
    """Saves one heat map per decoder layer and head.

    Args:
        weights: `(L, layers, heads, S)` cross-attention weights of one
            sentence: output step × layer × head × source position.
        source_tokens: the S source tokens (x axis).
        output_tokens: the L output tokens (y axis).
        path: where to write the image (PNG, PDF, ... by suffix).
        title: optional figure title.
    """
    weights = np.asarray(weights)
    steps, layers, heads, _ = weights.shape
    figure, axes = plt.subplots(
        layers,
        heads,
        figsize=(1.2 + 0.32 * len(source_tokens) * heads, 0.8 + 0.3 * steps * layers),
        squeeze=False,
    )
    for layer in range(layers):
        for head in range(heads):
            axis = axes[layer][head]
            axis.imshow(weights[:, layer, head, :], cmap="viridis", vmin=0, vmax=1, aspect="auto")
            axis.set_xticks(range(len(source_tokens)))
            axis.set_xticklabels(source_tokens, rotation=90, fontsize=7)
            axis.set_yticks(range(len(output_tokens)))
            axis.set_yticklabels(output_tokens if head == 0 else [], fontsize=7)
            axis.set_title(f"layer {layer + 1}, head {head + 1}", fontsize=8)
    if title:
        figure.suptitle(title)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)

