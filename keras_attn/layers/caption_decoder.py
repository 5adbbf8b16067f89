"""Show, Attend and Tell's decoder (Xu et al. 2015): an LSTM that
attends over the cells of an image.

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

Hard, stochastic attention (4.1) looks at one cell a word instead:

    s̃_t ~ Multinoulli(α_t),  ẑ_t = a_{s̃_t}

and at inference at the argmax cell. Sampling has no gradient; two
estimators give one. The paper's (`estimator="reinforce"`):

    ∂L/∂W ≈ ∂log p(y|s̃)/∂W + λ_r (log p(y|s̃) − b) ∂log p(s̃)/∂W + λ_e ∂H[s̃]/∂W   (eq. 12)

with b a moving average of log p(y|s̃) (b ← 0.9 b + 0.1 log p(y|s̃)) and,
for half of the images of a batch, s̃ set to its expectation (the soft
context). The second term is REINFORCE (Williams 1992): `reinforce_surrogate`
is the loss whose gradient it is. Its estimate is unbiased but noisy, and on
the built-in scenes it learns slowly (docs/benchmarks/captioning.md). The
default, `estimator="gumbel"`, is straight-through Gumbel-softmax (Jang et
al. 2017; Maddison et al. 2017; Bengio et al. 2013's straight-through):

    s̃_t = one_hot(argmax_i(log α_ti + g_i)),  g_i ~ Gumbel(0, 1)       (a draw from α_t)
    ∂s̃_t/∂α_t ≈ ∂softmax((log α_t + g) / τ)/∂α_t

the forward pass still reads one sampled cell; the backward pass takes the
gradient of the relaxed sample, biased but of low variance
(`straight_through_gumbel`).
"""

import threading

import keras
from keras import ops

from keras_attn.layers.image_encoder import cell_centres
from keras_attn.layers.replicas import as_layer_loss, sum_over_replicas
from keras_attn.layers.rnn_decoder import AttentionDecoder
from pipelines.special_tokens import PAD_ID

HARD_ESTIMATORS = ("gumbel", "reinforce")  # hard attention's gradient estimators, the default first


