"""The attentional RNN decoder: Bahdanau (2015), Luong (2015), or no attention.

One step function, `AttentionDecoder.step`, is the whole decoder: the
teacher-forced `call` loops it over the target, and an incremental decoder
(`keras_attn.decoding.Stepper` over a `Seq2SeqBackbone`) calls it once per output token, so
training and generation compute the same thing.

At step t, with y_{t-1} the previous target token and s the RNN state:

- Bahdanau: c_t = attention(s_{t-1}, h), s_t = RNN([E y_{t-1}; c_t], s_{t-1}),
  o_t = tanh(W_o [s_t; c_t; E y_{t-1}]) (section 3.1 and appendix A, with
  one tanh layer where the paper has a maxout layer).
- Luong: h_t = RNN([E y_{t-1}; h̃_{t-1}], h_{t-1}) (input feeding, section
  3.3), c_t = attention(h_t, h), h̃_t = o_t = tanh(W_c [c_t; h_t]) (eq. 5).
- none (Sutskever et al. 2014, Cho et al. 2014): s_t = RNN(E y_{t-1},
  s_{t-1}) from the encoder's final state, o_t = s_t.

and the logits of y_t are W_y o_t + b, with W_y the transposed target
embedding when tied.
"""

import keras
import tensorflow as tf
from keras import ops

from keras_attn.layers.attention import AdditiveAttention, DotProductAttention
from keras_attn.layers.backend import require_tensorflow
from keras_attn.layers.initializers import clone_initializer
from keras_attn.layers.rnn_cells import cell_weights, input_projection, recurrence
from keras_attn.layers.rnn_encoder import CELLS
from pipelines.special_tokens import PAD_ID

ATTENTIONS = ("bahdanau", "luong", "none")  # the decoder's attention, or none (the baseline)
SAMPLINGS = ("argmax", "sample")


