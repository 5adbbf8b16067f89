"""The Transformer encoder-decoder for translation (Vaswani et al. 2017)."""

import keras
from keras import ops

from keras_attn.layers import (
    LAYER_NORM_EPSILON,
    OutputBias,
    TokenAndPositionEmbedding,
    TransformerDecoderBlock,
    TransformerEncoderBlock,
    activations,
)
from keras_attn.models.backbone import Backbone
from keras_attn.presets import PRESETS as _ALL_PRESETS
from keras_attn.presets import architecture
from pipelines.special_tokens import PAD_ID

PRESETS = _ALL_PRESETS["transformer"]


@keras.saving.register_keras_serializable(package="keras_attn")
class TransformerBackbone(Backbone):
    """The Transformer as a functional `keras.Model`: source and shifted target in, logits out.

    Inputs `source` `(B, S)` and `target_in` `(B, T)` are token ids with
    [PAD] (id 0) as padding (`target_in` starts with [BOS]); the output is
    the `(B, T, target_vocabulary_size)` float32 logits of the next target
    token. Padding masks are computed from the ids and passed to every block.

    Its parts are attributes: `source_embedding`, `encoder_blocks`,
    `encoder_norm` (pre-norm only, else `None`), `target_embedding` (the
    source's with `share_embeddings`), `decoder_blocks`, `decoder_norm` and
    `output_projection` (`None` when tied) and `output_bias` (`None` without
    one). Decoding one token at a time uses `call_encoder` once per source,
    then `call_decoder_with_cache` (see `keras_attn.decoding.Stepper`).

    Args:
        source_vocabulary_size: int. Size of the source vocabulary.
        target_vocabulary_size: int. Size of the target vocabulary.
        max_sequence_length: int. The longest source or target sequence. Defaults to 128.
        preset: str or `None`. One of `"tiny"`, `"small"`, `"base"` (see `PRESETS`): values of
            `num_layers`, `hidden_dim`, `num_heads` and `intermediate_dim` for those not given
            explicitly (`keras_attn.presets`). Defaults to `None`.
        num_layers: int. Encoder layers (and decoder layers unless `num_decoder_layers` is
            given). Defaults to the preset's, or 3 without a preset.
        num_decoder_layers: int. Decoder layers. Defaults to `num_layers`.
        hidden_dim: int. The model width (the paper's d_model); `num_heads` must divide it.
            Defaults to the preset's, or 256 without a preset.
        num_heads: int. Attention heads. Defaults to the preset's, or 8 without a preset.
        intermediate_dim: int. The feed-forward width d_ff. Defaults to the preset's, or 512
            without a preset.
        dropout: float. Residual and embedding dropout (P_drop). Defaults to 0.1.
        norm_first: bool. Pre-norm blocks (adds a final LayerNorm to each stack). Defaults to
            `False`.
        share_embeddings: bool. One embedding table for source and target (needs a shared
            vocabulary: both sizes equal). Defaults to `False`.
        tie_output: bool. The output projection is the transposed target embedding (section
            3.4). Defaults to `True`.
        activation: str. The feed-forward's activation, one of
            `layers.activations.ACTIVATIONS`: `"gelu"`, `"gelu_tanh"`, `"relu"` (the paper's),
            `"silu"`. Defaults to `"relu"`.
        position: str. The embeddings' positions, a kind of `TokenAndPositionEmbedding`: one of
            `"sinusoidal"` (the paper's), `"sinusoidal_halves"`, `"learned"`. Defaults to
            `"sinusoidal"`.
        output_bias: bool. A learned bias on the logits (`OutputBias`), which a tied output
            projection otherwise lacks. Defaults to `False`.
        **kwargs: Other arguments of `keras.Model`, such as `name` and `trainable`.

    Raises:
        ValueError: when `share_embeddings` is `True` and the two vocabulary sizes differ, when
            `num_heads` does not divide `hidden_dim`, or when `preset`, `activation` or
            `position` is not one of its names.

    Example:

        >>> model = TransformerBackbone.from_preset(
        ...     "tiny", source_vocabulary_size=1000, target_vocabulary_size=1000
        ... )
        >>> logits = model({"source": np.array([[5, 6, 2]]),
        ...                 "target_in": np.array([[1, 9]])})
        >>> logits.shape
        TensorShape([1, 2, 1000])
        >>> len(model.decoder_blocks), model.get_config()["hidden_dim"]
        (2, 128)
    """

    presets = PRESETS

    def __init__(
        self,
        source_vocabulary_size,
        target_vocabulary_size,
        max_sequence_length=128,
        preset=None,
        num_layers=None,
        num_decoder_layers=None,
        hidden_dim=None,
        num_heads=None,
        intermediate_dim=None,
        dropout=0.1,
        norm_first=False,
        share_embeddings=False,
        tie_output=True,
        activation="relu",
        position="sinusoidal",
        output_bias=False,
        **kwargs,
    ):
        settings = architecture(
            "transformer",
            preset,
            PRESETS["small"],  # what neither a preset nor an argument gives
            num_layers=num_layers,
            hidden_dim=hidden_dim,
            num_heads=num_heads,
            intermediate_dim=intermediate_dim,
        )
        num_decoder_layers = num_decoder_layers or settings["num_layers"]
        if share_embeddings and source_vocabulary_size != target_vocabulary_size:
            raise ValueError(
                "`share_embeddings=True` needs one vocabulary, got source size "
                f"{source_vocabulary_size} and target size {target_vocabulary_size}."
            )
        if settings["hidden_dim"] % settings["num_heads"]:
            raise ValueError(
                f"num_heads={settings['num_heads']} does not divide "
                f"hidden_dim={settings['hidden_dim']}."
            )

        def embedding(vocabulary_size, name):
            return TokenAndPositionEmbedding(
                vocabulary_size,
                max_sequence_length,
                settings["hidden_dim"],
                mask_zero=False,
                position=position,
                dropout=dropout,
                name=name,
            )

        def block(kind, name):
            return kind(
                num_heads=settings["num_heads"],
                intermediate_dim=settings["intermediate_dim"],
                dropout=dropout,
                activation=activations.activation(activation),
                norm_first=norm_first,
                name=name,
            )

        # Each layer is made where it is first called: that order draws the initial weights.
        source = keras.Input((None,), dtype="int32", name="source")
        target_in = keras.Input((None,), dtype="int32", name="target_in")
        source_mask, target_mask = ops.not_equal(source, PAD_ID), ops.not_equal(target_in, PAD_ID)
        # Encoder: N × (self-attention, feed-forward).
        source_embedding = embedding(source_vocabulary_size, "source_embedding")
        encoder_blocks, encoder_norm, x = _stack(
            source_embedding(source),
            [f"encoder_block_{i}" for i in range(settings["num_layers"])],
            lambda name: block(TransformerEncoderBlock, name),
            lambda layer, x: layer(x, padding_mask=source_mask),
            "encoder_norm" if norm_first else None,
        )
        # Decoder: N × (masked self-attention, cross-attention, feed-forward).
        target_embedding = (
            source_embedding
            if share_embeddings
            else embedding(target_vocabulary_size, "target_embedding")
        )
        decoder_blocks, decoder_norm, y = _stack(
            target_embedding(target_in),
            [f"decoder_block_{i}" for i in range(num_decoder_layers)],
            lambda name: block(TransformerDecoderBlock, name),
            lambda layer, y: layer(
                y, x, decoder_padding_mask=target_mask, encoder_padding_mask=source_mask
            ),
            "decoder_norm" if norm_first else None,
        )
        output_projection, logits_bias, logits = _logits(
            y, target_embedding, target_vocabulary_size, tie_output, output_bias
        )
        super().__init__(
            {"source": source, "target_in": target_in}, logits, **{"name": "transformer", **kwargs}
        )

        self.source_embedding = source_embedding
        self.encoder_blocks, self.encoder_norm = encoder_blocks, encoder_norm
        self.target_embedding = target_embedding
        self.decoder_blocks, self.decoder_norm = decoder_blocks, decoder_norm
        self.output_projection, self.output_bias = output_projection, logits_bias
        self._arguments = dict(
            source_vocabulary_size=source_vocabulary_size,
            target_vocabulary_size=target_vocabulary_size,
            max_sequence_length=max_sequence_length,
            num_layers=settings["num_layers"],
            num_decoder_layers=num_decoder_layers,
            hidden_dim=settings["hidden_dim"],
            num_heads=settings["num_heads"],
            intermediate_dim=settings["intermediate_dim"],
            dropout=dropout,
            norm_first=norm_first,
            share_embeddings=share_embeddings,
            tie_output=tie_output,
            activation=activation,
            position=position,
            output_bias=output_bias,
        )

    def call_encoder(self, source, rows_per_source=1):
        """Encodes `source` once; the per-source part of a decoding state.

        Args:
            source: int tensor of shape `(B, S)`. Source token ids, [PAD] (0) as padding.
            rows_per_source: int or scalar int32 tensor. The decoded rows per source (the beam
                width). It changes nothing here: the encoder side is kept once per source and
                each decoder block's attention reads it for the `rows_per_source` rows of its
                source. Defaults to 1.

        Returns:
            A dict: `"source_mask"`, a bool tensor of shape `(B, S)`, and `"memory"`, a list with,
                per decoder block, the encoder outputs projected to its cross-attention's keys and
                values, `{"key": (B, h, S, d/h), "value": (B, h, S, d/h)}`.
        """
        source_mask = ops.not_equal(source, PAD_ID)
        x = self.source_embedding(source)
        for encoder_block in self.encoder_blocks:
            x = encoder_block(x, padding_mask=source_mask)
        if self.encoder_norm is not None:
            x = self.encoder_norm(x)
        return {
            "source_mask": source_mask,
            "memory": [block.cross_attention.project_key_value(x) for block in self.decoder_blocks],
        }

    def initial_cache(self, encoded, rows_per_source=1, length=None):
        """The decoder's cache before the first step: per block, empty self-attention keys and
        values.

        With `length`, the cache is preallocated for decoding loops whose shapes do not change
        from step to step (for XLA), and written by
        `call_decoder_with_cache(..., preallocated=True)`. For a beam (`rows_per_source` other
        than the int 1) and a tied output, it also holds `"output_kernel"`, the token table
        transposed to `(d, V)` once here, before the loop, and passed through every step
        unchanged: XLA multiplies 2-8 rows by a transposed operand at half the speed (greedy
        search's one row need not pay the transpose).

        Args:
            encoded: dict. `call_encoder`'s output.
            rows_per_source: int or scalar int32 tensor. The decoded rows per source (the beam
                width). Defaults to 1.
            length: int or `None`. A Python int: the steps the preallocated cache holds;
                `None`: the cache grows by one step a call. Defaults to `None`.

        Returns:
            Without `length`, a list with, per decoder block, its empty keys and values; with
                `length`, a dict whose `"layers"` holds, per decoder block, keys and values of
                `length` steps of zeros (and, as said above, maybe an `"output_kernel"`).
        """
        rows = ops.shape(encoded["source_mask"])[0] * rows_per_source
        layers = [block.empty_cache(rows, length=length) for block in self.decoder_blocks]
        if length is None:
            return layers
        cache = {"layers": layers}
        one_row = isinstance(rows_per_source, int) and rows_per_source == 1
        if self.output_projection is None and not one_row:
            table = self.target_embedding.token_embedding.embeddings
            cache["output_kernel"] = ops.transpose(
                ops.cast(table, self.target_embedding.compute_dtype)
            )
        return cache

    def call_decoder_with_cache(self, token_ids, encoded, cache, index, preallocated=False):
        """Feeds the newest target tokens `token_ids` at position `index`.

        Only the new token's keys and values are computed; the output equals the full causal
        pass.

        Args:
            token_ids: int tensor of shape `(B·W,)`. One token per decoded row (`W` rows per
                source).
            encoded: dict. `call_encoder`'s output for the `B` sources.
            cache: list or dict. `initial_cache`'s, then this method's previous one.
            index: int or scalar int32 tensor. The position of `token_ids` (the steps `cache`
                holds).
            preallocated: bool. Whether `cache` was made with a `length`: the step is then
                written into it at `index`. Defaults to `False`.

        Returns:
            A tuple `(logits, cache, attention)`: float32 logits of shape `(B·W, V)`, the new cache,
                and the cross-attention weights, a list of one `(B·W, h, S)` tensor per decoder
                block.
        """
        y = self.target_embedding(token_ids[:, None], start_index=index)
        new_cache, attention = [], []
        layers = cache["layers"] if preallocated else cache
        for block, memory, block_cache in zip(self.decoder_blocks, encoded["memory"], layers):
            y, block_cache, _, cross = block(
                y,
                encoder_padding_mask=encoded["source_mask"],
                cache=block_cache,
                cache_index=index,
                preallocated=preallocated,
                cross_attention_cache=memory,
                return_attention_scores=True,
            )
            new_cache.append(block_cache)
            attention.append(cross[:, :, 0])
        if self.decoder_norm is not None:
            y = self.decoder_norm(y)
        if preallocated and "output_kernel" in cache:
            logits = ops.matmul(y, ops.cast(cache["output_kernel"], y.dtype))
        elif self.output_projection is None:
            logits = self.target_embedding(y, reverse=True)
        else:
            logits = self.output_projection(y)
        if self.output_bias is not None:
            logits = self.output_bias(logits)
        if preallocated:
            new_cache = dict(cache, layers=new_cache)
        return ops.cast(logits[:, 0], "float32"), new_cache, attention


