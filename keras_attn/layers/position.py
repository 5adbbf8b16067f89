"""Position information: the paper's sinusoidal encoding and learned embeddings."""

import keras
from keras import ops

from keras_attn.layers.initializers import clone_initializer

SINUSOID_LAYOUTS = ("interleaved", "halves")


def _check_rank3(layer, shape):
    if len(shape) != 3:
        raise ValueError(
            f"{type(layer).__name__}: inputs must have rank 3 (batch, length, "
            f"features), got shape {tuple(shape)}."
        )


def _check_length(layer, length, start_index):
    if isinstance(length, int) and isinstance(start_index, int):
        if start_index + length > layer.max_sequence_length:
            raise ValueError(
                f"{type(layer).__name__}: positions {start_index}.."
                f"{start_index + length - 1} exceed max_sequence_length="
                f"{layer.max_sequence_length}."
            )


@keras.saving.register_keras_serializable(package="keras_attn")
class SinusoidalPositionEncoding(keras.layers.Layer):
    """Sinusoidal positional encoding (Vaswani et al. 2017, section 3.5).

    PE(pos, 2i) = sin(pos / 10000^(2i/d)) and
    PE(pos, 2i+1) = cos(pos / 10000^(2i/d)), interleaved as in the paper.
    Nothing is learned; the encodings are computed on the fly, so any
    `start_index` (the step of incremental decoding) costs the same.

    Args:
        max_sequence_length: int. The longest sequence the model accepts.
        max_wavelength: float. The base, 10000 in the paper. Defaults to 10000.0.
        layout: str. One of `"interleaved"` (the paper: sin and cos of one
            wavelength side by side) or `"halves"` (the d/2 sines, then the d/2
            cosines, as tensor2tensor, fairseq and Marian lay them out).
            Defaults to "interleaved".

    Call arguments:
        inputs: tensor of shape `(B, T, d)`. Only its length and width are used.
        start_index: int or scalar int tensor. Position of `inputs[:, 0]`.
            Defaults to 0.

    Returns:
        A tensor of shape `(1, T, d)`: the encodings, broadcastable to `inputs`.

    Raises:
        ValueError: if `layout` is not one of `SINUSOID_LAYOUTS`; when called, if
            `inputs` does not have rank 3, or (a length and `start_index` known in
            Python) the positions exceed `max_sequence_length`.

    Example:

        >>> x = np.zeros((2, 10, 16), "float32")
        >>> (x + SinusoidalPositionEncoding(max_sequence_length=64)(x)).shape
        TensorShape([2, 10, 16])
    """

    def __init__(self, max_sequence_length, max_wavelength=10000.0, layout="interleaved", **kwargs):
        super().__init__(**kwargs)
        if layout not in SINUSOID_LAYOUTS:
            raise ValueError(f"`layout` must be one of {SINUSOID_LAYOUTS}, got {layout!r}.")
        self.max_sequence_length = max_sequence_length
        self.max_wavelength = max_wavelength
        self.layout = layout

    def build(self, inputs_shape):
        _check_rank3(self, inputs_shape)

    def call(self, inputs, start_index=0):
        length, dim = ops.shape(inputs)[1], inputs.shape[-1]
        _check_length(self, length, start_index)
        positions = ops.cast(ops.arange(length) + start_index, "float32")
        channel = ops.arange(dim)
        # Channel c holds the wavelength i and is a sine or a cosine: 2i / d is the exponent.
        if self.layout == "interleaved":
            i, is_sine = channel // 2, ops.equal(channel % 2, 0)
        else:
            sines = (dim + 1) // 2
            is_sine = channel < sines
            i = ops.where(is_sine, channel, channel - sines)
        exponent = ops.cast(2 * i, "float32") / float(dim)
        inverse_wavelength = ops.power(float(self.max_wavelength), -exponent)
        angles = positions[:, None] * inverse_wavelength[None, :]  # (T, d)
        encoding = ops.where(is_sine[None, :], ops.sin(angles), ops.cos(angles))
        return ops.cast(encoding[None], self.compute_dtype)

    def compute_output_shape(self, inputs_shape):
        return (1,) + tuple(inputs_shape[1:])

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "max_sequence_length": self.max_sequence_length,
                "max_wavelength": self.max_wavelength,
                "layout": self.layout,
            }
        )
        return config


@keras.saving.register_keras_serializable(package="keras_attn")
class PositionEmbedding(keras.layers.Layer):
    """Learned position embeddings (as in BERT): one vector per position.

    Args:
        max_sequence_length: int. Number of positions, the longest sequence
            accepted.
        initializer: str or keras.initializers.Initializer. Initializer of the
            `(max_sequence_length, d)` table. Defaults to "glorot_uniform".

    Call arguments:
        inputs: tensor of shape `(B, T, d)`. Only its length and width are used.
        start_index: int or scalar int tensor. Position of `inputs[:, 0]`.
            Defaults to 0.

    Returns:
        A tensor of shape `(1, T, d)`: the embeddings, broadcastable to `inputs`.

    Raises:
        ValueError: when called, if `inputs` does not have rank 3, or (a length and
            `start_index` known in Python) the positions exceed
            `max_sequence_length`.

    Example:

        >>> x = np.zeros((2, 10, 16), "float32")
        >>> PositionEmbedding(max_sequence_length=64)(x).shape
        TensorShape([1, 10, 16])
    """

    def __init__(self, max_sequence_length, initializer="glorot_uniform", **kwargs):
        super().__init__(**kwargs)
        self.max_sequence_length = max_sequence_length
        self.initializer = keras.initializers.get(initializer)

    def build(self, inputs_shape):
        _check_rank3(self, inputs_shape)
        self.embeddings = self.add_weight(
            name="embeddings",
            shape=(self.max_sequence_length, inputs_shape[-1]),
            initializer=clone_initializer(self.initializer, "embeddings"),
        )

    def call(self, inputs, start_index=0):
        length = ops.shape(inputs)[1]
        _check_length(self, length, start_index)
        table = ops.slice(
            ops.convert_to_tensor(self.embeddings),
            (start_index, 0),
            (length, self.embeddings.shape[-1]),
        )
        return ops.cast(table[None], self.compute_dtype)

    def compute_output_shape(self, inputs_shape):
        return (1,) + tuple(inputs_shape[1:])

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "max_sequence_length": self.max_sequence_length,
                "initializer": keras.initializers.serialize(self.initializer),
            }
        )
        return config