@keras.saving.register_keras_serializable(package="keras_attn")
class CaptionDecoder(AttentionDecoder):
    """An LSTM decoder with soft additive attention over an image's grid cells, gated by β.

    Args:
        vocabulary_size: int. Number of caption token ids.
        hidden_dim: int. Units of the LSTM.
        gate: bool. Whether to multiply the context by
            β_t = σ(w_β · h_{t-1} + b_β). Defaults to True.
        attention_regularization: float. λ of the doubly stochastic term, added
            to the layer's losses when training (`doubly_stochastic_penalty`:
            per word, as the cross-entropy). Defaults to 1.0.
        hard: bool. Stochastic hard attention (section 4.1) instead of soft.
            Defaults to False.
        estimator: str. Hard attention's gradient, one of `HARD_ESTIMATORS`:
            `"gumbel"` (straight-through Gumbel-softmax) or `"reinforce"`
            (the paper's eq. 12). Defaults to "gumbel".
        temperature: float. τ of the Gumbel-softmax relaxation (`"gumbel"`).
            Defaults to 1.0.
        reinforce_weight: float. λ_r, the weight of the REINFORCE term
            (`"reinforce"`). Defaults to 1.0.
        entropy_weight: float. λ_e, the weight of the attention's entropy bonus
            (`"reinforce"`). Defaults to 0.01.
        expectation_rate: float. The share of a batch's images trained with the
            expectation instead of a sample (`"reinforce"`; the paper's 0.5).
            Defaults to 0.5.
        **kwargs: dict. `AttentionDecoder` arguments (`embedding_dim`,
            `num_layers`, `attention_units`, `dropout`, `tie_output`, ...);
            the attention is always additive (`"bahdanau"`): an `attention`
            given is ignored.

    Call arguments:
        target_in: int tensor of shape `(B, T)`. The ids, [BOS] first, 0 as
            padding.
        memory: tensor of shape `(B, L, d)`. The grid's feature vectors.
        encoder_states: list. The LSTM's initial states, a list per layer of
            `[h, c]`, each `(B, d)` (`CaptionerBackbone` makes them from the
            pooled grid: the mean feature by default, as the paper does).
        memory_mask: bool tensor of shape `(B, L)`. `True` for the cells that may
            be attended to; all of them when not given. Defaults to None.
        training: bool. Whether dropout, the regularizer and hard attention's
            sampling are active. Defaults to None (inference, unless an outer call
            trains).
        return_attention_scores: bool. Whether to also return α `(B, T, L)`.
            Defaults to False.

    Returns:
        The logits, a tensor of shape `(B, T, vocabulary_size)`; with
        `return_attention_scores`, the tuple of them and α, of shape `(B, T, L)`.

    Raises:
        ValueError: if `estimator` is not one of `HARD_ESTIMATORS`, or for the
            `AttentionDecoder` arguments it refuses.
        RuntimeError: if Keras's backend is not TensorFlow.

    Example:

        >>> decoder = CaptionDecoder(50, hidden_dim=16)
        >>> grid = np.random.rand(2, 9, 16).astype("float32")
        >>> states = [[np.zeros((2, 16), "float32")] * 2]
        >>> tokens = np.array([[2, 7, 8]] * 2)
        >>> logits, weights = decoder(tokens, grid, states, return_attention_scores=True)
        >>> logits.shape, weights.shape
        (TensorShape([2, 3, 50]), TensorShape([2, 3, 9]))
    """

    def __init__(
        self,
        vocabulary_size,
        hidden_dim,
        gate=True,
        attention_regularization=1.0,
        hard=False,
        estimator=HARD_ESTIMATORS[0],
        temperature=1.0,
        reinforce_weight=1.0,
        entropy_weight=0.01,
        expectation_rate=0.5,
        **kwargs,
    ):
        if estimator not in HARD_ESTIMATORS:
            raise ValueError(f"`estimator` must be one of {HARD_ESTIMATORS}, got {estimator!r}.")
        kwargs.pop("attention", None)
        super().__init__(vocabulary_size, hidden_dim, attention="bahdanau", **kwargs)
        self.gate = gate
        self.attention_regularization = attention_regularization
        self.hard = hard
        self.estimator = estimator
        self.temperature = temperature
        self.reinforce_weight = reinforce_weight
        self.entropy_weight = entropy_weight
        self.expectation_rate = expectation_rate
        self._sampling = None  # while a hard-attention call trains: which rows sample (B,) bool

    def build(
        self, target_in_shape, memory_shape=None, encoder_states_shape=None, memory_mask_shape=None
    ):
        super().build(target_in_shape, memory_shape, encoder_states_shape, memory_mask_shape)
        if self.gate:
            self.gate_layer = keras.layers.Dense(
                1, activation="sigmoid", name="gate", dtype=self.dtype_policy
            )
            self.gate_layer.build((None, self.hidden_dim))
        if self.hard and self.estimator == "reinforce":
            self.baseline = self.add_weight(
                name="baseline",
                shape=(),
                initializer="zeros",
                trainable=False,
                autocast=False,  # float32 under a mixed precision policy too
                aggregation="only_first_replica",
            )

    def _attend(self, query, memory, memory_keys, memory_mask, index, training):
        context, weights = super()._attend(query, memory, memory_keys, memory_mask, index, training)
        used = weights
        if self.hard:
            if self._sampling is not None:  # training: a sample, or for some images the expectation
                if self.estimator == "gumbel":
                    sampled = straight_through_gumbel(
                        weights, self.temperature, self.seed_generator
                    )
                else:
                    sampled = sample_cells(weights, self.seed_generator)
                used = ops.where(self._sampling[:, None], sampled, weights)
            else:
                used = ops.one_hot(
                    ops.argmax(weights, axis=-1), ops.shape(weights)[-1], dtype=weights.dtype
                )
            sources, cells = ops.shape(memory)[0], ops.shape(memory)[1]
            # the W rows of each source (beam search)
            per_source = ops.reshape(used, (sources, -1, cells))
            context = ops.reshape(
                ops.einsum("bwl,bld->bwd", per_source, ops.cast(memory, used.dtype)),
                ops.shape(context),
            )
        if self.gate:
            context = context * self.gate_layer(query)  # β_t from h_{t-1}, the query
        if self._sampling is not None:
            # α and the cells used, split by `call`
            weights = ops.concatenate([weights, used], axis=-1)
        return context, weights

    def call(
        self,
        target_in,
        memory=None,
        encoder_states=None,
        memory_mask=None,
        training=None,
        return_attention_scores=False,
    ):
        if self.hard and training:
            reinforce = self.estimator == "reinforce"
            draws = keras.random.uniform(ops.shape(target_in)[:1], seed=self.seed_generator)
            self._sampling = draws >= (self.expectation_rate if reinforce else 0.0)
            try:
                logits, both = super().call(
                    target_in,
                    memory,
                    encoder_states,
                    memory_mask,
                    training=training,
                    return_attention_scores=True,
                )
            finally:
                self._sampling = None
            cells = ops.shape(memory)[1]
            weights, used = both[..., :cells], both[..., cells:]
            if reinforce:
                self._add_reinforce_loss(
                    logits, target_in, weights, used, draws >= self.expectation_rate
                )
        else:
            logits, weights = super().call(
                target_in,
                memory,
                encoder_states,
                memory_mask,
                training=training,
                return_attention_scores=True,
            )
        if training and self.attention_regularization:
            self.add_loss(
                as_layer_loss(
                    self.attention_regularization * doubly_stochastic_penalty(weights, target_in)
                )
            )
        self._per_thread().weights = weights
        return (logits, weights) if return_attention_scores else logits

    def last_weights(self):
        """α of this thread's last call (a replica's own under a `tf.distribute` strategy).

        What a task's `compute_loss` supervises after the forward pass.

        Returns:
            A tensor of shape `(B, T, L)`.
        """
        return self._per_thread().weights

    def _per_thread(self):
        # What a call leaves behind, one per thread: under a tf.distribute
        # strategy each replica's call runs in a thread of its own, and another
        # replica would clear or overwrite a shared value between this replica's
        # call and its loss (they pause at each cross-replica sum in between).
        return self.__dict__.setdefault("_calls_per_thread", threading.local())

    @property
    def _losses(self):  # Keras's list of the layer's losses, per thread
        per_thread = self._per_thread()
        if not hasattr(per_thread, "losses"):
            per_thread.losses = []
        return per_thread.losses

    @_losses.setter
    def _losses(self, losses):
        self._per_thread().losses = losses

    def _add_reinforce_loss(self, logits, target_in, weights, used, sampling):
        """The hard-attention terms of eq. 12 as a layer loss, per
        real word of the batch (as the cross-entropy).

        log p(y|s̃) is `caption_log_likelihood` under the sampled cells.
        """
        real = ops.cast(ops.not_equal(target_in, PAD_ID), "float32")
        words = ops.maximum(sum_over_replicas(ops.sum(real)), 1.0)
        reward = caption_log_likelihood(logits, target_in)  # log p(y|s̃) per image
        weights = ops.cast(weights, "float32")
        chosen = ops.sum(weights * ops.cast(used, "float32"), axis=-1)  # α_t(s̃_t) for a sampled row
        sample_log_prob = ops.sum(log_weights(chosen) * real, axis=1)  # log p(s̃) per image
        sampled = ops.cast(sampling, "float32")
        baseline = ops.convert_to_tensor(self.baseline)
        surrogate = ops.sum(reinforce_surrogate(sample_log_prob, reward, baseline) * sampled)
        entropy = -ops.sum(weights * log_weights(weights), axis=-1)  # H(α_t)
        bonus = ops.sum(entropy * real)
        self.add_loss(
            as_layer_loss(
                (-self.reinforce_weight * surrogate - self.entropy_weight * bonus) / words
            )
        )
        # the global batch's: every replica keeps the same baseline
        samples = sum_over_replicas(ops.sum(sampled))
        mean_reward = sum_over_replicas(ops.sum(ops.stop_gradient(reward) * sampled)) / ops.maximum(
            samples, 1.0
        )
        self.baseline.assign(ops.where(samples > 0, 0.9 * baseline + 0.1 * mean_reward, baseline))

    def get_config(self):
        config = super().get_config()
        config.pop("attention")
        config.update(
            {
                "gate": self.gate,
                "attention_regularization": self.attention_regularization,
                "hard": self.hard,
                "estimator": self.estimator,
                "temperature": self.temperature,
                "reinforce_weight": self.reinforce_weight,
                "entropy_weight": self.entropy_weight,
                "expectation_rate": self.expectation_rate,
            }
        )
        return config