def _stack(x, names, make, call, norm_name):
    """Blocks made in turn by `make(name)`, each called on the last one's output (`call(block,
    x)`), then a final LayerNorm named `norm_name` (pre-norm; None: none): `(blocks, norm, x)`.

    Each layer is made just before its first call: the order that draws the initial weights.
    """
    blocks = []
    for name in names:
        blocks.append(make(name))
        x = call(blocks[-1], x)
    norm = (
        None
        if norm_name is None
        else keras.layers.LayerNormalization(epsilon=LAYER_NORM_EPSILON, name=norm_name)
    )
    return blocks, norm, x if norm is None else norm(x)


def _logits(y, target_embedding, vocabulary_size, tie_output, output_bias):
    """`(output_projection, output_bias, logits)`: the decoder's states `y` as float32 logits,
    through the target table itself (`tie_output`) or a projection of their own, plus a bias."""
    projection = (
        None if tie_output else keras.layers.Dense(vocabulary_size, name="output_projection")
    )
    logits = target_embedding(y, reverse=True) if projection is None else projection(y)
    bias = OutputBias(vocabulary_size, name="output_bias") if output_bias else None
    if bias is not None:
        logits = bias(logits)
    return (
        projection,
        bias,
        keras.layers.Activation("linear", dtype="float32", name="logits")(logits),
    )
