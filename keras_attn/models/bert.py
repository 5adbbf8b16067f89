"""BERT (Devlin et al. 2019): the backbone, and its tasks (pretraining, masked LM, classifier).

    token_ids, segment_ids ─► BertEmbedding ─► N × TransformerEncoderBlock
        (GELU, post-norm) ─► sequence_output ─► [CLS] ─► tanh dense ─► pooled_output

`BertPretrainer` puts the masked-LM head (on the masked positions only,
output weights tied to the token embedding) and the next-sentence head on
a `BertBackbone`, `BertMaskedLM` the masked-LM head alone (both answer
`fill_mask`); `BertClassifier` a dropout and a dense layer on its pooled
output. All are functional `keras.Model`s whose `get_config` rebuilds them;
[PAD] (id 0) is padding, and its Keras mask reaches every attention.
"""

import keras
import tensorflow as tf

from keras_attn import graph
from keras_attn.layers import (
    BertEmbedding,
    MaskedLMHead,
    NextSentenceHead,
    TransformerEncoderBlock,
    activations,
)
from keras_attn.layers.add_and_norm import BERT_LAYER_NORM_EPSILON
from keras_attn.layers.initializers import bert_initializer
from keras_attn.losses import ClassificationLoss, PretrainingLoss
from keras_attn.metrics import PretrainingMetrics
from keras_attn.models.backbone import Backbone
from keras_attn.models.task import Task
from keras_attn.optimizers import adamw
from keras_attn.presets import PRESETS as _ALL_PRESETS
from keras_attn.presets import architecture
from pipelines.special_tokens import MASK_ID, PAD_ID, SPECIAL_TOKENS

PRESETS = _ALL_PRESETS["bert"]
MAX_TOP_K = 50  # the most candidates `fill_masks` gives a mask


