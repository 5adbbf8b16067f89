"""The translation task: an encoder-decoder backbone with compile defaults, `fit` and `generate`."""

import keras
import numpy as np
import tensorflow as tf

from keras_attn import decoding, graph
from keras_attn.losses import MaskedSparseCrossEntropy
from keras_attn.metrics import MaskedPerplexity, MaskedTokenAccuracy
from keras_attn.models.seq2seq import Seq2SeqBackbone
from keras_attn.models.task import Task
from keras_attn.models.transformer import PRESETS as TRANSFORMER_PRESETS
from keras_attn.models.transformer import TransformerBackbone
from keras_attn.optimizers import transformer_adam
from keras_attn.schedules import TransformerSchedule


@keras.saving.register_keras_serializable(package="keras_attn")
class Seq2SeqLM(Task):
    """Translation with a `TransformerBackbone` or a `Seq2SeqBackbone`.

    Trains with plain `fit` on `({"source", "target_in"}, target_out)`
    batches (what `pipelines.translation` yields), under any
    `tf.distribute` strategy; `generate` translates strings (through the
    `preprocessor`) or source ids with `keras_attn.decoding`'s greedy or beam
    search, each compiled once for every batch size and length: the source is
    a `(None, None)` tensor, the beam width, step budget and length penalty
    are tensors, so calls never retrace.

    Args:
        backbone: a `TransformerBackbone` or a `Seq2SeqBackbone`. The encoder-decoder, source
            and `target_in` ids in, logits out.
        preprocessor: a `pipelines.preprocessors.TranslationPreprocessor` or `None`. Needed to
            `generate` from strings. Defaults to `None`.
        **kwargs: Other arguments of `keras.Model`, such as `name` and `trainable`.

    Example:

        >>> from keras_attn.models import TransformerBackbone
        >>> model = Seq2SeqLM(TransformerBackbone(60, 60, preset="tiny", max_sequence_length=16))
        >>> model.compile()
        >>> model.generate(np.array([[7, 8, 9]]), max_length=4).shape
        (1, 4)
    """

    presets = TRANSFORMER_PRESETS  # (the RNN's sizes have the same names)

    def __init__(self, backbone, preprocessor=None, **kwargs):
        inputs = backbone.input
        super().__init__(inputs, backbone(inputs), **{"name": "seq2seq_lm", **kwargs})
        self.backbone, self.preprocessor, self._arguments = backbone, preprocessor, {}
        self.stepper = decoding.Stepper(backbone)
        # The longest output `generate` allows by default: what the
        # positions and the preprocessor take.
        lengths = [
            backbone.get_config().get("max_sequence_length"),
            preprocessor and preprocessor.max_length,
        ]
        self.longest_output = min((length for length in lengths if length), default=None)
        budget = tf.TensorSpec([None], tf.int32, name="max_length")
        source = self.source_spec()
        self._greedy = graph.function(self._greedy_search, input_signature=[source, budget])
        self._beam = graph.function(
            self._beam_search,
            input_signature=[
                source,
                budget,
                tf.TensorSpec([], tf.int32, name="beam_width"),
                tf.TensorSpec([], tf.float32, name="length_penalty"),
            ],
        )

    BACKBONES = {"transformer": TransformerBackbone, "seq2seq": Seq2SeqBackbone}

    def source_spec(self):
        """What `generate`'s searches take as the source: `(B, S)` token ids.

        Returns:
            A `tf.TensorSpec` of shape `(None, None)` and dtype int32.
        """
        return tf.TensorSpec([None, None], tf.int32, name="source")

    @classmethod
    def make_backbone(cls, preset, preprocessor, family="transformer", **kwargs):
        """A new backbone of `family`'s `preset`, sized by `preprocessor`'s vocabularies.

        `Seq2SeqLM.from_preset(preset, preprocessor, family=..., **kwargs)`
        builds the task on it.

        Args:
            preset: str. A preset name of the family (`keras_attn.presets`).
            preprocessor: a `pipelines.preprocessors.TranslationPreprocessor`. The preprocessor
                it translates with; its `max_length` is also the Transformer's
                `max_sequence_length`.
            family: str. One of `"transformer"`, `"seq2seq"` (the RNN encoder-decoder).
                Defaults to `"transformer"`.
            **kwargs: Backbone arguments, which win over the preset's.

        Returns:
            A `TransformerBackbone` or a `Seq2SeqBackbone`.

        Raises:
            ValueError: when `family` is not one of `BACKBONES`.
        """
        if family not in cls.BACKBONES:
            raise ValueError(f"`family` must be one of {tuple(cls.BACKBONES)}, got {family!r}.")
        sizes = dict(
            source_vocabulary_size=preprocessor.source_tokenizer.vocabulary_size,
            target_vocabulary_size=preprocessor.target_tokenizer.vocabulary_size,
        )
        if family == "transformer":
            sizes["max_sequence_length"] = preprocessor.max_length
        return cls.BACKBONES[family].from_preset(preset, **{**sizes, **kwargs})

    def compile(
        self,
        optimizer="auto",
        loss="auto",
        metrics="auto",
        learning_rate=2e-3,
        warmup_steps=200,
        label_smoothing=0.1,
        **kwargs,
    ):
        """`keras.Model.compile`, with the translation job's choices for what is `"auto"`.

        Args:
            optimizer: str or `keras.optimizers.Optimizer`. `"auto"`: `transformer_adam` (β2 0.98,
                ε 1e-9, clipped norms) at `learning_rate`. Defaults to `"auto"`.
            loss: str or `keras.losses.Loss`. `"auto"`: `MaskedSparseCrossEntropy(label_smoothing)`,
                the mean over the global batch's real target tokens. Defaults to `"auto"`.
            metrics: str or list. `"auto"`: `MaskedTokenAccuracy()` and `MaskedPerplexity()`.
                Defaults to `"auto"`.
            learning_rate: float or `keras.optimizers.schedules.LearningRateSchedule`. For the
                `"auto"` optimizer, a schedule (the job's cosine one:
                `jobs.translation.compile_task`), or a number, the peak of the paper's warm-up
                and inverse-square-root schedule for the backbone's width, reached after
                `warmup_steps`. Defaults to 2e-3.
            warmup_steps: int. The warm-up steps of that schedule. Defaults to 200.
            label_smoothing: float. ε of the `"auto"` loss. Defaults to 0.1.
            **kwargs: Other arguments of `keras.Model.compile`.
        """
        auto = optimizer == loss == metrics == "auto" and not kwargs
        self._auto_compile = (
            dict(
                learning_rate=learning_rate,
                warmup_steps=warmup_steps,
                label_smoothing=label_smoothing,
            )
            if auto
            else None
        )
        if optimizer == "auto":
            if isinstance(learning_rate, (int, float)):
                width = self.backbone.get_config()["hidden_dim"]
                learning_rate = TransformerSchedule.with_peak(width, warmup_steps, learning_rate)
            optimizer = transformer_adam(learning_rate)
        if loss == "auto":
            loss = MaskedSparseCrossEntropy(label_smoothing)
        if metrics == "auto":
            metrics = [MaskedTokenAccuracy(), MaskedPerplexity()]
        super().compile(optimizer=optimizer, loss=loss, metrics=metrics, **kwargs)

    def generate(
        self, inputs, beam_width=1, max_length=None, length_penalty=decoding.LENGTH_PENALTY
    ):
        """Translates `inputs`: strings (through the preprocessor) or source ids.

        Args:
            inputs: a list or array of strings of shape `(B,)`, or an int array of shape
                `(B, S)`: source ids with [PAD] (0) as padding.
            beam_width: int. 1 for greedy search, more for beam search. Defaults to 1.
            max_length: int or `None`. The most output tokens. Defaults to `None`: 1.5 × each
                source's length + 10 (`decoding.max_decode_length`), capped at the backbone's
                or the preprocessor's longest sequence.
            length_penalty: float. GNMT's α for beam search. Defaults to 0.6
                (`decoding.LENGTH_PENALTY`).

        Returns:
            The translations as a list of `str` for strings, else an int array of shape `(B, T)`:
                the ids after [BOS] up to [EOS] (padded with [PAD]).

        Raises:
            ValueError: when `inputs` are strings and the model has no preprocessor.
        """
        source, strings = self._source(inputs)
        budget = (
            self._default_budget(source)
            if max_length is None
            else tf.fill([tf.shape(source)[0]], tf.constant(int(max_length), tf.int32))
        )
        if beam_width == 1:
            tokens = self._greedy(source, budget)
        else:
            tokens = self._beam(
                source,
                budget,
                tf.constant(beam_width, tf.int32),
                tf.constant(length_penalty, tf.float32),
            )
        if strings:
            return [text.decode("utf-8") for text in self.preprocessor.detokenize(tokens).numpy()]
        return tokens.numpy()

    def _source(self, inputs):
        """`generate`'s inputs as the searches' source, and whether to answer with strings."""
        strings = _are_strings(inputs)
        if not strings:
            return tf.convert_to_tensor(np.asarray(inputs, "int32")), False
        if self.preprocessor is None:
            raise ValueError(
                "generate() got strings, but this model has no preprocessor: give token ids"
            )
        return self.preprocessor(tf.constant(list(np.asarray(inputs).reshape(-1)), tf.string))[
            "source"
        ], True

    def _default_budget(self, source):
        return decoding.max_decode_length(source, cap=self.longest_output)

    def _greedy_search(self, source, budget):
        return decoding.greedy_search(self.stepper, source, budget)["tokens"]

    def _beam_search(self, source, budget, beam_width, length_penalty):
        return decoding.beam_search(
            self.stepper, source, budget, beam_width, length_penalty=length_penalty
        )["tokens"]


def _are_strings(inputs):
    array = np.asarray(inputs)
    return array.dtype.kind in "USO"