def doubly_stochastic_penalty(weights, target_in):
    """The doubly stochastic penalty, per real word of the batch.

    Σ_i (1 − Σ_t α_ti)² of each image over its caption's real words, summed,
    then divided by the batch's real words. The paper adds λ times the
    per-image term to the caption's summed negative log-likelihood; our
    cross-entropy is a mean per word, so the term is divided by the words too,
    which keeps the paper's balance at the same λ. As the cross-entropy, under
    a `tf.distribute` strategy each replica divides by the words of the global
    batch.

    Args:
        weights: tensor of shape `(B, T, L)`. The attention weights.
        target_in: int tensor of shape `(B, T)`. The ids, 0 as padding (whose
            steps do not count).

    Returns:
        A float32 scalar tensor.
    """
    real = ops.cast(ops.not_equal(target_in, PAD_ID), "float32")
    coverage = ops.sum(ops.cast(weights, "float32") * real[:, :, None], axis=1)  # (B, L): Σ_t α_ti
    return ops.sum(ops.square(1.0 - coverage)) / ops.maximum(sum_over_replicas(ops.sum(real)), 1.0)


def attention_supervision(weights, targets):
    """Σ over a batch's words of −Σ_i m_ti log α_ti.

    The cross-entropy between each word's attention α_t and the normalised mask
    m_t of the region it names (Liu et al. 2017, "Attention Correctness in Neural
    Image Captioning"), summed.

    Args:
        weights: tensor of shape `(B, T, L)`. The attention weights α.
        targets: tensor of shape `(B, T, L)`. Masks whose rows sum to 1 for words
            aligned to a region and are zero for the others (padding among them),
            which add nothing.

    Returns:
        A float32 scalar tensor.
    """
    return -ops.sum(ops.cast(targets, "float32") * log_weights(weights))