@keras.saving.register_keras_serializable(package="keras_attn")
class BertBackbone(Backbone):
    """BERT's encoder as a functional `keras.Model`.

    Maps `{"token_ids", "segment_ids"}` (int `(B, T)`) to
    `{"sequence_output": (B, T, d), "pooled_output": (B, d)}`. Its parts are
    attributes: `embedding` (`BertEmbedding`), `token_embedding` (its token
    table, the MLM output projection), `encoder_blocks`, `final_norm`
    (`norm_first` only, else `None`) and `pooler`.

    Args:
        vocabulary_size: int. The number of token ids (30,522 in BERT's uncased vocabulary).
        preset: str or `None`. One of `"tiny"`, `"mini"`, `"small"`, `"medium"`, `"base"` (see
            `PRESETS`); `num_layers`, `hidden_dim` and `num_heads` given explicitly replace its
            values. `None` takes `"tiny"`'s values. Defaults to `"tiny"`.
        max_sequence_length: int. The number of learned positions (512 in BERT). Defaults to
            512.
        num_segments: int. The number of segment ids (2: sentence A and B). Defaults to 2.
        dropout: float. Dropout of the embeddings, residuals and attention weights. Defaults to
            0.1.
        num_layers: int. Encoder blocks. Defaults to the preset's.
        hidden_dim: int. The model width; `num_heads` must divide it. Defaults to the preset's.
        num_heads: int. Attention heads. Defaults to the preset's.
        intermediate_dim: int. The feed-forward width. Defaults to 4 × `hidden_dim`.
        norm_first: bool. Pre-norm blocks (Xiong et al. 2020) and a final LayerNorm, instead of
            BERT's post-norm. Defaults to `False`.
        activation: str. The feed-forward's and the masked-LM head's activation, one of
            `layers.activations.ACTIVATIONS`: `"gelu"` (exact, erf GELU), `"gelu_tanh"` (its
            tanh approximation, BERT's original code), `"relu"`, `"silu"`. Defaults to
            `"gelu"`.
        layer_norm_epsilon: float. The epsilon of every LayerNorm. Defaults to 1e-12.
        dtype: str, `keras.DTypePolicy` or `None`. The layers' dtype policy, e.g.
            `"mixed_bfloat16"`. Defaults to `None`: Keras's global policy.
        **kwargs: Other arguments of `keras.Model`, such as `name` and `trainable`.

    Raises:
        ValueError: when `preset` or `activation` is not one of its names, or when `num_heads`
            does not divide `hidden_dim`.

    Example:

        >>> backbone = BertBackbone(30522, preset="tiny")  # BERT-Tiny, L2/H128
        >>> backbone.count_params(), len(backbone.encoder_blocks)
        (4385920, 2)
    """

    presets = PRESETS

    def __init__(
        self,
        vocabulary_size,
        preset="tiny",
        max_sequence_length=512,
        num_segments=2,
        dropout=0.1,
        num_layers=None,
        hidden_dim=None,
        num_heads=None,
        intermediate_dim=None,
        norm_first=False,
        activation="gelu",
        layer_norm_epsilon=BERT_LAYER_NORM_EPSILON,
        dtype=None,
        **kwargs,
    ):
        settings = self.resolve(
            vocabulary_size,
            preset,
            max_sequence_length,
            num_segments,
            dropout,
            num_layers,
            hidden_dim,
            num_heads,
            intermediate_dim,
            norm_first,
            activation,
            layer_norm_epsilon,
            dtype,
        )
        hidden, intermediate_dim = settings["hidden_dim"], settings["intermediate_dim"]
        token_ids = keras.Input((None,), dtype="int32", name="token_ids")
        segment_ids = keras.Input((None,), dtype="int32", name="segment_ids")
        embedding = BertEmbedding(
            vocabulary_size,
            max_sequence_length,
            num_segments,
            hidden,
            dropout=dropout,
            layer_norm_epsilon=layer_norm_epsilon,
            name="embedding",
            dtype=dtype,
        )
        x = embedding(token_ids, segment_ids)  # its Keras mask: token_ids != [PAD]
        encoder_blocks = []
        for index in range(settings["num_layers"]):
            encoder_blocks.append(
                TransformerEncoderBlock(
                    settings["num_heads"],
                    intermediate_dim,
                    dropout=dropout,
                    activation=activations.activation(activation),
                    attention_dropout=dropout,
                    layer_norm_epsilon=layer_norm_epsilon,
                    norm_first=norm_first,
                    kernel_initializer=bert_initializer(),
                    name=f"encoder_block_{index}",
                    dtype=dtype,
                )
            )
            x = encoder_blocks[-1](x)
        final_norm = (
            keras.layers.LayerNormalization(
                epsilon=layer_norm_epsilon, name="final_norm", dtype=dtype
            )
            if norm_first
            else None
        )
        if final_norm is not None:
            x = final_norm(x)
        pooler = keras.layers.Dense(
            hidden,
            activation="tanh",
            kernel_initializer=bert_initializer(),
            name="pooler",
            dtype=dtype,
        )
        pooled = pooler(x[:, 0, :])  # the [CLS] state
        super().__init__(
            {"token_ids": token_ids, "segment_ids": segment_ids},
            {"sequence_output": x, "pooled_output": pooled},
            **{"name": "bert_backbone", **kwargs},
        )
        self.embedding, self.token_embedding = embedding, embedding.token_embedding
        self.encoder_blocks, self.final_norm, self.pooler = encoder_blocks, final_norm, pooler
        self._arguments = settings

    def call_with_attention(self, token_ids, segment_ids):
        """The encoder's sequence output and its self-attention weights.

        The same computation as calling the model (in inference), with each layer's attention
        weights kept: what the serving `attention` signature and the explorer show.

        Args:
            token_ids: int tensor of shape `(B, T)`. Token ids, [PAD] (0) as padding.
            segment_ids: int tensor of shape `(B, T)`. Segment ids.

        Returns:
            A tuple `(sequence_output, attention)`: the `(B, T, d)` sequence output and the
                self-attention weights, `(B, layers, heads, T, T)`.
        """
        x = self.embedding(token_ids, segment_ids)
        padding_mask = tf.not_equal(token_ids, PAD_ID)
        weights = []
        for block in self.encoder_blocks:
            x, scores = block(x, padding_mask=padding_mask, return_attention_scores=True)
            weights.append(scores)
        if self.final_norm is not None:
            x = self.final_norm(x)
        return x, tf.stack(weights, axis=1)

    @staticmethod
    def resolve(
        vocabulary_size,
        preset="tiny",
        max_sequence_length=512,
        num_segments=2,
        dropout=0.1,
        num_layers=None,
        hidden_dim=None,
        num_heads=None,
        intermediate_dim=None,
        norm_first=False,
        activation="gelu",
        layer_norm_epsilon=BERT_LAYER_NORM_EPSILON,
        dtype=None,
    ):
        """The arguments written out (the preset's values, the defaults), without building a
        model: its config.

        Args:
            vocabulary_size: int. As `BertBackbone`'s.
            preset: str or `None`. As `BertBackbone`'s. Defaults to `"tiny"`.
            max_sequence_length: int. As `BertBackbone`'s. Defaults to 512.
            num_segments: int. As `BertBackbone`'s. Defaults to 2.
            dropout: float. As `BertBackbone`'s. Defaults to 0.1.
            num_layers: int. As `BertBackbone`'s. Defaults to the preset's.
            hidden_dim: int. As `BertBackbone`'s. Defaults to the preset's.
            num_heads: int. As `BertBackbone`'s. Defaults to the preset's.
            intermediate_dim: int. As `BertBackbone`'s. Defaults to 4 × `hidden_dim`.
            norm_first: bool. As `BertBackbone`'s. Defaults to `False`.
            activation: str. As `BertBackbone`'s. Defaults to `"gelu"`.
            layer_norm_epsilon: float. As `BertBackbone`'s. Defaults to 1e-12.
            dtype: str, `keras.DTypePolicy` or `None`. As `BertBackbone`'s; a policy is written
                as its name. Defaults to `None`.

        Returns:
            A dict of every argument but `preset`, each written out.

        Raises:
            ValueError: when `preset` is not one of its names.
        """
        settings = architecture(
            "bert",
            preset,
            PRESETS["tiny"],
            num_layers=num_layers,
            hidden_dim=hidden_dim,
            num_heads=num_heads,
        )
        return dict(
            vocabulary_size=vocabulary_size,
            max_sequence_length=max_sequence_length,
            num_segments=num_segments,
            dropout=dropout,
            num_layers=settings["num_layers"],
            hidden_dim=settings["hidden_dim"],
            num_heads=settings["num_heads"],
            intermediate_dim=intermediate_dim or 4 * settings["hidden_dim"],
            norm_first=norm_first,
            activation=activation,
            layer_norm_epsilon=layer_norm_epsilon,
            dtype=dtype if dtype is None or isinstance(dtype, str) else dtype.name,
        )


