"""A small convolutional encoder that turns an image into a grid of feature vectors to attend over.

Show, Attend and Tell (Xu et al. 2015, section 3.1.1) takes the 14×14×512
feature map of a lower convolutional layer of VGG, not its final vector, so
that the decoder can attend to parts of the image: a grid of L = H×W
annotation vectors a_i, each of D numbers. This encoder is a small network
of the same kind, trained from scratch: VGG's stages (3×3 convolutions,
then 2×2 max pooling), so a 64×64 image gives an 8×8 grid with 3 stages
and each cell's receptive field is centred on its own tile (36 pixels wide
with two convolutions a stage, 22 with one); then a 1×1 convolution to
`feature_dim`, and a learned embedding of each cell's position added to
its vector. (VGG's cells know where they
are from their wide receptive fields and the zero padding at the borders;
a small network needs to be told, or its decoder could not say "left of".)
"""

import keras
import numpy as np
from keras import ops

from keras_attn.layers.initializers import clone_initializer


@keras.saving.register_keras_serializable(package="keras_attn")
class ImageGridEncoder(keras.layers.Layer):
    """Images `(B, H, W, C)` in [0, 1] → annotation vectors `(B, L, feature_dim)`.

    L = (H/2^s)·(W/2^s) for s stages (each halving rounds up).

    Args:
        filters: tuple of int. The channels of each stage (its length is the
            number of stages, each halving the height and width).
            Defaults to (32, 64, 128).
        feature_dim: int. D, the width of each cell's vector. Defaults to 128.
        stage_depth: int. The 3×3 convolutions in each stage (VGG: 2 to 4); fewer
            give each cell a narrower view of the image. Defaults to 2.
        kernel_initializer: str or keras.initializers.Initializer. Initializer of
            every convolution (each its own copy). Defaults to "he_normal".

    Call arguments:
        images: tensor of shape `(B, H, W, C)`, values in [0, 1], of the height and
            width the layer was built on (its position embedding has one row per
            cell).

    Returns:
        A tensor of shape `(B, L, feature_dim)`: the annotation vectors.

    Example:

        >>> encoder = ImageGridEncoder(filters=(8, 16, 32), feature_dim=24)
        >>> encoder(np.random.rand(2, 64, 64, 3).astype("float32")).shape
        TensorShape([2, 64, 24])
    """

    def __init__(
        self,
        filters=(32, 64, 128),
        feature_dim=128,
        stage_depth=2,
        kernel_initializer="he_normal",
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.filters = tuple(filters)
        self.feature_dim = feature_dim
        self.stage_depth = stage_depth
        self.kernel_initializer = keras.initializers.get(kernel_initializer)

    def build(self, images_shape):
        def conv(units, size, strides, name, activation="relu"):
            return keras.layers.Conv2D(
                units,
                size,
                strides=strides,
                padding="same",
                activation=activation,
                name=name,
                kernel_initializer=clone_initializer(self.kernel_initializer, name),
                dtype=self.dtype_policy,
            )

        self.convolutions = []
        for i, units in enumerate(self.filters):
            self.convolutions += [
                conv(units, 3, 1, f"stage_{i}_conv_{j + 1}") for j in range(self.stage_depth)
            ]
            self.convolutions.append(
                keras.layers.MaxPooling2D(
                    2, padding="same", name=f"stage_{i}_pool", dtype=self.dtype_policy
                )
            )
        self.projection = conv(self.feature_dim, 1, 1, "projection", activation=None)
        shape = images_shape
        for layer in [*self.convolutions, self.projection]:
            layer.build(shape)
            shape = layer.compute_output_shape(shape)
        self.grid_shape = (shape[1], shape[2])
        self.cells = shape[1] * shape[2]
        self.position_embedding = self.add_weight(
            name="position_embedding",
            shape=(self.cells, self.feature_dim),
            initializer=keras.initializers.RandomNormal(stddev=0.02),
        )

    def call(self, images):
        x = ops.cast(images, self.compute_dtype)
        for layer in self.convolutions:
            x = layer(x)
        x = self.projection(x)  # (B, h, w, D)
        x = ops.reshape(x, (ops.shape(x)[0], self.cells, self.feature_dim))
        return x + ops.cast(self.position_embedding, x.dtype)

    def compute_output_shape(self, images_shape):
        height, width = images_shape[1], images_shape[2]
        for _ in self.filters:
            height, width = (height + 1) // 2, (width + 1) // 2
        return (images_shape[0], height * width, self.feature_dim)

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "filters": list(self.filters),
                "feature_dim": self.feature_dim,
                "stage_depth": self.stage_depth,
                "kernel_initializer": keras.initializers.serialize(self.kernel_initializer),
            }
        )
        return config


def cell_centres(grid_shape, image_size):
    """The pixel rows and columns of the centres of a grid's cells over a square image.

    Where a cell is, to say whether it lies inside a box.

    Args:
        grid_shape: tuple. `(rows, columns)` of the grid.
        image_size: int. The side of the square image, in pixels.

    Returns:
        tuple. `(rows' centres, columns' centres)`, numpy arrays of `rows` and
        `columns` pixel coordinates.

    Example:

        >>> cell_centres((2, 4), 8)
        (array([1.5, 5.5]), array([0.5, 2.5, 4.5, 6.5]))
    """
    rows, columns = grid_shape
    return (np.arange(rows) + 0.5) * image_size / rows - 0.5, (
        np.arange(columns) + 0.5
    ) * image_size / columns - 0.5
