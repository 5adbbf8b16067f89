"""The RNN encoder-decoder, with Bahdanau or Luong attention or none.

Sutskever et al. (2014) and Cho et al. (2014) encode the source into the
encoder's final state and decode from it alone (`attention="none"`).
Bahdanau et al. (2015) let every decoder step attend to all the encoder
states (`"bahdanau"`); Luong et al. (2015) attend from the current decoder
state with multiplicative scores, globally or in a local window
(`"luong"`).
"""

import keras
from keras import ops

from keras_attn.layers import AttentionDecoder, RNNEncoder
from keras_attn.models.backbone import Backbone
from keras_attn.presets import PRESETS as _ALL_PRESETS
from keras_attn.presets import architecture
from pipelines.special_tokens import PAD_ID

PRESETS = _ALL_PRESETS["seq2seq"]


class RecurrentDecoding:
    """The decoding calls of a backbone whose `decoder` is an `AttentionDecoder`.

    `call_encoder` (the backbone's own) returns `{"memory", "source_mask",
    "final_states"}` and, with attention, `"memory_keys"`; these two
    methods do the rest of `keras_attn.decoding.Stepper`'s work.
    """

    def initial_cache(self, encoded, rows_per_source=1):
        """The decoder's state before [BOS] (`AttentionDecoder.initial_state`).

        Args:
            encoded: dict. `call_encoder`'s output.
            rows_per_source: int or scalar int32 tensor. The decoded rows per source (the beam
                width). Defaults to 1.

        Returns:
            The decoder's state, `rows_per_source` rows a source: a dict, `"rnn"`, a list per layer
                of its RNN states, and with input feeding `"feed"`, h̃_0 = 0.
        """
        return self.decoder.initial_state(encoded["final_states"], rows_per_source=rows_per_source)

    def call_decoder_with_cache(self, token_ids, encoded, cache, index):
        """Feeds the previous tokens `token_ids` at step `index`.

        Args:
            token_ids: int tensor of shape `(R,)`. The previous token of each decoded row.
            encoded: dict. `call_encoder`'s output.
            cache: dict. `initial_cache`'s, then this method's previous one: the decoder's
                state.
            index: int or scalar int32 tensor. The step.

        Returns:
            A tuple `(logits, cache, attention)`: float32 logits of shape `(R, V)`, the new cache,
                and `[weights]`, the one attention's `(R, 1, S)` weights as one layer of one head
                (zeros with `attention="none"`).
        """
        logits, cache, weights = self.decoder.step(
            ops.cast(token_ids, "int32"),
            cache,
            encoded["memory"],
            encoded["source_mask"],
            index=index,
            training=False,
            memory_keys=encoded.get("memory_keys"),
        )
        logits = ops.cast(logits, "float32")
        if weights is None:
            weights = ops.zeros((ops.shape(logits)[0], ops.shape(encoded["memory"])[1]))
        return logits, cache, [ops.expand_dims(ops.cast(weights, "float32"), 1)]