def backbone_arguments(settings):
    """The `BertBackbone` arguments that fix its architecture, among a backbone's config or saved
    settings.

    Left out: a preprocessor's `lowercase`, `strip_accents` and `max_length`, and what a
    fine-tuning chooses anew (`dropout`, `dtype`, `name`, `trainable`).

    Args:
        settings: dict. A backbone's config or saved settings.

    Returns:
        A dict: `settings` without the keys left out.
    """
    return {
        k: v
        for k, v in settings.items()
        if k
        not in ("lowercase", "strip_accents", "max_length", "dropout", "dtype", "name", "trainable")
    }


class BertTask(Task):
    """What the BERT tasks share: a `BertBackbone` of a preset sized by the preprocessor."""

    presets = PRESETS

    @classmethod
    def make_backbone(cls, preset, preprocessor, **kwargs):
        """A new `BertBackbone` of `preset` for `preprocessor`'s vocabulary, with as many
        positions as its rows.

        Args:
            preset: str. A size name of `PRESETS`.
            preprocessor: a `pipelines.preprocessors.BertPreprocessor`. Its vocabulary size and
                `max_length` size the backbone.
            **kwargs: Backbone arguments, which win over the preset's and the preprocessor's.

        Returns:
            A `BertBackbone`.
        """
        return BertBackbone.from_preset(
            preset,
            **{
                "vocabulary_size": preprocessor.tokenizer.vocabulary_size,
                "max_sequence_length": preprocessor.max_length,
                **kwargs,
            },
        )

    def _compile(self, own, auto_loss, optimizer, loss, metrics=None, **kwargs):
        """`keras.Model.compile` with BERT's AdamW and `auto_loss` (a
        share of the global batch's mean) for `"auto"`.

        `own`: the task's own `compile` arguments (`learning_rate`,
        `weight_decay`, ...), kept for the `.keras` file when nothing else was given.
        """
        automatic = optimizer == loss == "auto" and metrics in (None, "auto") and not kwargs
        self._auto_compile = own if automatic else None
        if optimizer == "auto":
            optimizer = adamw(own["learning_rate"], own["weight_decay"])
        self.task_loss = auto_loss if loss == "auto" else None
        if metrics == "auto":
            metrics = [keras.metrics.SparseCategoricalAccuracy(name="accuracy")]
        super().compile(
            optimizer=optimizer, loss=None if loss == "auto" else loss, metrics=metrics, **kwargs
        )


