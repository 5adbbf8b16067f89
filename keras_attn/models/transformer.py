"""The Transformer encoder-decoder for translation (Vaswani et al. 2017)."""

import keras
from keras import ops

from keras_attn.layers import (
    TokenAndPositionEmbedding,
    TransformerDecoderBlock,
    TransformerEncoderBlock,
)

from keras_attn.models.presets import PRESETS as _ALL_PRESETS
from keras_attn.models.presets import architecture

PRESETS = _ALL_PRESETS["transformer"]


def transformer(
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
    name="transformer",
):
    """Builds the Transformer as a functional `keras.Model`.

    Inputs `source` `(B, S)` and `target_in` `(B, T)` are token ids with 0
    as padding (`target_in` starts with [BOS]); the output is the `(B, T,
    target_vocabulary_size)` float32 logits of the next target token. Padding
    masks are computed from the ids and passed to every block explicitly.

    Args:
        source_vocabulary_size: size of the source vocabulary.
        target_vocabulary_size: size of the target vocabulary.
        max_sequence_length: the longest source or target sequence.
        preset: `"tiny"`, `"small"` or `"base"` (see `PRESETS`): values of
            `num_layers`, `hidden_dim`, `num_heads` and `intermediate_dim`
            for those not given explicitly (`keras_attn.models.presets`).
        num_layers: encoder layers (and decoder layers unless
            `num_decoder_layers` is given); 3 without a preset.
        num_decoder_layers: decoder layers.
        hidden_dim: the model width d_model; 256 without a preset.
        num_heads: attention heads; 8 without a preset.
        intermediate_dim: the feed-forward width d_ff; 512 without a preset.
        dropout: residual and embedding dropout (P_drop).
        norm_first: pre-norm blocks (adds a final LayerNorm to each stack).
        share_embeddings: one embedding table for source and target (needs a
            shared vocabulary).
        tie_output: the output projection is the transposed target embedding
            (section 3.4).
        name: the model name.

    Returns:
        A `keras.Model` mapping `{"source", "target_in"}` to logits. Its
        layers are named `source_embedding`, `encoder_block_{i}`,
        `target_embedding`, `decoder_block_{i}`, `encoder_norm` and
        `decoder_norm` (pre-norm only) and `output_projection` (untied only);
        `TransformerStepper` uses these names for incremental decoding.

    Example:

    >>> model = transformer(1000, 1000, preset="tiny")
    >>> logits = model({"source": np.array([[5, 6, 2]]),
    ...                 "target_in": np.array([[1, 9]])})
    >>> logits.shape
    TensorShape([1, 2, 1000])
    """
    settings = architecture(
        "transformer", preset, dict(num_layers=3, hidden_dim=256, num_heads=8, intermediate_dim=512),
        num_layers=num_layers, hidden_dim=hidden_dim, num_heads=num_heads, intermediate_dim=intermediate_dim,
    )
    num_layers, hidden_dim = settings["num_layers"], settings["hidden_dim"]
    num_heads, intermediate_dim = settings["num_heads"], settings["intermediate_dim"]
    num_decoder_layers = num_decoder_layers or num_layers
    if share_embeddings and source_vocabulary_size != target_vocabulary_size:
        raise ValueError(
            "`share_embeddings=True` needs one vocabulary, got source size "
            f"{source_vocabulary_size} and target size {target_vocabulary_size}."
        )
    if hidden_dim % num_heads:
        raise ValueError(
            f"num_heads={num_heads} does not divide hidden_dim={hidden_dim}."
        )

    source = keras.Input((None,), dtype="int32", name="source")
    target_in = keras.Input((None,), dtype="int32", name="target_in")
    source_mask = ops.not_equal(source, 0)
    target_mask = ops.not_equal(target_in, 0)

    def embedding(vocabulary_size, layer_name):
        return TokenAndPositionEmbedding(
            vocabulary_size, max_sequence_length, hidden_dim, mask_zero=False,
            dropout=dropout, name=layer_name,
        )

    def block_args():
        return dict(
            num_heads=num_heads, intermediate_dim=intermediate_dim,
            dropout=dropout, norm_first=norm_first,
        )

    # Encoder: N × (self-attention, feed-forward).
    source_embedding = embedding(source_vocabulary_size, "source_embedding")
    x = source_embedding(source)
    for i in range(num_layers):
        x = TransformerEncoderBlock(**block_args(), name=f"encoder_block_{i}")(
            x, padding_mask=source_mask
        )
    if norm_first:
        x = keras.layers.LayerNormalization(epsilon=1e-5, name="encoder_norm")(x)

    # Decoder: N × (masked self-attention, cross-attention, feed-forward).
    target_embedding = (
        source_embedding
        if share_embeddings
        else embedding(target_vocabulary_size, "target_embedding")
    )
    y = target_embedding(target_in)
    for i in range(num_decoder_layers):
        y = TransformerDecoderBlock(**block_args(), name=f"decoder_block_{i}")(
            y, x, decoder_padding_mask=target_mask, encoder_padding_mask=source_mask
        )
    if norm_first:
        y = keras.layers.LayerNormalization(epsilon=1e-5, name="decoder_norm")(y)

    if tie_output:
        logits = target_embedding(y, reverse=True)
    else:
        logits = keras.layers.Dense(target_vocabulary_size, name="output_projection")(y)
    logits = keras.layers.Activation("linear", dtype="float32", name="logits")(logits)
    return keras.Model({"source": source, "target_in": target_in}, logits, name=name)