def region_masks(boxes, grid_shape, image_size):
    """Each word's box → the normalised mask of the grid cells inside it.

    What `attention_supervision` compares α with. A cell is inside a box when
    its centre (`image_encoder.cell_centres`) is; a box that holds no cell's
    centre takes the cell its own centre falls in.

    Args:
        boxes: tensor of shape `(B, T, 4)`. `(x0, y0, x1, y1)` in pixels of the
            `image_size` square (inclusive), as `pipelines.captions.word_boxes`
            writes them.
        grid_shape: tuple. `(rows, columns)` of the attention's cells.
        image_size: int. The side of the images, in pixels.

    Returns:
        A float32 tensor of shape `(B, T, L)`, `L = rows · columns`: rows summing
        to 1, zero for words whose box is negative (they name no region).

    Example:

        >>> boxes = np.array([[[0, 0, 1, 1], [5, 0, 7, 7], [-1, -1, -1, -1]]], "float32")
        >>> region_masks(boxes, (2, 2), 8).numpy()[0].tolist()
        [[1.0, 0.0, 0.0, 0.0], [0.0, 0.5, 0.0, 0.5], [0.0, 0.0, 0.0, 0.0]]
    """
    rows, columns = grid_shape
    centre_y, centre_x = (
        ops.convert_to_tensor(c, "float32") for c in cell_centres(grid_shape, image_size)
    )
    x0, y0, x1, y1 = (ops.cast(boxes[..., i : i + 1], "float32") for i in range(4))
    inside = ops.logical_and(
        ops.logical_and(centre_y >= y0, centre_y <= y1)[..., :, None],
        ops.logical_and(centre_x >= x0, centre_x <= x1)[..., None, :],
    )
    inside = ops.cast(ops.reshape(inside, (*ops.shape(boxes)[:2], rows * columns)), "float32")
    row = ops.clip(ops.floor((y0 + y1) / 2 * rows / image_size), 0, rows - 1)
    column = ops.clip(ops.floor((x0 + x1) / 2 * columns / image_size), 0, columns - 1)
    centre_cell = ops.one_hot(ops.cast(row * columns + column, "int32")[..., 0], rows * columns)
    mask = ops.where(ops.sum(inside, -1, keepdims=True) > 0, inside, centre_cell) * ops.cast(
        x1 >= 0, "float32"
    )
    return mask / ops.maximum(ops.sum(mask, -1, keepdims=True), 1.0)