def fill_masks(
    preprocessor, encode, mlm_head, text, top_k, max_predictions=20, max_top_k=MAX_TOP_K
):
    """The masked LM's answers for the `[MASK]`s of `text`, in the graph.

    Special tokens are never candidates.

    Args:
        preprocessor: a `pipelines.preprocessors.BertPreprocessor`. The preprocessor the texts
            are read with.
        encode: callable. `(token_ids, segment_ids)` → the backbone's `sequence_output`.
        mlm_head: a `MaskedLMHead`. The masked-LM head on that output.
        text: string tensor of shape `(B,)`. The texts, with `[MASK]` (any case) where a word is
            asked for.
        top_k: int or int32 scalar tensor. The candidates given per mask, clipped to
            `[1, max_top_k]` (and to the vocabulary's non-special tokens).
        max_predictions: int. The most masks answered per text (the first ones). Defaults to
            20.
        max_top_k: int. The most candidates. Defaults to 50 (`MAX_TOP_K`).

    Returns:
        A dict: `"tokens"`, a string tensor of shape `(B, M, K)`, and `"scores"`, a float32 tensor
            of shape `(B, M, K)` (probabilities): the top `K` tokens of each of the first `M` masks
            (`M` the most masks of a row, at most `max_predictions`; other rows padded with `""` and
            0); `"filled"`, a string tensor of shape `(B,)`, the text with each mask replaced by its
            best token; `"num_masks"`, an int32 tensor of shape `(B,)`; and `"truncated"`, a bool
            tensor of shape `(B,)`: the text was cut (masks after the cut are not answered).
    """
    # One more (empty) row, taken off at the end: the head's gather needs a row.
    token_ids, segment_ids, truncated, num_masks = preprocessor.pack_with_masks(
        tf.concat([text, [""]], 0)
    )
    sequence_output = encode(token_ids, segment_ids)
    is_mask = tf.equal(token_ids, MASK_ID)
    columns = tf.broadcast_to(tf.range(tf.shape(token_ids)[1]), tf.shape(token_ids))
    positions = tf.ragged.boolean_mask(columns, is_mask)[:, :max_predictions]
    valid = tf.ones_like(positions, tf.bool).to_tensor(False)  # (B, M)
    positions = positions.to_tensor(0)
    logits = tf.cast(mlm_head(sequence_output, positions), tf.float32)
    vocabulary_size = preprocessor.tokenizer.vocabulary_size
    logits = tf.where(tf.range(vocabulary_size) < len(SPECIAL_TOKENS), tf.float32.min, logits)
    k = tf.clip_by_value(top_k, 1, min(max_top_k, vocabulary_size - len(SPECIAL_TOKENS)))
    best = tf.math.top_k(tf.nn.softmax(logits), k)
    best_ids = tf.where(valid[..., None], best.indices, PAD_ID)
    # Each answered mask replaced by its best token, in place.
    rows = tf.broadcast_to(tf.range(tf.shape(positions)[0])[:, None], tf.shape(positions))
    where = tf.boolean_mask(tf.stack([rows, positions], -1), valid)
    filled = tf.tensor_scatter_nd_update(token_ids, where, tf.boolean_mask(best_ids[..., 0], valid))
    outputs = {
        "tokens": tf.where(valid[..., None], preprocessor.tokenizer.id_to_token(best_ids), ""),
        "scores": tf.where(valid[..., None], best.values, 0.0),
        "filled": preprocessor.tokenizer.detokenize(filled),
        "num_masks": num_masks,
        "truncated": truncated,
    }
    return {name: value[:-1] for name, value in outputs.items()}