class TransformerStepper:
    """Incremental decoding of a `transformer(...)` model, one token a step.

    The encoder runs once; each decoder layer's cross-attention keys and
    values are projected once; each step embeds only the newest token and
    appends its keys and values to the per-layer self-attention caches, so
    no earlier step is ever recomputed. Implements the decoder interface of
    `keras_attn.decoding`: `initial_state(source, beam_width=1)` and
    `step(token_ids, state, index)`.

    The state of `B` sources decoded as `B · W` rows (`W` hypotheses per
    source in beam search, 1 in greedy search) is a dict:

    - `source_mask`: `(B, S)`, `True` for real source tokens;
    - `memory`: per decoder layer, the projected encoder outputs
      `{"key": (B, h, S, d/h), "value": (B, h, S, d/h)}`, once per source;
    - `cache`: per decoder layer, the self-attention cache of the `t` steps
      so far `{"key": (B·W, h, t, d/h), "value": (B·W, h, t, d/h)}`.

    A step returns `source_mask` and `memory` as the very same tensors, so
    beam search never reorders them.

    Args:
        model: a model built by `transformer(...)`; it decodes at most its
            `max_sequence_length` tokens.
    """

    def __init__(self, model):
        self.model = model
        self.decoder_blocks = [
            layer for layer in model.layers if layer.name.startswith("decoder_block_")
        ]
        self.target_embedding = _get(model, "target_embedding") or _get(
            model, "source_embedding"
        )
        self.decoder_norm = _get(model, "decoder_norm")
        self.output_projection = _get(model, "output_projection")
        encoder_output = (
            _get(model, "encoder_norm")
            or [l for l in model.layers if l.name.startswith("encoder_block_")][-1]
        ).output
        self.encoder = keras.Model(model.get_layer("source").output, encoder_output)

    def initial_state(self, source, beam_width=1):
        """Encodes `source` `(B, S)`; the state of `beam_width` rows a source.

        Returns:
            The decoding state (see above), for `B · beam_width` rows.
        """
        encoded = self.encoder(source)
        rows = ops.shape(source)[0] * beam_width
        return {
            "source_mask": ops.not_equal(source, 0),
            "memory": [
                block.cross_attention.project_key_value(encoded)
                for block in self.decoder_blocks
            ],
            "cache": [
                block.empty_cache(rows, encoded.dtype) for block in self.decoder_blocks
            ],
        }

    def step(self, token_ids, state, index, return_attention_scores=False):
        """Feeds `token_ids` `(B·W,)` at position `index`.

        Returns:
            `(logits (B·W, V), new_state)`, plus the cross-attention weights
            `[(B·W, heads, S)] per layer` when `return_attention_scores`.
            `new_state` holds the updated caches and the other entries of
            `state` unchanged (the same objects).
        """
        y = self.target_embedding(token_ids[:, None], start_index=index)
        caches, attention = [], []
        for block, memory, cache in zip(
            self.decoder_blocks, state["memory"], state["cache"]
        ):
            y, cache, _, cross = block(
                y,
                encoder_padding_mask=state["source_mask"],
                cache=cache,
                cache_index=index,
                cross_attention_cache=memory,
                return_attention_scores=True,
            )
            caches.append(cache)
            attention.append(cross[:, :, 0])
        if self.decoder_norm is not None:
            y = self.decoder_norm(y)
        if self.output_projection is None:
            logits = self.target_embedding(y, reverse=True)
        else:
            logits = self.output_projection(y)
        logits = ops.cast(logits[:, 0], "float32")
        new_state = dict(state, cache=caches)
        if return_attention_scores:
            return logits, new_state, attention
        return logits, new_state


def _get(model, name):
    try:
        return model.get_layer(name)
    except ValueError:
        return None