def caption_log_likelihood(logits, target_in):
    """log p(y) of each caption: the sum of its words' log-probabilities.

    Each `target_in` id after [BOS] is the target of the step before it (every
    word but the final [EOS]), padding excluded.

    Args:
        logits: tensor of shape `(B, T, V)`.
        target_in: int tensor of shape `(B, T)`. The ids, [BOS] first, 0 as
            padding.

    Returns:
        A float32 tensor of shape `(B,)`.
    """
    real = ops.cast(ops.not_equal(target_in[:, 1:], PAD_ID), "float32")
    log_probs = ops.log_softmax(ops.cast(logits[:, :-1], "float32"), axis=-1)
    next_word = ops.expand_dims(target_in[:, 1:], -1)
    return ops.sum(
        ops.squeeze(ops.take_along_axis(log_probs, next_word, axis=-1), -1) * real, axis=1
    )


def log_weights(weights):
    """log α in float32, with a floor of 1e-9 for the cells a softmax rounded to 0.

    Args:
        weights: tensor. Attention weights α.

    Returns:
        A float32 tensor of the shape of `weights`.
    """
    return ops.log(ops.maximum(ops.cast(weights, "float32"), 1e-9))


def sample_cells(weights, seed):
    """One cell per row drawn from the attention weights, as one-hot rows.

    s̃_t ~ Multinoulli(α_t).

    Args:
        weights: tensor of shape `(R, L)`. The attention weights α.
        seed: keras.random.SeedGenerator. The draws' seed.

    Returns:
        A tensor of shape `(R, L)` in the dtype of `weights`.
    """
    cells = keras.random.categorical(log_weights(weights), 1, seed=seed)[:, 0]
    return ops.one_hot(cells, ops.shape(weights)[-1], dtype=weights.dtype)


def straight_through_gumbel(weights, temperature, seed):
    """One cell per row drawn from the attention weights, as one-hot rows.

    Their gradient is that of the relaxed draw softmax((log α + g) / τ),
    g ~ Gumbel(0, 1) (straight-through Gumbel-softmax). The one-hot row is the
    relaxed draw's argmax, a draw from α (the Gumbel-max trick); adding the
    relaxed draw and subtracting it as a constant keeps that row's value and the
    relaxed draw's gradient.

    Args:
        weights: tensor of shape `(R, L)`. The attention weights α.
        temperature: float. τ.
        seed: keras.random.SeedGenerator. The draws' seed.

    Returns:
        A tensor of shape `(R, L)` in the dtype of `weights`.
    """
    logits = log_weights(weights)
    uniform = keras.random.uniform(ops.shape(logits), minval=1e-9, maxval=1.0, seed=seed)
    relaxed = ops.softmax((logits - ops.log(-ops.log(uniform))) / temperature, axis=-1)
    sampled = ops.one_hot(ops.argmax(relaxed, axis=-1), ops.shape(relaxed)[-1], dtype=relaxed.dtype)
    return ops.cast(sampled + relaxed - ops.stop_gradient(relaxed), weights.dtype)


def reinforce_surrogate(sample_log_prob, reward, baseline):
    """(R − b) log p(s̃), whose gradient is REINFORCE's estimate of ∇ E[R] for one sample s̃.

    REINFORCE is Williams's (1992). The reward and the baseline are constants
    to the gradient; maximizing the surrogate's mean over samples follows an
    unbiased estimate of the expected reward's gradient, whatever the baseline.

    Args:
        sample_log_prob: tensor of shape `(B,)`. log p(s̃) of each image's sample.
        reward: tensor of shape `(B,)`. R, e.g. log p(y|s̃).
        baseline: scalar tensor. b.

    Returns:
        A tensor of shape `(B,)`.
    """
    return ops.stop_gradient(reward - baseline) * sample_log_prob