class _MaskedLMTask(BertTask):
    """What BERT's tasks with a masked-LM head share: the head,
    `fill_mask`, and the MLM values reported by `fit`.
    """

    @staticmethod
    def _encode_and_mask(backbone, inputs):
        """`(backbone outputs, MaskedLMHead, its logits)` on `inputs`:
        the head's output weights are the token table.
        """
        encoded = backbone({"token_ids": inputs["token_ids"], "segment_ids": inputs["segment_ids"]})
        embedding = backbone.token_embedding
        # Each head is made where it is first called: that order draws the initial weights.
        settings = backbone.get_config()
        head = MaskedLMHead(
            embedding.input_dim,
            embedding,
            activation=activations.activation(settings["activation"]),
            layer_norm_epsilon=settings["layer_norm_epsilon"],
            name="mlm_head",
            dtype=backbone.embedding.dtype_policy,
        )
        return encoded, head, head(encoded["sequence_output"], inputs["mask_positions"])

    def _make_fill_mask(self):
        self._fill_mask = graph.function(
            lambda text, top_k: fill_masks(
                self.preprocessor, self.encode, self.mlm_head, text, top_k
            ),
            input_signature=[tf.TensorSpec([None], tf.string), tf.TensorSpec([], tf.int32)],
        )

    def encode(self, token_ids, segment_ids):
        """The backbone's `sequence_output` (inference: no dropout).

        Args:
            token_ids: int tensor of shape `(B, T)`. Token ids, [PAD] (0) as padding.
            segment_ids: int tensor of shape `(B, T)`. Segment ids.

        Returns:
            A tensor of shape `(B, T, d)`.
        """
        outputs = self.backbone(
            {"token_ids": token_ids, "segment_ids": segment_ids}, training=False
        )
        return outputs["sequence_output"]

    def fill_mask(self, texts, top_k=5):
        """The masked LM's best words for the `[MASK]`s of each text (compiled once for any batch).

        Args:
            texts: list of str. Each with `[MASK]` (any case) where a word is asked for (at most
                20 are answered).
            top_k: int. The candidates per mask, clipped to 1 to 50 (`MAX_TOP_K`) and to the
                vocabulary's non-special tokens. Defaults to 5.

        Returns:
            A list with, for each text, a dict: `"filled"`, the text with each mask replaced by its
                best token; `"masks"`, a list per mask of `(token, probability)` pairs, best first;
                `"truncated"`, whether the text was cut to the preprocessor's length.

        Raises:
            ValueError: when the task has no preprocessor.
        """
        if self.preprocessor is None:
            raise ValueError("fill_mask() needs a preprocessor: build the task with one")
        out = {
            key: value.numpy()
            for key, value in self._fill_mask(
                tf.constant(list(texts), tf.string), tf.constant(top_k, tf.int32)
            ).items()
        }
        answers = []
        for row in range(len(texts)):
            masks = [
                [(token.decode("utf-8"), float(score)) for token, score in zip(tokens, scores)]
                for tokens, scores in zip(out["tokens"][row], out["scores"][row])
                if tokens[0]
            ]
            answers.append(
                {
                    "filled": out["filled"][row].decode("utf-8"),
                    "masks": masks,
                    "truncated": bool(out["truncated"][row]),
                }
            )
        return answers

    def compute_metrics(self, x, y, y_pred, sample_weight=None):
        if self.task_loss is not None:  # compiled with loss="auto"
            self.pretraining_metrics.update_state(y, y_pred)
        return super().compute_metrics(x, y, y_pred, sample_weight)