@keras.saving.register_keras_serializable(package="keras_attn")
class AttentionDecoder(keras.layers.Layer):
    """An RNN decoder that attends to the encoder outputs at every step.

    See the module docstring for the equations of each `attention`. The
    decoder starts from the encoder's final states (one per layer), through
    a learned bridge s_0 = tanh(W_s h_enc) when their size differs from
    `hidden_dim` (a bidirectional encoder).

    Scheduled sampling (Bengio et al. 2015): with `scheduled_sampling` set,
    each training step feeds, in place of the gold token y_{t-1}, the
    model's own previous prediction with probability
    `sampling_probability` (a non-trainable weight, 0 at first, that
    `keras_attn.training.ScheduledSampling` raises during training), drawn
    per token. The prediction is the argmax (`"argmax"`) or a sample
    (`"sample"`) of the previous step's distribution. Inference
    (`training=False`) always feeds the given tokens.

    Args:
        vocabulary_size: int. Number of target token ids.
        hidden_dim: int. Units of every RNN layer.
        embedding_dim: int. Width of the target embedding; `hidden_dim` when not
            given. Defaults to None.
        cell: str. One of `"lstm"`, `"gru"`. Defaults to "lstm".
        num_layers: int. Number of stacked RNN layers; positive. Defaults to 1.
        attention: str. One of `"bahdanau"`, `"luong"`, `"none"`.
            Defaults to "bahdanau".
        score: str. Luong's score, `"dot"`, `"general"` or `"concat"` (and
            `"scaled_dot"`, `"scaled_general"`, `"cosine"`); see
            `DotProductAttention`. Defaults to "general".
        local: str. Luong's local attention, `"monotonic"` (local-m) or
            `"predictive"` (local-p); None for global attention. Defaults to None.
        window: int. The half-width D of local attention. Defaults to 10.
        input_feeding: bool. Luong's input feeding of h̃_{t-1}. Defaults to True.
        attention_units: int. Hidden size of the additive (and concat) score;
            `hidden_dim` when not given. Defaults to None.
        dropout: float. Dropout rate on the embeddings, between RNN layers and on
            o_t. Defaults to 0.0.
        tie_output: bool. Whether the output projection is the transposed
            embedding (needs `embedding_dim == hidden_dim`). Defaults to True.
        scheduled_sampling: str. `"argmax"` or `"sample"` (see above); None for
            none. Defaults to None.
        kernel_initializer: str or keras.initializers.Initializer. Initializer of
            the kernels (each weight draws from its own copy).
            Defaults to "glorot_uniform".

    Call arguments:
        target_in: int tensor of shape `(B, T)`. The ids, [BOS] first, 0 as
            padding.
        memory: tensor of shape `(B, S, d)`. The encoder outputs (unused with
            `"none"`): what the Transformer's decoder block calls
            `encoder_outputs` and the attention layers `value` (Keras's names
            there); here the NMT papers' "memory", which every step reads again
            and whose keys (`memory_keys`) are projected once per source.
            Defaults to None.
        encoder_states: list. The encoder's final states, a list per layer of
            `[h, c]` (LSTM) or `[h]` (GRU), each `(B, d)`.
        memory_mask: bool tensor of shape `(B, S)`. `True` for real source tokens;
            None treats every source token as real. Defaults to None.
        training: bool. Whether dropout and scheduled sampling are active.
            Defaults to None (inference, unless an outer call trains).
        return_attention_scores: bool. Whether to also return the attention
            weights. Defaults to False.

    Returns:
        The logits, a tensor of shape `(B, T, vocabulary_size)`; with
        `return_attention_scores`, the tuple of them and the weights `(B, T, S)`
        (zeros with `attention="none"`).

    Raises:
        ValueError: if `cell`, `attention`, `local` or `scheduled_sampling` is not
            one of the names above, `num_layers` is not a positive integer, or
            `tie_output=True` with `embedding_dim` other than `hidden_dim`; when
            first called with `attention="luong"`, if `DotProductAttention`
            refuses `score` (or, with `local`, `window`).
        RuntimeError: if Keras's backend is not TensorFlow.

    Example:

        >>> decoder = AttentionDecoder(100, hidden_dim=16, attention="luong")
        >>> memory = np.random.rand(2, 5, 16).astype("float32")
        >>> states = [[np.zeros((2, 16), "float32")] * 2]
        >>> decoder(np.array([[2, 7, 8], [2, 9, 0]]), memory, states).shape
        TensorShape([2, 3, 100])
    """

    def __init__(
        self,
        vocabulary_size,
        hidden_dim,
        embedding_dim=None,
        cell="lstm",
        num_layers=1,
        attention="bahdanau",
        score="general",
        local=None,
        window=10,
        input_feeding=True,
        attention_units=None,
        dropout=0.0,
        tie_output=True,
        scheduled_sampling=None,
        kernel_initializer="glorot_uniform",
        **kwargs,
    ):
        super().__init__(**kwargs)
        require_tensorflow(type(self).__name__, "its time loop is a TensorFlow loop")
        if cell not in CELLS:
            raise ValueError(f"`cell` must be one of {CELLS}, got {cell!r}.")
        if attention not in ATTENTIONS:
            raise ValueError(f"`attention` must be one of {ATTENTIONS}, got {attention!r}.")
        if local not in (None, "monotonic", "predictive"):
            raise ValueError(f"`local` must be None, 'monotonic' or 'predictive', got {local!r}.")
        if scheduled_sampling not in (None, *SAMPLINGS):
            raise ValueError(
                f"`scheduled_sampling` must be None or one of {SAMPLINGS}, got "
                f"{scheduled_sampling!r}."
            )
        if not isinstance(num_layers, int) or num_layers < 1:
            raise ValueError(f"`num_layers` must be a positive integer, got {num_layers!r}.")
        embedding_dim = embedding_dim or hidden_dim
        if tie_output and embedding_dim != hidden_dim:
            raise ValueError(
                f"`tie_output=True` needs embedding_dim == hidden_dim, got "
                f"{embedding_dim} and {hidden_dim}; pass tie_output=False."
            )
        self.vocabulary_size = vocabulary_size
        self.hidden_dim = hidden_dim
        self.embedding_dim = embedding_dim
        self.cell = cell
        self.num_layers = num_layers
        self.attention = attention
        self.score = score
        self.local = local
        self.window = window
        self.input_feeding = input_feeding
        self.attention_units = attention_units
        self.dropout = dropout
        self.tie_output = tie_output
        self.scheduled_sampling = scheduled_sampling
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.seed_generator = keras.random.SeedGenerator()

    @property
    def feeds_output(self):
        """Whether o_{t-1} is part of the next step's input (input feeding)."""
        return self.attention == "luong" and self.input_feeding

    # ------------------------------------------------------------------
    # Weights.

    def build(
        self, target_in_shape, memory_shape=None, encoder_states_shape=None, memory_mask_shape=None
    ):
        memory_dim = None if memory_shape is None else memory_shape[-1]
        state_dim = memory_dim if encoder_states_shape is None else encoder_states_shape[0][0][-1]

        def initializer(name):
            return clone_initializer(self.kernel_initializer, name)

        def dense(units, name, **kwargs):
            return keras.layers.Dense(
                units,
                name=name,
                kernel_initializer=initializer(name),
                dtype=self.dtype_policy,
                **kwargs,
            )

        self.embedding = keras.layers.Embedding(
            self.vocabulary_size,
            self.embedding_dim,
            name="embedding",
            dtype=self.dtype_policy,
        )
        self.embedding.build(target_in_shape)
        self.dropout_layer = keras.layers.Dropout(self.dropout, dtype=self.dtype_policy)

        # s_0 = tanh(W_s h_enc) where the encoder's states have another size.
        self.bridges = []
        if state_dim is not None and state_dim != self.hidden_dim:
            per_layer = 2 if self.cell == "lstm" else 1
            for i in range(self.num_layers):
                for j in range(per_layer):
                    bridge = dense(self.hidden_dim, f"bridge_{i}_{j}", activation="tanh")
                    bridge.build((None, state_dim))
                    self.bridges.append(bridge)

        cell_class = keras.layers.LSTMCell if self.cell == "lstm" else keras.layers.GRUCell
        input_dim = self.embedding_dim
        if self.attention == "bahdanau":
            input_dim += memory_dim  # [E y; c]
        if self.feeds_output:
            input_dim += self.hidden_dim  # [E y; h̃]
        self.cells = []
        for i in range(self.num_layers):
            cell = cell_class(
                self.hidden_dim,
                kernel_initializer=initializer(f"cell_{i}_kernel"),
                recurrent_initializer=clone_initializer("orthogonal", f"cell_{i}_recurrent"),
                name=f"cell_{i}",
                dtype=self.dtype_policy,
            )
            cell.build((None, input_dim))
            self.cells.append(cell)
            input_dim = self.hidden_dim

        units = self.attention_units or self.hidden_dim
        if self.attention == "bahdanau":
            self.attention_layer = AdditiveAttention(
                units, name="attention", dtype=self.dtype_policy
            )
            self.attention_layer.build((None, self.hidden_dim), memory_shape)
            # o_t = tanh(W_o [s_t; c_t; E y_{t-1}])
            self.output_layer = dense(self.hidden_dim, "output_layer", activation="tanh")
            self.output_layer.build((None, self.hidden_dim + memory_dim + self.embedding_dim))
        elif self.attention == "luong":
            self.attention_layer = DotProductAttention(
                score=self.score,
                units=self.attention_units,
                window=self.window if self.local else None,
                alignment=self.local or "monotonic",
                name="attention",
                dtype=self.dtype_policy,
            )
            self.attention_layer.build((None, self.hidden_dim), memory_shape)
            # h̃_t = tanh(W_c [c_t; h_t])  (eq. 5: no bias)
            self.output_layer = dense(
                self.hidden_dim, "attentional_layer", activation="tanh", use_bias=False
            )
            self.output_layer.build((None, memory_dim + self.hidden_dim))
        # What a teacher-forced loop's `_step` hands out: [s_t; c_t] with Bahdanau (E y_{t-1} is
        # joined after the loop), o_t otherwise.
        self._loop_features_size = self.hidden_dim + (
            memory_dim if self.attention == "bahdanau" else 0
        )

        if self.tie_output:
            self.output_bias = self.add_weight(
                name="output_bias", shape=(self.vocabulary_size,), initializer="zeros"
            )
        else:
            self.output_projection = dense(self.vocabulary_size, "output_projection")
            self.output_projection.build((None, self.hidden_dim))

        if self.scheduled_sampling:
            self.sampling_probability = self.add_weight(
                name="sampling_probability",
                shape=(),
                initializer="zeros",
                trainable=False,
                dtype="float32",
                autocast=False,  # compared with float32 draws
            )

    # ------------------------------------------------------------------
    # The decoder, one step at a time.

    def initial_state(self, encoder_states, rows_per_source=1):
        """The decoder state before [BOS]: RNN states, and h̃_0 = 0 with input feeding.

        Args:
            encoder_states: list. The encoder's final states (see `call`), each
                `(B, d)`.
            rows_per_source: int or scalar int tensor. `W`, decoder rows per source
                (beam search's hypotheses): each source's state is repeated `W`
                times. Defaults to 1.

        Returns:
            dict. `"rnn"`, a list per layer of `(B·W, hidden_dim)` states, and
            `"feed"` `(B·W, hidden_dim)` with input feeding.
        """
        states = [list(layer) for layer in encoder_states]
        if self.bridges:
            bridges = iter(self.bridges)
            states = [[next(bridges)(s) for s in layer] for layer in states]
        states = [[ops.cast(s, self.compute_dtype) for s in layer] for layer in states]
        if not isinstance(rows_per_source, int) or rows_per_source != 1:
            states = [[ops.repeat(s, rows_per_source, axis=0) for s in layer] for layer in states]
        state = {"rnn": states}
        if self.feeds_output:
            state["feed"] = ops.zeros_like(states[-1][0])
        return state

    def attention_keys(self, memory):
        """The part of the attention scores that depends on the memory alone.

        Computed once per source (W_k h for Bahdanau's additive score) and
        passed to every `step` as `memory_keys`.

        Args:
            memory: tensor of shape `(B, S, d)`, or None. The encoder outputs.

        Returns:
            A tensor (`project_key` of the attention layer), or None without
            attention or memory.
        """
        if self.attention == "none" or memory is None:
            return None
        return self.attention_layer.project_key(memory)

    def step(
        self,
        token_ids,
        state,
        memory=None,
        memory_mask=None,
        index=0,
        training=None,
        memory_keys=None,
        rnn_weights=None,
    ):
        """Feeds one token per row; the shared step of training and decoding.

        Args:
            token_ids: int tensor of shape `(R,)`. The previous tokens y_{t-1}.
            state: dict. From `initial_state` or the previous step (other entries
                are ignored and not returned).
            memory: tensor of shape `(B, S, d)`. Encoder outputs of the `B`
                sources, where the `R = B·W` rows are `W` consecutive rows per
                source. Defaults to None.
            memory_mask: bool tensor of shape `(B, S)`. `True` for real source
                tokens. Defaults to None.
            index: int or scalar int tensor. The step t (local-m's aligned
                position p_t = t). Defaults to 0.
            training: bool. Whether dropout is active. Defaults to None.
            memory_keys: tensor. `attention_keys(memory)`, computed once per
                source; computed here when None. Defaults to None.
            rnn_weights: list of dict. `rnn_weights()`, read once for many steps;
                read here when None. Defaults to None.

        Returns:
            tuple. `(logits (R, V), new_state, weights (R, S) or None)`.
        """
        embedded = self.dropout_layer(self.embedding(token_ids), training=training)
        features, new_state, weights = self._step(
            embedded, state, memory, memory_mask, index, training, memory_keys, rnn_weights
        )
        return self._logits(features, training), new_state, weights

    def rnn_weights(self):
        """Every RNN layer's weights in the compute dtype, for `step` to reuse.

        Read once for a whole sequence: under mixed precision each read of
        a float32 variable is a cast, and a time loop would cast every
        kernel again at every step (forward and backward). The first
        cell's kernel comes in two: `"embedding_kernel"`, its rows for
        E y_{t-1}, and `"kernel"`, the rows for the rest of its input
        (the context, h̃_{t-1}), so that teacher forcing projects the
        embedded tokens of all steps before its loop (`_embedded_projection`).

        Returns:
            list of dict. One per layer, as `cell_weights` gives them, the first
            with `"embedding_kernel"` besides.
        """
        weights = [cell_weights(cell, self.compute_dtype) for cell in self.cells]
        first = weights[0]["kernel"]
        weights[0].update(
            embedding_kernel=first[: self.embedding_dim], kernel=first[self.embedding_dim :]
        )
        return weights

    def _step(
        self,
        embedded,
        state,
        memory,
        memory_mask,
        index,
        training,
        memory_keys,
        rnn_weights=None,
        embedded_projection=None,
    ):
        """`step` from the embedded tokens E y_{t-1} `(R, e)` to what o_t is made of.

        `embedded_projection`: `_embedded_projection(embedded)`, computed
        before a teacher-forced loop for all steps (then `embedded` is `None`).

        Returns `(features, new_state, weights)`: o_t itself, or with
        Bahdanau [s_t; c_t; E y_{t-1}] ([s_t; c_t] without `embedded`), which
        `_readout` turns into o_t (nothing feeds o_t back, so teacher forcing
        reads out all steps at once after the loop).
        """
        if memory_keys is None:
            memory_keys = self.attention_keys(memory)
        if rnn_weights is None:
            rnn_weights = self.rnn_weights()
        previous = state["rnn"]
        new_state = {}
        rest = []  # the first cell's input after E y_{t-1}
        if self.attention == "bahdanau":  # scored from s_{t-1}
            context, weights = self._attend(
                previous[-1][0], memory, memory_keys, memory_mask, index, training
            )
            rest.append(context)
        if self.feeds_output:
            rest.append(state["feed"])
        states = []
        x = None  # the output of the layer below
        for layer_weights, cell_state in zip(rnn_weights, previous):
            if x is None:  # [E y_{t-1}; rest] W + b, as E y_{t-1} W_e + b + rest W_rest
                if embedded_projection is None:
                    embedded_projection = self._embedded_projection(embedded, layer_weights)
                projected = embedded_projection
                if rest:
                    projected += ops.matmul(ops.concatenate(rest, axis=-1), layer_weights["kernel"])
            else:
                projected = input_projection(
                    self.dropout_layer(x, training=training), layer_weights
                )
            x, cell_state = recurrence(self.cell, projected, cell_state, layer_weights)
            states.append(cell_state)
        new_state["rnn"] = states
        if self.attention == "bahdanau":
            output = ops.concatenate(
                [x, context, *([] if embedded is None else [embedded])], axis=-1
            )
        elif self.attention == "luong":  # scored from h_t
            context, weights = self._attend(x, memory, memory_keys, memory_mask, index, training)
            output = self.output_layer(ops.concatenate([context, x], axis=-1))
            if self.feeds_output:
                new_state["feed"] = output
        else:
            output, weights = x, None
        return output, new_state, weights

    def _attend(self, query, memory, memory_keys, memory_mask, index, training):
        """Attention of `R = B·W` query rows `(R, d)` to the memory of `B` sources.

        The `W` rows of a source attend as `W` queries of one row `(B, W, d)`,
        without copying the memory. (Local-m positions its window by the
        query's index in that row, so its memory must have a row per query:
        `Seq2SeqBackbone.call_encoder` repeats it once before decoding.)
        """
        rows, sources = ops.shape(query)[0], ops.shape(memory)[0]
        queries = ops.reshape(query, (sources, -1, self.hidden_dim))  # (B, W, d)
        context, weights = self.attention_layer(
            queries,
            memory,
            value_mask=memory_mask,
            query_position=index,
            projected_key=memory_keys,
            return_attention_scores=True,
            training=training,
        )
        return (
            ops.reshape(context, (rows, ops.shape(memory)[2])),
            ops.reshape(weights, (rows, ops.shape(memory)[1])),
        )

    def _readout(self, features):
        """o_t: Bahdanau's tanh(W_o [s_t; c_t; E y_{t-1}]); the features themselves otherwise."""
        return self.output_layer(features) if self.attention == "bahdanau" else features

    def _logits(self, features, training):
        return self._project(self.dropout_layer(self._readout(features), training=training))

    def _project(self, output):
        if self.tie_output:
            table = ops.cast(self.embedding.embeddings, output.dtype)
            return ops.matmul(output, ops.transpose(table)) + ops.cast(
                self.output_bias, output.dtype
            )
        return self.output_projection(output)

    # ------------------------------------------------------------------
    # The whole target at once (teacher forcing).

    def call(
        self,
        target_in,
        memory=None,
        encoder_states=None,
        memory_mask=None,
        training=None,
        return_attention_scores=False,
    ):
        target_in = ops.cast(target_in, "int32")
        batch, length = ops.shape(target_in)[0], ops.shape(target_in)[1]
        gold = ops.transpose(target_in)  # (T, B)
        sampling = self.scheduled_sampling and training
        if sampling:
            # Per token: feed the model's own prediction? And the draw that samples it.
            p = self.sampling_probability
            own = keras.random.uniform((length, batch), seed=self.seed_generator) < p
            own = ops.logical_and(own, ops.not_equal(gold, PAD_ID))
            draws = keras.random.uniform((length, batch), seed=self.seed_generator)
        source_length = 1 if memory is None else ops.shape(memory)[1]
        memory_keys = self.attention_keys(memory)
        rnn_weights = self.rnn_weights()

        # The gold tokens embedded once, not one lookup (and one embedding gradient) per
        # step, and read through a TensorArray (the gradient of slicing a (T, B, e) tensor
        # at every step would be a (T, B, e) tensor per step).
        embedded_all = self.dropout_layer(self.embedding(target_in), training=training)  # (B, T, e)
        if not sampling:
            # What does not recur leaves the loop: E y_{t-1} W_e + b of the first cell for all
            # steps in one matmul (and its kernel's gradient in one), and Bahdanau's readout
            # takes E y_{t-1} after the loop, so the loop never reads the gold tokens.
            projections = tf.TensorArray(self.compute_dtype, size=length).unstack(
                ops.transpose(self._embedded_projection(embedded_all, rnn_weights[0]), (1, 0, 2))
            )
        else:
            embedded_gold = tf.TensorArray(self.compute_dtype, size=length).unstack(
                ops.transpose(embedded_all, (1, 0, 2))
            )

        def body(t, state, predicted, outputs_array, weights_array):
            if sampling:
                own_embedded = self.dropout_layer(self.embedding(predicted), training=training)
                embedded = ops.where(own[t][:, None], own_embedded, embedded_gold.read(t))
                output, state, weights = self._step(
                    embedded, state, memory, memory_mask, t, training, memory_keys, rnn_weights
                )
            else:
                output, state, weights = self._step(
                    None,
                    state,
                    memory,
                    memory_mask,
                    t,
                    training,
                    memory_keys,
                    rnn_weights,
                    embedded_projection=projections.read(t),
                )
            if sampling:  # the next step may feed this step's prediction
                output = self._logits(output, training)
                predicted = self._predict(output, draws[t])
            if weights is None:
                weights = ops.zeros((batch, source_length), output.dtype)
            return (
                t + 1,
                state,
                predicted,
                outputs_array.write(t, output),
                weights_array.write(t, weights),
            )

        state = self.initial_state(encoder_states)
        output_size = self.vocabulary_size if sampling else self._loop_features_size
        arrays = [
            tf.TensorArray(self.compute_dtype, size=length, element_shape=shape)
            for shape in ((None, output_size), (None, None))
        ]
        _, _, _, outputs, weights = tf.while_loop(
            lambda t, *_: t < length,
            body,
            (tf.constant(0), state, gold[0], *arrays),
            maximum_iterations=length,  # XLA needs it to size the gradient's accumulators
        )
        outputs = ops.transpose(outputs.stack(), (1, 0, 2))  # (B, T, features) or (B, T, V)
        if sampling:
            logits = outputs
        else:  # all steps read out and projected at once: large matmuls, not T small ones
            if self.attention == "bahdanau":
                outputs = ops.concatenate([outputs, embedded_all], axis=-1)  # [s_t; c_t; E y_{t-1}]
            logits = self._logits(outputs, training)
        if return_attention_scores:
            return logits, ops.transpose(weights.stack(), (1, 0, 2))  # (B, T, S)
        return logits

    def _embedded_projection(self, embedded, weights):
        """E y W_e + b: the first cell's input projection of the
        embedded tokens `(..., e)` alone.
        """
        return ops.matmul(embedded, weights["embedding_kernel"]) + weights["bias"]

    def _predict(self, logits, draw):
        """The model's own token: argmax, or sampled by inverting the CDF at `draw`."""
        if self.scheduled_sampling == "argmax":
            return ops.cast(ops.argmax(logits, axis=-1), "int32")
        cdf = ops.cumsum(ops.softmax(ops.cast(logits, "float32"), axis=-1), axis=-1)
        below = ops.sum(ops.cast(cdf < draw[:, None], "int32"), axis=-1)
        return ops.minimum(below, self.vocabulary_size - 1)

    def compute_output_shape(
        self, target_in_shape, memory_shape=None, encoder_states_shape=None, memory_mask_shape=None
    ):
        return (*target_in_shape, self.vocabulary_size)

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "vocabulary_size": self.vocabulary_size,
                "hidden_dim": self.hidden_dim,
                "embedding_dim": self.embedding_dim,
                "cell": self.cell,
                "num_layers": self.num_layers,
                "attention": self.attention,
                "score": self.score,
                "local": self.local,
                "window": self.window,
                "input_feeding": self.input_feeding,
                "attention_units": self.attention_units,
                "dropout": self.dropout,
                "tie_output": self.tie_output,
                "scheduled_sampling": self.scheduled_sampling,
                "kernel_initializer": keras.initializers.serialize(self.kernel_initializer),
            }
        )
        return config
