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

    Args:
        vocabulary_size: size of the caption vocabulary.
        preset: `"tiny"` or `"small"` (see `PRESETS`): values of `filters`,
            `feature_dim`, `hidden_dim` and `stage_depth` for those not given
            explicitly.
        image_size: the side of the square input images.
        filters: the encoder's stage widths (`ImageGridEncoder`).
        feature_dim: D, the width of each grid cell's vector.
        stage_depth: 3×3 convolutions in each of the encoder's stages (one
            gave better grounding than VGG's two: docs/benchmarks/captioning.md).
        hidden_dim: the LSTM's width; the embeddings' too.
        attention: `"soft"` (section 4.2), `"hard"` (4.1: one sampled cell a
            word when training, the argmax cell at inference) or `"none"`
            (the starting state only).
        pooling: how the grid's vectors make the LSTM's starting state:
            `"mean"` (the paper's) or `"max"` (each feature's largest value
            over the cells, which keeps a small object that the mean
            dilutes among the background's cells).
        gate: the gating scalar β.
        attention_regularization: λ of the doubly stochastic regularizer (0:
            off; on the generated scenes λ = 1 lowered exact match and
            grounding: docs/benchmarks/captioning.md).
        hard_estimator: hard attention's gradient: `"gumbel"`
            (straight-through Gumbel-softmax) or `"reinforce"` (the paper's),
            `CaptionDecoder`'s `estimator`.
        reinforce_weight, entropy_weight, expectation_rate: REINFORCE's
            weight, entropy bonus and share of images trained with the
            expectation (`CaptionDecoder`).
        attention_units: hidden size of the additive score.
        dropout: on the embeddings and before the output.
        **kwargs: `keras.Model` arguments (`name`, `trainable`).

    Its parts are the attributes `encoder` (`ImageGridEncoder`), `init_h`
    and `init_c` (the starting state's layers) and `decoder`.

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
        """Encodes `image` `(B, H, W, 3)` once: `{"memory": (B, L, D)
        the grid, "source_mask", "final_states"}`.
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
        """α `(B, T, L)`: the weight of each grid cell as the decoder
        reads each of `target_in`'s ids after [BOS].

        Row t is where the model looks while it writes the word after
        `target_in[:, t]`: of a caption it wrote, `target_in` is [BOS] and
        the caption without its last id. Zeros without attention.
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
    """The LSTM's `[[h_0, c_0]]` from the grid's `(B, L, D)` vectors pooled over the cells: their
    mean (section 3.1.2) or their maximum (`pooling="max"`)."""
    pooled = ops.max(grid, axis=1) if pooling == "max" else ops.mean(grid, axis=1)
    return [[init_h(pooled), init_c(pooled)]]
