"""The feed-forward activations a model may be built with, by name:
Keras's, and GELU's tanh approximation.

BERT's original code computes GELU with its tanh approximation (Hendrycks and
Gimpel 2016, section 2); Hugging Face calls it `gelu_new` and its exact, erf
form `gelu` (Keras's `"gelu"`).

    >>> layers = [keras.layers.Activation(activation(name)) for name in ("gelu", "gelu_tanh")]
    >>> [[round(float(y), 4) for y in layer(np.array([-2.0, 0.5], "float32"))] for layer in layers]
    [[-0.0455, 0.3457], [-0.0454, 0.3457]]
"""

import keras

ACTIVATIONS = ("gelu", "gelu_tanh", "relu", "silu")


@keras.saving.register_keras_serializable(package="keras_attn")
def gelu_tanh(x):
    """GELU's tanh approximation: 0.5 x (1 + tanh(√(2/π) (x + 0.044715 x³))).

    Args:
        x: tensor. The inputs.

    Returns:
        A tensor of the shape of `x`.
    """
    return keras.activations.gelu(x, approximate=True)


def activation(name):
    """What a Keras layer's `activation` takes for `name`: Keras's own name, or the function.

    Args:
        name: str. One of `ACTIVATIONS`: `"gelu"`, `"gelu_tanh"`, `"relu"`, `"silu"`.

    Returns:
        str or callable. `name` itself, or `gelu_tanh` for `"gelu_tanh"`.

    Raises:
        ValueError: if `name` is not one of `ACTIVATIONS`.
    """
    if name not in ACTIVATIONS:
        raise ValueError(f"`activation` must be one of {ACTIVATIONS}, got {name!r}.")
    return gelu_tanh if name == "gelu_tanh" else name