_INPUTS = ("token_ids", "segment_ids", "mask_positions")


def _inputs(*names):
    return {name: keras.Input((None,), dtype="int32", name=name) for name in names}


@keras.saving.register_keras_serializable(package="keras_attn")
class BertPretrainer(_MaskedLMTask):
    """BERT's pretraining model: masked LM and next-sentence prediction on `backbone`.

    Maps `{"token_ids", "segment_ids", "mask_positions"}` (int `(B, T)`,
    `(B, T)`, `(B, P)`) to `{"mlm": (B, P, V) logits at the masked
    positions, "nsp": (B, 2) logits}`. Its parts are the attributes
    `backbone`, `mlm_head` (whose output weights are
    `backbone.token_embedding.embeddings` itself) and `nsp_head`. It trains
    with `fit` on `pipelines.pretraining`'s batches and, with a
    preprocessor, answers `fill_mask`.

    Args:
        backbone: a `BertBackbone`. The encoder the heads are put on.
        preprocessor: a `pipelines.preprocessors.BertPreprocessor` or `None`. The preprocessor
            it reads text with (for `fill_mask`; saved with the model). Defaults to `None`.
        **kwargs: Other arguments of `keras.Model`, such as `name` and `trainable`.

    Example:

        >>> model = BertPretrainer(BertBackbone(1000, preset="tiny"))
        >>> out = model({"token_ids": np.array([[4, 9, 6, 5]]), "segment_ids": np.zeros((1, 4)),
        ...              "mask_positions": np.array([[2]])})
        >>> out["mlm"].shape, out["nsp"].shape
        (TensorShape([1, 1, 1000]), TensorShape([1, 2]))
    """

    def __init__(self, backbone, preprocessor=None, **kwargs):
        inputs = _inputs(*_INPUTS)
        encoded, mlm_head, mlm = self._encode_and_mask(backbone, inputs)
        nsp_head = NextSentenceHead(name="nsp_head", dtype=backbone.embedding.dtype_policy)
        outputs = {"mlm": mlm, "nsp": nsp_head(encoded["pooled_output"])}
        super().__init__(inputs, outputs, **{"name": "bert_pretrainer", **kwargs})
        self.backbone, self.mlm_head, self.nsp_head = backbone, mlm_head, nsp_head
        self.preprocessor, self._arguments = preprocessor, {}
        # reported by `fit` after `compile(loss="auto")`
        self.pretraining_metrics = PretrainingMetrics()
        self._make_fill_mask()

    def compile(
        self,
        optimizer="auto",
        loss="auto",
        learning_rate=1e-3,
        weight_decay=0.01,
        nsp_weight=1.0,
        **kwargs,
    ):
        """`keras.Model.compile` with the pretraining job's choices for what is `"auto"`.

        `fit` then takes `(inputs, targets)` batches of `pipelines.pretraining`
        (targets `{"mlm_labels", "mlm_weights", "nsp_labels"}`) and reports
        `loss` and `PretrainingMetrics`' MLM and NSP values.

        Args:
            optimizer: str or `keras.optimizers.Optimizer`. `"auto"`: BERT's AdamW
                (`keras_attn.optimizers.adamw`) at `learning_rate`. Defaults to `"auto"`.
            loss: str or `keras.losses.Loss`. `"auto"`: `PretrainingLoss(nsp_weight)`, the
                masked-LM mean over the global batch's masked tokens plus the NSP mean. Defaults
                to `"auto"`.
            learning_rate: float or `keras.optimizers.schedules.LearningRateSchedule`. The
                `"auto"` optimizer's rate, a number or a schedule (the job warms up and decays
                linearly over its run: `WarmupLinearDecay`). Defaults to 1e-3.
            weight_decay: float. The `"auto"` optimizer's decoupled weight decay. Defaults to
                0.01.
            nsp_weight: float. What the NSP loss counts for beside the MLM's in the `"auto"`
                loss. Defaults to 1.0.
            **kwargs: Other arguments of `keras.Model.compile`.
        """
        own = dict(learning_rate=learning_rate, weight_decay=weight_decay, nsp_weight=nsp_weight)
        self._compile(own, PretrainingLoss(nsp_weight), optimizer, loss, **kwargs)


