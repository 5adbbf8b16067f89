"""Image captioning with visual attention: Show, Attend and Tell (Xu et al. 2015).

A convolutional encoder turns the image into a grid of L annotation
vectors; an LSTM writes the caption and attends over the grid's cells at
every word (`keras_attn.layers.CaptionDecoder`), starting from a state
made of the mean annotation vector (section 3.1.2: c_0 = f_init,c(mean a),
h_0 = f_init,h(mean a); `pooling="max"` takes each feature's maximum
instead). `attention="none"` is the baseline without attention: the same
decoder reads only that starting state.
"""

import keras
from keras import ops

from keras_attn.layers import AttentionDecoder, CaptionDecoder, ImageGridEncoder
from keras_attn.layers.caption_decoder import HARD_ESTIMATORS
from keras_attn.models.backbone import Backbone
from keras_attn.models.seq2seq import RecurrentDecoding
from keras_attn.presets import PRESETS as _ALL_PRESETS
from keras_attn.presets import architecture

PRESETS = _ALL_PRESETS["captioner"]
ATTENTIONS = ("soft", "hard", "none")  # Show, Attend and Tell's two, or none (the baseline)
POOLINGS = ("mean", "max")  # how the grid makes the LSTM's starting state, the default first


@keras.saving.register_keras_serializable(package="keras_attn")
class CaptionerBackbone(RecurrentDecoding, Backbone):
    """The captioner as a functional `keras.Model`: an image and the shifted caption in, logits out.

    Inputs `image` `(B, image_size, image_size, 3)` float32 in [0, 1] and
    `target_in` `(B, T)` ids ([BOS] first, 0 as padding); the output is the
    `(B, T, vocabulary_size)` float32 logits of the next word, all words in
    one call (teacher forcing).

    Its parts are the attributes `encoder` (`ImageGridEncoder`), `init_h`
    and `init_c` (the starting state's layers) and `decoder`.

    Args:
        vocabulary_size: int. Size of the caption vocabulary.
        preset: str or `None`. One of `"tiny"`, `"small"` (see `PRESETS`): values of `filters`,
            `feature_dim`, `hidden_dim` and `stage_depth` for those not given explicitly.
            Defaults to `None`.
        image_size: int. The side of the square input images. Defaults to 64.
        filters: tuple of int. The encoder's stage widths (`ImageGridEncoder`). Defaults to the
            preset's, or `(32, 64, 128)` without a preset.
        feature_dim: int. D, the width of each grid cell's vector. Defaults to the preset's, or
            128 without a preset.
        hidden_dim: int. The LSTM's width; the embeddings' too. Defaults to the preset's, or 256
            without a preset.
        stage_depth: int. 3×3 convolutions in each of the encoder's stages (one gave better
            grounding than VGG's two: docs/benchmarks/captioning.md). Defaults to the preset's,
            or 1 without a preset.
        attention: str. One of `"soft"` (section 4.2), `"hard"` (4.1: one sampled cell a word
            when training, the argmax cell at inference) or `"none"` (the starting state only;
            the attention's arguments below are then unused). Defaults to `"soft"`.
        pooling: str. How the grid's vectors make the LSTM's starting state: `"mean"` (the
            paper's) or `"max"` (each feature's largest value over the cells, which keeps a small
            object that the mean dilutes among the background's cells). Defaults to `"mean"`.
        gate: bool. The gating scalar β. Defaults to `True`.
        attention_regularization: float. λ of the doubly stochastic regularizer (0: off; on the
            generated scenes λ = 1 lowered exact match and grounding:
            docs/benchmarks/captioning.md). Defaults to 0.0.
        hard_estimator: str. Hard attention's gradient, `CaptionDecoder`'s `estimator`:
            `"gumbel"` (straight-through Gumbel-softmax) or `"reinforce"` (the paper's).
            Defaults to `"gumbel"`.
        reinforce_weight: float. REINFORCE's weight (`CaptionDecoder`). Defaults to 1.0.
        entropy_weight: float. REINFORCE's entropy bonus (`CaptionDecoder`). Defaults to 0.01.
        expectation_rate: float. REINFORCE's share of images trained with the expectation
            (`CaptionDecoder`). Defaults to 0.5.
        attention_units: int. Hidden size of the additive score. Defaults to `hidden_dim`.
        dropout: float. Dropout on the embeddings and before the output. Defaults to 0.1.
        **kwargs: Other arguments of `keras.Model`, such as `name` and `trainable`.

    Raises:
        ValueError: when `preset`, `attention`, `pooling` or (with attention) `hard_estimator`
            is not one of its names.

    Example:

        >>> model = CaptionerBackbone(40, preset="tiny", image_size=32)
        >>> images = np.zeros((2, 32, 32, 3), "float32")
        >>> model({"image": images, "target_in": np.array([[2, 5]] * 2)}).shape
        TensorShape([2, 2, 40])
        >>> model.encoder.cells
        16
    """

    presets = PRESETS

    def __init__(
        self,
        vocabulary_size,
        preset=None,
        image_size=64,
        filters=None,
        feature_dim=None,
        hidden_dim=None,
        stage_depth=None,
        attention="soft",
        pooling=POOLINGS[0],
        gate=True,
        attention_regularization=0.0,
        hard_estimator=HARD_ESTIMATORS[0],
        reinforce_weight=1.0,
        entropy_weight=0.01,
        expectation_rate=0.5,
        attention_units=None,
        dropout=0.1,
        **kwargs,
    ):
        if attention not in ATTENTIONS:
            raise ValueError(f"`attention` must be one of {ATTENTIONS}, got {attention!r}.")
        if pooling not in POOLINGS:
            raise ValueError(f"`pooling` must be one of {POOLINGS}, got {pooling!r}.")
        settings = architecture(
            "captioner",
            preset,
            PRESETS["small"],  # what neither a preset nor an argument gives
            filters=filters,
            feature_dim=feature_dim,
            hidden_dim=hidden_dim,
            stage_depth=stage_depth,
        )
        filters, feature_dim, hidden_dim = (
            tuple(settings["filters"]),
            settings["feature_dim"],
            settings["hidden_dim"],
        )
        stage_depth = settings["stage_depth"]
        arguments = dict(
            vocabulary_size=vocabulary_size,
            image_size=image_size,
            filters=list(filters),
            feature_dim=feature_dim,
            hidden_dim=hidden_dim,
            stage_depth=stage_depth,
            attention=attention,
            pooling=pooling,
            gate=gate,
            attention_regularization=attention_regularization,
            hard_estimator=hard_estimator,
            reinforce_weight=reinforce_weight,
            entropy_weight=entropy_weight,
            expectation_rate=expectation_rate,
            attention_units=attention_units,
            dropout=dropout,
        )

        image = keras.Input((image_size, image_size, 3), dtype="float32", name="image")
        target_in = keras.Input((None,), dtype="int32", name="target_in")
        encoder = ImageGridEncoder(filters, feature_dim, stage_depth, name="encoder")
        init_h = keras.layers.Dense(hidden_dim, activation="tanh", name="init_h")
        init_c = keras.layers.Dense(hidden_dim, activation="tanh", name="init_c")
        decoder_arguments = dict(attention_units=attention_units, dropout=dropout, name="decoder")
        if attention != "none":
            decoder = CaptionDecoder(
                vocabulary_size,
                hidden_dim,
                gate=gate,
                hard=attention == "hard",
                attention_regularization=attention_regularization,
                estimator=hard_estimator,
                reinforce_weight=reinforce_weight,
                entropy_weight=entropy_weight,
                expectation_rate=expectation_rate,
                **decoder_arguments,
            )
        else:
            decoder = AttentionDecoder(
                vocabulary_size, hidden_dim, attention="none", **decoder_arguments
            )
        grid = encoder(image)
        logits = decoder(target_in, grid, starting_state(init_h, init_c, grid, pooling))
        logits = keras.layers.Activation("linear", dtype="float32", name="logits")(logits)
        super().__init__(
            {"image": image, "target_in": target_in}, logits, **{"name": "captioner", **kwargs}
        )
        self.encoder, self.init_h, self.init_c, self.decoder = encoder, init_h, init_c, decoder
        self.pooling = pooling
        self._arguments = arguments

    def call_encoder(self, image, rows_per_source=1):
        """Encodes `image` once; the per-image part of a decoding state.

        Args:
            image: float32 tensor of shape `(B, H, W, 3)`. The images, in [0, 1].
            rows_per_source: int or scalar int32 tensor. The decoded rows per image (the beam
                width); unused: the grid is kept once per image. Defaults to 1.

        Returns:
            A dict: `"memory"`, the `(B, L, D)` grid; `"source_mask"`, `(B, L)`, all `True`;
                `"final_states"`, the LSTM's starting state (`starting_state`); and, with attention,
                `"memory_keys"`, what the attention scores need of the grid.
        """
        grid = self.encoder(image, training=False)
        encoded = {
            "memory": grid,
            "source_mask": ops.ones(ops.shape(grid)[:2], "bool"),
            "final_states": starting_state(self.init_h, self.init_c, grid, self.pooling),
        }
        keys = self.decoder.attention_keys(grid)
        if keys is not None:
            encoded["memory_keys"] = keys
        return encoded

    def attention_weights(self, image, target_in):
        """α: the weight of each grid cell as the decoder reads each of `target_in`'s ids after
        [BOS].

        Row t is where the model looks while it writes the word after `target_in[:, t]`: of a
        caption it wrote, `target_in` is [BOS] and the caption without its last id.

        Args:
            image: float32 tensor of shape `(B, H, W, 3)`. The images, in [0, 1].
            target_in: int tensor of shape `(B, T)`. Caption ids, [BOS] first, 0 as padding.

        Returns:
            A float32 tensor of shape `(B, T, L)`; zeros without attention.
        """
        grid = self.encoder(image, training=False)
        if not isinstance(self.decoder, CaptionDecoder):
            return ops.zeros(
                (ops.shape(target_in)[0], ops.shape(target_in)[1], self.encoder.cells), "float32"
            )
        state = starting_state(self.init_h, self.init_c, grid, self.pooling)
        _, weights = self.decoder(
            target_in, grid, state, training=False, return_attention_scores=True
        )
        return ops.cast(weights, "float32")


def starting_state(init_h, init_c, grid, pooling=POOLINGS[0]):
    """The LSTM's starting state from the grid's vectors pooled over the cells: their mean
    (section 3.1.2) or their maximum (`pooling="max"`).

    Args:
        init_h: `keras.layers.Dense`. The layer that makes h_0 of the pooled vector.
        init_c: `keras.layers.Dense`. The layer that makes c_0 of the pooled vector.
        grid: float tensor of shape `(B, L, D)`. The grid's vectors.
        pooling: str. One of `"mean"`, `"max"`. Defaults to `"mean"`.

    Returns:
        `[[h_0, c_0]]`: the states of the one LSTM layer.
    """
    pooled = ops.max(grid, axis=1) if pooling == "max" else ops.mean(grid, axis=1)
    return [[init_h(pooled), init_c(pooled)]]
