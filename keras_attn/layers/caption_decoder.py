"""Show, Attend and Tell's decoder (Xu et al. 2015): an LSTM that attends over the cells of an image.

The encoder turns an image into a grid of L = H×W feature vectors
a = (a_1, ..., a_L); the decoder writes the caption one word at a time and
attends over the grid at every word, as Bahdanau's decoder attends over the
source tokens (`AttentionDecoder`, whose step this is). At step t, with
h_{t-1} the LSTM's state and y_{t-1} the previous word:

    α_t = softmax(f_att(a, h_{t-1}))            additive attention over the L cells (section 4)
    ẑ_t = Σ_i α_ti a_i                          soft, deterministic attention (4.2)
    β_t = σ(f_β(h_{t-1})),  ẑ_t ← β_t ẑ_t       the gating scalar (4.2.1)
    h_t = LSTM([E y_{t-1}; ẑ_t], h_{t-1})
    p(y_t) ∝ exp(W_y tanh(W_o [h_t; ẑ_t; E y_{t-1}]))

(The paper's deep output is L_o(E y_{t-1} + L_h h_t + L_z ẑ_t); here it is
`AttentionDecoder`'s Bahdanau readout over the same three.) Training adds
the doubly stochastic regularizer λ Σ_i (1 − Σ_t α_ti)² (4.2.1, eq. 14),
which asks every cell to be attended about once over the caption.
"""

import keras
import tensorflow as tf
from keras import ops

from keras_attn.layers.rnn_decoder import AttentionDecoder
from keras_attn.special_tokens import PAD_ID
from keras_attn.training.losses import sum_over_replicas


@keras.saving.register_keras_serializable(package="keras_attn")
class CaptionDecoder(AttentionDecoder):
    """An LSTM decoder with soft additive attention over an image's grid cells, gated by β.

    Args:
        vocabulary_size: number of caption token ids.
        hidden_dim: units of the LSTM.
        gate: multiply the context by β_t = σ(w_β · h_{t-1} + b_β).
        attention_regularization: λ of the doubly stochastic term, added
            to the layer's losses when training (`doubly_stochastic_penalty`:
            per word, as the cross-entropy).
        **kwargs: `AttentionDecoder` arguments (`embedding_dim`,
            `num_layers`, `attention_units`, `dropout`, `tie_output`, ...);
            the attention is always additive (`"bahdanau"`).

    Call arguments:
        target_in: `(B, T)` ids, [BOS] first, 0 as padding.
        memory: `(B, L, d)` the grid's feature vectors.
        encoder_states: the LSTM's initial states, a list per layer of
            `[h, c]`, each `(B, d)` (`CaptionerBackbone` makes them from the
            mean feature, as the paper does).
        training: dropout and the regularizer are active.
        return_attention_scores: also return α `(B, T, L)`.

    Example:

    >>> decoder = CaptionDecoder(50, hidden_dim=16)
    >>> grid = np.random.rand(2, 9, 16).astype("float32")
    >>> states = [[np.zeros((2, 16), "float32")] * 2]
    >>> logits, weights = decoder(np.array([[2, 7, 8]] * 2), grid, states, return_attention_scores=True)
    >>> logits.shape, weights.shape
    (TensorShape([2, 3, 50]), TensorShape([2, 3, 9]))
    """

    def __init__(self, vocabulary_size, hidden_dim, gate=True, attention_regularization=1.0, **kwargs):
        kwargs.pop("attention", None)
        super().__init__(vocabulary_size, hidden_dim, attention="bahdanau", **kwargs)
        self.gate = gate
        self.attention_regularization = attention_regularization

    def build(self, target_in_shape, memory_shape=None, encoder_states_shape=None, memory_mask_shape=None):
        super().build(target_in_shape, memory_shape, encoder_states_shape, memory_mask_shape)
        if self.gate:
            self.gate_layer = keras.layers.Dense(1, activation="sigmoid", name="gate", dtype=self.dtype_policy)
            self.gate_layer.build((None, self.hidden_dim))

    def _attend(self, query, memory, memory_keys, memory_mask, index, training):
        context, weights = super()._attend(query, memory, memory_keys, memory_mask, index, training)
        if self.gate:
            context = context * self.gate_layer(query)  # β_t from h_{t-1}, the query
        return context, weights

    def call(self, target_in, memory=None, encoder_states=None, memory_mask=None, training=None,
             return_attention_scores=False):
        logits, weights = super().call(target_in, memory, encoder_states, memory_mask, training=training,
                                       return_attention_scores=True)
        if training and self.attention_regularization:
            replicas = tf.distribute.get_strategy().num_replicas_in_sync
            if replicas > 1:  # Keras keeps a layer's losses in one list that every replica's call writes to
                raise ValueError(
                    f"{self.name}: attention_regularization={self.attention_regularization} cannot train on "
                    f"{replicas} replicas (Keras's layer losses are not kept per replica); set it to 0")
            self.add_loss(self.attention_regularization * doubly_stochastic_penalty(weights, target_in))
        return (logits, weights) if return_attention_scores else logits

    def get_config(self):
        config = super().get_config()
        config.pop("attention")
        config.update({"gate": self.gate, "attention_regularization": self.attention_regularization})
        return config


def doubly_stochastic_penalty(weights, target_in):
    """Σ_i (1 − Σ_t α_ti)² of each image over its caption's real words, summed, per real word of the batch.

    The paper adds λ times the per-image term to the caption's summed
    negative log-likelihood; our cross-entropy is a mean per word, so the
    term is divided by the words too, which keeps the paper's balance at
    the same λ. As the cross-entropy, under a `tf.distribute` strategy each
    replica divides by the words of the global batch.

    Args:
        weights: `(B, T, L)` attention weights.
        target_in: `(B, T)` ids, 0 as padding (whose steps do not count).
    """
    real = ops.cast(ops.not_equal(target_in, PAD_ID), "float32")
    coverage = ops.sum(ops.cast(weights, "float32") * real[:, :, None], axis=1)  # (B, L): Σ_t α_ti
    return ops.sum(ops.square(1.0 - coverage)) / ops.maximum(sum_over_replicas(ops.sum(real)), 1.0)
