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
from keras_attn.models.presets import PRESETS as _ALL_PRESETS
from keras_attn.models.presets import architecture

PRESETS = _ALL_PRESETS["seq2seq"]


def seq2seq(
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
    name="seq2seq",
):
    """Builds the RNN encoder-decoder as a functional `keras.Model`.

    Inputs `source` `(B, S)` and `target_in` `(B, T)` are token ids with 0
    as padding (`target_in` starts with [BOS]); the output is the `(B, T,
    target_vocabulary_size)` float32 logits of the next target token, all
    target positions computed in one call (teacher forcing; the decoder
    loops over time inside, see `AttentionDecoder`). The source padding
    mask is applied to the attention.

    Args:
        source_vocabulary_size: size of the source vocabulary.
        target_vocabulary_size: size of the target vocabulary.
        preset: `"tiny"`, `"small"` or `"base"` (see `PRESETS`): values of
            `num_layers` and `hidden_dim` for those not given explicitly
            (`keras_attn.models.presets`).
        cell: `"lstm"` or `"gru"`.
        num_layers: RNN layers of the encoder and of the decoder (1 to 4); 1
            without a preset.
        bidirectional: a bidirectional encoder (the decoder then starts from
            a learned bridge of its final states).
        hidden_dim: units of every RNN layer (per direction); 256 without a
            preset.
        embedding_dim: width of both embeddings; defaults to `hidden_dim`.
        attention: `"bahdanau"`, `"luong"` or `"none"`.
        score: Luong's score: `"dot"`, `"general"`, `"scaled_general"` or
            `"concat"`. `"dot"`
            needs encoder outputs as wide as the decoder's (not
            bidirectional).
        local: Luong's local attention: `None` (global), `"monotonic"`
            (local-m) or `"predictive"` (local-p).
        window: the half-width D of local attention.
        input_feeding: Luong's input feeding.
        attention_units: hidden size of the additive/concat scores.
        dropout: dropout on embeddings, between layers and before the output.
        tie_output: the output projection is the transposed target
            embedding (needs `embedding_dim == hidden_dim`).
        scheduled_sampling: `None`, `"argmax"` or `"sample"`: how the
            model's own prediction is chosen when scheduled sampling feeds
            it (its probability is set by the `ScheduledSampling` callback).
        name: the model name.

    Returns:
        A `keras.Model` mapping `{"source", "target_in"}` to logits. Its
        layers `encoder` (`RNNEncoder`) and `decoder` (`AttentionDecoder`)
        are what `Seq2SeqStepper` decodes with.

    Example:

    >>> model = seq2seq(1000, 1000, hidden_dim=64, attention="luong")
    >>> logits = model({"source": np.array([[5, 6, 3]]),
    ...                 "target_in": np.array([[2, 9]])})
    >>> logits.shape
    TensorShape([1, 2, 1000])
    """
    settings = architecture(
        "seq2seq", preset, dict(num_layers=1, hidden_dim=256), num_layers=num_layers, hidden_dim=hidden_dim,
    )
    num_layers, hidden_dim = settings["num_layers"], settings["hidden_dim"]
    if num_layers not in (1, 2, 3, 4):
        raise ValueError(f"`num_layers` must be 1 to 4, got {num_layers!r}.")

    source = keras.Input((None,), dtype="int32", name="source")
    target_in = keras.Input((None,), dtype="int32", name="target_in")
    source_mask = ops.not_equal(source, 0)

    encoder = RNNEncoder(
        source_vocabulary_size, hidden_dim, embedding_dim=embedding_dim, cell=cell,
        num_layers=num_layers, bidirectional=bidirectional, dropout=dropout,
        name="encoder",
    )
    memory, final_states = encoder(source)
    decoder = AttentionDecoder(
        target_vocabulary_size, hidden_dim, embedding_dim=embedding_dim, cell=cell,
        num_layers=num_layers, attention=attention, score=score, local=local,
        window=window, input_feeding=input_feeding, attention_units=attention_units,
        dropout=dropout, tie_output=tie_output, scheduled_sampling=scheduled_sampling,
        name="decoder",
    )
    logits = decoder(target_in, memory, final_states, memory_mask=source_mask)
    logits = keras.layers.Activation("linear", dtype="float32", name="logits")(logits)
    return keras.Model({"source": source, "target_in": target_in}, logits, name=name)


class Seq2SeqStepper:
    """Incremental decoding of a `seq2seq(...)` model, one token a step.

    The encoder runs once; each step runs `AttentionDecoder.step`, the very
    function the teacher-forced model loops over. Implements the decoder
    interface of `keras_attn.decoding`: `initial_state(source,
    beam_width=1)` and `step(token_ids, state, index,
    return_attention_scores=False)`.

    The state of `B` sources decoded as `B · W` rows (`W` hypotheses per
    source) is a dict:

    - `memory`: `(B, S, d)` encoder outputs, once per source;
    - `memory_keys`: what the attention scores need of them
      (`AttentionDecoder.attention_keys`), computed once (absent without
      attention);
    - `source_mask`: `(B, S)`, `True` for real source tokens;
    - `rnn`: per decoder layer, its states `(B·W, hidden_dim)`;
    - `feed`: `(B·W, hidden_dim)`, h̃ of the previous step (Luong with
      input feeding only).

    A step returns `memory`, `memory_keys` and `source_mask` as the very same tensors, so
    beam search never reorders them. (With local-m attention they hold one
    row per hypothesis, repeated once here: local-m's window sits at each
    query's own step.)

    Args:
        model: a model built by `seq2seq(...)`.
    """

    def __init__(self, model):
        self.model = model
        self.encoder = model.get_layer("encoder")
        self.decoder = model.get_layer("decoder")

    def initial_state(self, source, beam_width=1):
        """Encodes `source` `(B, S)`; the state of `beam_width` rows a source."""
        source = ops.cast(source, "int32")
        memory, final_states = self.encoder(source, training=False)
        source_mask = ops.not_equal(source, 0)
        if self.decoder.local == "monotonic":
            memory = ops.repeat(memory, beam_width, axis=0)
            source_mask = ops.repeat(source_mask, beam_width, axis=0)
        state = self.decoder.initial_state(final_states, rows_per_source=beam_width)
        state = dict(state, memory=memory, source_mask=source_mask)
        keys = self.decoder.attention_keys(memory)
        if keys is not None:
            state["memory_keys"] = keys
        return state

    def step(self, token_ids, state, index, return_attention_scores=False):
        """Feeds `token_ids` `(B·W,)` at position `index`.

        Returns:
            `(logits (B·W, V), new_state)`, plus `[(B·W, 1, S)]`, the one
            attention's weights as one layer of one head, when
            `return_attention_scores` (zeros with `attention="none"`).
        """
        logits, updated, weights = self.decoder.step(
            ops.cast(token_ids, "int32"), state, state["memory"], state["source_mask"],
            index=index, training=False, memory_keys=state.get("memory_keys"),
        )
        new_state = dict(state, **updated)
        logits = ops.cast(logits, "float32")
        if not return_attention_scores:
            return logits, new_state
        if weights is None:
            weights = ops.zeros((ops.shape(logits)[0], ops.shape(state["memory"])[1]))
        return logits, new_state, [ops.expand_dims(ops.cast(weights, "float32"), 1)]
