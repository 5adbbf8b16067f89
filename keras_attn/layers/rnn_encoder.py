"""The RNN encoder of the classic encoder-decoder (Sutskever et al. 2014, Bahdanau et al. 2015)."""

import keras
from keras import ops

from keras_attn.layers.backend import require_tensorflow
from keras_attn.layers.initializers import clone_initializer
from keras_attn.layers.rnn_cells import cell_weights, masked_rnn
from pipelines.special_tokens import PAD_ID

CELLS = ("lstm", "gru")  # the recurrent cells of the encoder and decoder, the default first


@keras.saving.register_keras_serializable(package="keras_attn")
class RNNEncoder(keras.layers.Layer):
    """Token embedding, then a stack of LSTM or GRU layers.

    Returns every top-layer state h_1 … h_S (the annotations the attention
    reads) and the final states of every layer (what the decoder starts
    from). A bidirectional encoder concatenates the forward and backward
    states, h_j = [h→_j; h←_j] (Bahdanau et al. 2015, section 3.2), and
    its final states [h→_S; h←_1]. Padding (id 0) is masked: the final
    states are those of the last real token, in either direction.

    Args:
        vocabulary_size: int. Number of source token ids.
        hidden_dim: int. Units of every RNN layer (per direction).
        embedding_dim: int. Width of the token embedding; `hidden_dim` when not
            given. Defaults to None.
        cell: str. One of `"lstm"`, `"gru"`. Defaults to "lstm".
        num_layers: int. Number of stacked RNN layers; positive. Defaults to 1.
        bidirectional: bool. Whether to run every layer in both directions.
            Defaults to False.
        dropout: float. Dropout rate on the embeddings and between layers.
            Defaults to 0.0.
        kernel_initializer: str or keras.initializers.Initializer. Initializer of
            the input kernels (each weight draws from its own copy).
            Defaults to "glorot_uniform".

    Call arguments:
        token_ids: int tensor of shape `(B, S)`. The ids, 0 as padding.
        training: bool. Whether dropout is active. Defaults to None (inference,
            unless an outer call trains).

    Returns:
        tuple. `(outputs, final_states)`: `outputs` `(B, S, d)` with `d =
        hidden_dim` (`2 · hidden_dim` if bidirectional) and `final_states`
        a list, one per layer, of that layer's final states `[h, c]` (LSTM)
        or `[h]` (GRU), each `(B, d)`.

    Raises:
        ValueError: if `cell` is not one of `CELLS` or `num_layers` is not a
            positive integer.
        RuntimeError: if Keras's backend is not TensorFlow.

    Example:

        >>> encoder = RNNEncoder(100, hidden_dim=16, bidirectional=True)
        >>> outputs, states = encoder(np.array([[5, 7, 3, 0]]))
        >>> outputs.shape, len(states), states[0][0].shape
        (TensorShape([1, 4, 32]), 1, TensorShape([1, 32]))
    """

    def __init__(
        self,
        vocabulary_size,
        hidden_dim,
        embedding_dim=None,
        cell="lstm",
        num_layers=1,
        bidirectional=False,
        dropout=0.0,
        kernel_initializer="glorot_uniform",
        **kwargs,
    ):
        super().__init__(**kwargs)
        require_tensorflow("RNNEncoder", "its recurrence is a TensorFlow loop")
        if cell not in CELLS:
            raise ValueError(f"`cell` must be one of {CELLS}, got {cell!r}.")
        if not isinstance(num_layers, int) or num_layers < 1:
            raise ValueError(f"`num_layers` must be a positive integer, got {num_layers!r}.")
        self.vocabulary_size = vocabulary_size
        self.hidden_dim = hidden_dim
        self.embedding_dim = embedding_dim or hidden_dim
        self.cell = cell
        self.num_layers = num_layers
        self.bidirectional = bidirectional
        self.dropout = dropout
        self.kernel_initializer = keras.initializers.get(kernel_initializer)

    @property
    def output_dim(self):
        """`hidden_dim`, doubled if bidirectional: the width of the outputs and states."""
        return self.hidden_dim * (2 if self.bidirectional else 1)

    def build(self, token_ids_shape):
        self.embedding = keras.layers.Embedding(
            self.vocabulary_size,
            self.embedding_dim,
            name="embedding",
            dtype=self.dtype_policy,
        )
        self.embedding.build(token_ids_shape)
        self.dropout_layer = keras.layers.Dropout(self.dropout, dtype=self.dtype_policy)
        rnn_class = keras.layers.LSTM if self.cell == "lstm" else keras.layers.GRU
        self.rnn_layers = []
        width = self.embedding_dim
        for i in range(self.num_layers):

            def make_rnn(direction, i=i):
                return rnn_class(
                    self.hidden_dim,
                    return_sequences=True,
                    return_state=True,
                    go_backwards=direction == "backward",
                    kernel_initializer=clone_initializer(
                        self.kernel_initializer, f"layer_{i}_{direction}_kernel"
                    ),
                    name=f"{direction}_{i}",
                    dtype=self.dtype_policy,
                )

            if self.bidirectional:
                rnn = keras.layers.Bidirectional(
                    make_rnn("forward"),
                    backward_layer=make_rnn("backward"),
                    name=f"bidirectional_{i}",
                    dtype=self.dtype_policy,
                )
            else:
                rnn = make_rnn("forward")
            rnn.build((token_ids_shape[0], token_ids_shape[1], width))
            self.rnn_layers.append(rnn)
            width = self.output_dim

    def call(self, token_ids, training=None):
        mask = ops.not_equal(token_ids, PAD_ID)
        x = self.dropout_layer(self.embedding(token_ids), training=training)
        final_states = []
        for i, rnn in enumerate(self.rnn_layers):
            if i:
                x = self.dropout_layer(x, training=training)
            directions = [rnn.forward_layer, rnn.backward_layer] if self.bidirectional else [rnn]
            # Keras's layers hold the weights; the loop is `masked_rnn`'s, which
            # projects the inputs once for all steps instead of once per step.
            runs = [
                masked_rnn(
                    self.cell,
                    x,
                    mask,
                    cell_weights(layer.cell, self.compute_dtype),
                    go_backwards=layer.go_backwards,
                )
                for layer in directions
            ]
            if self.bidirectional:  # h_j = [h→_j; h←_j], final states [h→_S; h←_1]
                (forward, forward_state), (backward, backward_state) = runs
                x = ops.concatenate([forward, backward], axis=-1)
                states = [
                    ops.concatenate(pair, axis=-1) for pair in zip(forward_state, backward_state)
                ]
            else:
                ((x, states),) = runs
            final_states.append(states)
        return x, final_states

    def compute_output_spec(self, token_ids, training=None):
        batch, length = token_ids.shape
        dtype = self.compute_dtype
        state = lambda: keras.KerasTensor((batch, self.output_dim), dtype=dtype)  # noqa: E731
        per_layer = 2 if self.cell == "lstm" else 1
        return (
            keras.KerasTensor((batch, length, self.output_dim), dtype=dtype),
            [[state() for _ in range(per_layer)] for _ in range(self.num_layers)],
        )

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "vocabulary_size": self.vocabulary_size,
                "hidden_dim": self.hidden_dim,
                "embedding_dim": self.embedding_dim,
                "cell": self.cell,
                "num_layers": self.num_layers,
                "bidirectional": self.bidirectional,
                "dropout": self.dropout,
                "kernel_initializer": keras.initializers.serialize(self.kernel_initializer),
            }
        )
        return config