@keras.saving.register_keras_serializable(package="keras_attn")
class BertMaskedLM(_MaskedLMTask):
    """A masked language model on `backbone`: BERT's MLM head without next-sentence prediction.

    Maps `{"token_ids", "segment_ids", "mask_positions"}` to `{"mlm": (B, P,
    V)}` logits at the masked positions (RoBERTa's pretraining, Liu et al.
    2019, drops NSP). Trains with `fit` on the same batches as
    `BertPretrainer` (their `nsp_labels` are not read) and answers
    `fill_mask`. Its parts are the attributes `backbone` and `mlm_head`.

    Args:
        backbone: a `BertBackbone`. The encoder the head is put on.
        preprocessor: a `pipelines.preprocessors.BertPreprocessor` or `None`. The preprocessor
            it reads text with (for `fill_mask`; saved with the model). Defaults to `None`.
        **kwargs: Other arguments of `keras.Model`, such as `name` and `trainable`.

    Example:

        >>> from pipelines.preprocessors import BertPreprocessor
        >>> from pipelines.tokenizers import learn_wordpiece_vocabulary
        >>> vocabulary = learn_wordpiece_vocabulary(["a dog runs .", "a cat sits ."], 60)
        >>> model = BertMaskedLM.from_preset("tiny", BertPreprocessor(vocabulary, 16))
        >>> answers = model.fill_mask(["a [MASK] runs .", "no mask"], top_k=3)
        >>> [len(answer["masks"]) for answer in answers]
        [1, 0]
    """

    def __init__(self, backbone, preprocessor=None, **kwargs):
        inputs = _inputs(*_INPUTS)
        _, mlm_head, mlm = self._encode_and_mask(backbone, inputs)
        super().__init__(inputs, {"mlm": mlm}, **{"name": "bert_masked_lm", **kwargs})
        self.backbone, self.mlm_head = backbone, mlm_head
        self.preprocessor, self._arguments = preprocessor, {}
        self.pretraining_metrics = PretrainingMetrics(nsp=False)
        self._make_fill_mask()

    def compile(
        self, optimizer="auto", loss="auto", learning_rate=1e-3, weight_decay=0.01, **kwargs
    ):
        """`keras.Model.compile` with BERT's choices for what is `"auto"`.

        Args:
            optimizer: str or `keras.optimizers.Optimizer`. `"auto"`: BERT's AdamW at
                `learning_rate`. Defaults to `"auto"`.
            loss: str or `keras.losses.Loss`. `"auto"`: the masked-LM mean over the global
                batch's masked tokens (`PretrainingLoss` without the NSP head); `fit` then
                reports it and the MLM values of `PretrainingMetrics`. Defaults to `"auto"`.
            learning_rate: float or `keras.optimizers.schedules.LearningRateSchedule`. The
                `"auto"` optimizer's rate, a number or a schedule. Defaults to 1e-3.
            weight_decay: float. The `"auto"` optimizer's decoupled weight decay. Defaults to
                0.01.
            **kwargs: Other arguments of `keras.Model.compile`.
        """
        own = dict(learning_rate=learning_rate, weight_decay=weight_decay)
        self._compile(own, PretrainingLoss(), optimizer, loss, **kwargs)