@keras.saving.register_keras_serializable(package="keras_attn")
class Seq2SeqBackbone(RecurrentDecoding, Backbone):
    """The RNN encoder-decoder as a functional `keras.Model`: source
    and shifted target in, logits out.

    Inputs `source` `(B, S)` and `target_in` `(B, T)` are token ids with 0
    as padding (`target_in` starts with [BOS]); the output is the `(B, T,
    target_vocabulary_size)` float32 logits of the next target token, all
    target positions computed in one call (teacher forcing; the decoder
    loops over time inside, see `AttentionDecoder`). The source padding
    mask is applied to the attention.

    Its parts are the attributes `encoder` (`RNNEncoder`) and `decoder`
    (`AttentionDecoder`). Decoding one token at a time uses `call_encoder`
    once per source, then `call_decoder_with_cache` (see
    `keras_attn.decoding.Stepper`), which runs `AttentionDecoder.step`, the
    very function the teacher-forced model loops over.

    Args:
        source_vocabulary_size: int. Size of the source vocabulary.
        target_vocabulary_size: int. Size of the target vocabulary.
        preset: str or `None`. One of `"tiny"`, `"small"`, `"base"` (see `PRESETS`): values of
            `num_layers` and `hidden_dim` for those not given explicitly (`keras_attn.presets`).
            Defaults to `None`.
        cell: str. One of `"lstm"`, `"gru"`. Defaults to `"lstm"`.
        num_layers: int. RNN layers of the encoder and of the decoder, 1 to 4. Defaults to the
            preset's, or 1 without a preset.
        bidirectional: bool. A bidirectional encoder (the decoder then starts from a learned
            bridge of its final states). Defaults to `False`.
        hidden_dim: int. Units of every RNN layer (per direction). Defaults to the preset's, or
            256 without a preset.
        embedding_dim: int. Width of both embeddings. Defaults to `hidden_dim`.
        attention: str. One of `"bahdanau"`, `"luong"`, `"none"`. Defaults to `"bahdanau"`.
        score: str. Luong's score, one of `"dot"`, `"scaled_dot"`, `"general"`,
            `"scaled_general"`, `"concat"`, `"cosine"` (see `DotProductAttention`). `"dot"`,
            `"scaled_dot"` and `"cosine"` need encoder outputs as wide as the decoder's (not
            bidirectional). Defaults to `"general"`.
        local: str or `None`. Luong's local attention: `None` (global), `"monotonic"`
            (local-m) or `"predictive"` (local-p). Defaults to `None`.
        window: int. The half-width D of local attention. Defaults to 10.
        input_feeding: bool. Luong's input feeding. Defaults to `True`.
        attention_units: int. Hidden size of the additive/concat scores. Defaults to
            `hidden_dim`.
        dropout: float. Dropout on embeddings, between layers and before the output. Defaults
            to 0.1.
        tie_output: bool. The output projection is the transposed target embedding (needs
            `embedding_dim == hidden_dim`). Defaults to `True`.
        scheduled_sampling: str or `None`. One of `None`, `"argmax"`, `"sample"`: how the
            model's own prediction is chosen when scheduled sampling feeds it (its probability
            is set by the `ScheduledSampling` callback). Defaults to `None`.
        **kwargs: Other arguments of `keras.Model`, such as `name` and `trainable`.

    Raises:
        ValueError: when `num_layers` is not 1 to 4; when `preset`, `cell`, `attention`,
            `local`, `scheduled_sampling` or, with Luong's attention, `score` is not one of its
            names; when a `score` of `"dot"`, `"scaled_dot"` or `"cosine"` meets encoder outputs
            of another width; when `window` is negative with local attention; or when
            `tie_output` is `True` and `embedding_dim` differs from `hidden_dim`.

    Example:

        >>> model = Seq2SeqBackbone(1000, 1000, hidden_dim=64, attention="luong")
        >>> logits = model({"source": np.array([[5, 6, 3]]),
        ...                 "target_in": np.array([[2, 9]])})
        >>> logits.shape
        TensorShape([1, 2, 1000])
        >>> model.get_config()["attention"], model.decoder.hidden_dim
        ('luong', 64)
    """

    presets = PRESETS

    def __init__(
        self,
        source_vocabulary_size,
        target_vocabulary_size,
        preset=None,
        cell="lstm",
        num_layers=None,
        bidirectional=False,
        hidden_dim=None,
        embedding_dim=None,
        attention="bahdanau",
        score="general",
        local=None,
        window=10,
        input_feeding=True,
        attention_units=None,
        dropout=0.1,
        tie_output=True,
        scheduled_sampling=None,
        **kwargs,
    ):
        settings = architecture(
            "seq2seq",
            preset,
            dict(num_layers=1, hidden_dim=256),
            num_layers=num_layers,
            hidden_dim=hidden_dim,
        )
        num_layers, hidden_dim = settings["num_layers"], settings["hidden_dim"]
        if num_layers not in (1, 2, 3, 4):
            raise ValueError(f"`num_layers` must be 1 to 4, got {num_layers!r}.")
        arguments = dict(
            source_vocabulary_size=source_vocabulary_size,
            target_vocabulary_size=target_vocabulary_size,
            cell=cell,
            num_layers=num_layers,
            bidirectional=bidirectional,
            hidden_dim=hidden_dim,
            embedding_dim=embedding_dim,
            attention=attention,
            score=score,
            local=local,
            window=window,
            input_feeding=input_feeding,
            attention_units=attention_units,
            dropout=dropout,
            tie_output=tie_output,
            scheduled_sampling=scheduled_sampling,
        )

        source = keras.Input((None,), dtype="int32", name="source")
        target_in = keras.Input((None,), dtype="int32", name="target_in")
        encoder = RNNEncoder(
            source_vocabulary_size,
            hidden_dim,
            embedding_dim=embedding_dim,
            cell=cell,
            num_layers=num_layers,
            bidirectional=bidirectional,
            dropout=dropout,
            name="encoder",
        )
        memory, final_states = encoder(source)
        decoder = AttentionDecoder(
            target_vocabulary_size,
            hidden_dim,
            embedding_dim=embedding_dim,
            cell=cell,
            num_layers=num_layers,
            attention=attention,
            score=score,
            local=local,
            window=window,
            input_feeding=input_feeding,
            attention_units=attention_units,
            dropout=dropout,
            tie_output=tie_output,
            scheduled_sampling=scheduled_sampling,
            name="decoder",
        )
        logits = decoder(target_in, memory, final_states, memory_mask=ops.not_equal(source, PAD_ID))
        logits = keras.layers.Activation("linear", dtype="float32", name="logits")(logits)
        super().__init__(
            {"source": source, "target_in": target_in}, logits, **{"name": "seq2seq", **kwargs}
        )
        self.encoder, self.decoder = encoder, decoder
        self._arguments = arguments

    def call_encoder(self, source, rows_per_source=1):
        """Encodes `source` once; the per-source part of a decoding state.

        Args:
            source: int tensor of shape `(B, S)`. Source token ids, 0 as padding.
            rows_per_source: int or scalar int32 tensor. The decoded rows per source (the beam
                width); only local-m attention reads it. Defaults to 1.

        Returns:
            A dict: `"memory"`, the `(B, S, d)` encoder outputs; `"source_mask"`, `(B, S)`;
                `"final_states"`, the encoder's final states; and `"memory_keys"`, what the
                attention scores need of the memory (absent without attention). With local-m
                attention, whose window sits at each row's own step, `memory` and `source_mask` are
                repeated to `rows_per_source` rows a source.
        """
        source = ops.cast(source, "int32")
        memory, final_states = self.encoder(source, training=False)
        source_mask = ops.not_equal(source, PAD_ID)
        if self.decoder.local == "monotonic":
            memory = ops.repeat(memory, rows_per_source, axis=0)
            source_mask = ops.repeat(source_mask, rows_per_source, axis=0)
        encoded = {"memory": memory, "source_mask": source_mask, "final_states": final_states}
        keys = self.decoder.attention_keys(memory)
        if keys is not None:
            encoded["memory_keys"] = keys
        return encoded