@keras.saving.register_keras_serializable(package="keras_attn")
class BertClassifier(BertTask):
    """A sentence (or sentence-pair) classifier on BERT's pooled output (section 4.1).

    Maps `{"token_ids", "segment_ids"}` to `(B, num_classes)` logits. Its
    parts are the attributes `backbone` and `classifier` (the output layer).

    Args:
        backbone: a `BertBackbone`. The encoder, pretrained or not.
        num_classes: int. The number of labels.
        dropout: float. Dropout before the output layer. Defaults to 0.1.
        preprocessor: a `pipelines.preprocessors.BertPreprocessor` or `None`. The preprocessor
            its texts are read with (saved with the model). Defaults to `None`.
        **kwargs: Other arguments of `keras.Model`, such as `name` and `trainable`.

    Example:

        >>> model = BertClassifier(BertBackbone(1000), num_classes=2)
        >>> model({"token_ids": np.array([[4, 9, 5]]), "segment_ids": np.zeros((1, 3))}).shape
        TensorShape([1, 2])
    """

    def __init__(self, backbone, num_classes, dropout=0.1, preprocessor=None, **kwargs):
        inputs = _inputs("token_ids", "segment_ids")
        dtype = backbone.embedding.dtype_policy
        pooled = backbone(inputs)["pooled_output"]
        pooled = keras.layers.Dropout(dropout, dtype=dtype)(pooled)
        classifier = keras.layers.Dense(
            num_classes,
            kernel_initializer=bert_initializer(),
            name="classifier",
            dtype=dtype,
        )
        super().__init__(inputs, classifier(pooled), **{"name": "bert_classifier", **kwargs})
        self.backbone, self.classifier, self.preprocessor = backbone, classifier, preprocessor
        self._arguments = dict(num_classes=num_classes, dropout=dropout)

    def compile(
        self,
        optimizer="auto",
        loss="auto",
        metrics="auto",
        learning_rate=1e-4,
        weight_decay=0.01,
        **kwargs,
    ):
        """`keras.Model.compile` with the fine-tuning job's choices for what is `"auto"`.

        Args:
            optimizer: str or `keras.optimizers.Optimizer`. `"auto"`: BERT's AdamW at
                `learning_rate`. Defaults to `"auto"`.
            loss: str or `keras.losses.Loss`. `"auto"`: `ClassificationLoss()`, the mean
                cross-entropy of the global batch's logits. Defaults to `"auto"`.
            metrics: str or list. `"auto"`: accuracy. Defaults to `"auto"`.
            learning_rate: float or `keras.optimizers.schedules.LearningRateSchedule`. The
                `"auto"` optimizer's rate, a number or a schedule (the job warms up over 10% of
                its run, then decays linearly). Defaults to 1e-4.
            weight_decay: float. The `"auto"` optimizer's decoupled weight decay. Defaults to
                0.01.
            **kwargs: Other arguments of `keras.Model.compile`.
        """
        own = dict(learning_rate=learning_rate, weight_decay=weight_decay)
        self._compile(own, ClassificationLoss(), optimizer, loss, metrics=metrics, **kwargs)
