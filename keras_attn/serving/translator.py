"""The translation SavedModel of a `Seq2SeqLM`: strings in, strings
out, the tokenizers inside the graph.

It loads in a process that imports only `tensorflow` and `tensorflow_text`:

    import tensorflow as tf, tensorflow_text  # registers the tokenizer ops
    translator = tf.saved_model.load("saved_models/transformer/1")
    out = translator.signatures["translate"](
        text=tf.constant(["A cat sleeps."]), beam_width=tf.constant(4))
    out["translation"], out["score"], out["truncated"]

Exported with `keras_attn.serving.export` (versions and their metadata).
Each version also keeps the task's Keras config in `assets.extra/` (which
servers ignore): with the SavedModel's variables, what `load_task` rebuilds
the `Seq2SeqLM` from (for `keras-attn export-ct2` of an export).
"""

import json
import os

import keras
import tensorflow as tf

from keras_attn import decoding, graph
from keras_attn.decoding import MAX_BEAM_WIDTH
from keras_attn.errors import UserError
from keras_attn.serving.compiled_routes import COMPILED_ROWS, COMPILED_WIDTH
from keras_attn.serving.versions import fingerprint
from pipelines.special_tokens import PAD_ID

TASK_CONFIG = "translator_task.json"  # in assets.extra/
TEXT, BEAM_WIDTH = (
    tf.TensorSpec([None], tf.string, name="text"),
    tf.TensorSpec([], tf.int32, name="beam_width"),
)


class Translator(tf.Module):
    """A translation model with its tokenizers and search, ready to export.

    Signatures:
    - `translate(text: string[B], beam_width: int32[])` →
      `translation` string[B], `score` float32[B] (length-normalized
      log-probability), `truncated` bool[B] (the input was longer than the
      model accepts and was cut). Beam width 1 is greedy search; a width
      below 1 counts as 1, and one above `max_beam_width` (or the target
      vocabulary size, if smaller) as that cap. `decoding.beam_search` in
      TensorFlow's graph.
    - With `compiled_search`, `translate_compiled` (the same inputs and
      outputs) for 1 to `COMPILED_ROWS` texts at widths up to
      `COMPILED_WIDTH` (others are refused): `decoding.CompiledSearch`,
      steps that cost about their matrix products (greedy search at width
      1, which finds what beam search of width 1 finds, with the same
      scores). Its first call per shape (rows, source bucket, width)
      compiles that shape's program (seconds), unless
      `warm_up(beam_width: int32[], rows: int32[])` compiled it first
      (every source bucket of that width and rows; → `source_lengths`).
    - `attention(text: string[B])` → `translation`, `source_tokens`
      string[B, S], `output_tokens` string[B, L] and `cross_attention`
      float32[B, L, layers, heads, S] of greedy decoding, for plotting.

    Every input gives one output: an empty batch gives empty outputs, and
    a text that is blank or has no tokens (WordPiece's: invisible characters only)
    translates to `""` with score 0.0 (log-probability 0: certain, which a
    decoded translation never scores), no output tokens and zero attention.

    Args:
        task: `keras_attn.models.Seq2SeqLM`. The task, with its preprocessor (whose
            `max_length` caps sources and outputs), decoded through its stepper.
        length_penalty: float. GNMT length penalty α of beam search. Defaults to 0.6
            (`decoding.LENGTH_PENALTY`).
        max_beam_width: int. The widest beam a request gets (memory and time
            grow with it). Defaults to 32 (`decoding.MAX_BEAM_WIDTH`).
        compiled_search: bool. Whether to export `translate_compiled` and `warm_up` where
            the backbone can (`decoding.Stepper.preallocates`: the
            Transformer's); the export's `METADATA` says whether it does. Defaults to `True`.

    Raises:
        ValueError: when `task` has no preprocessor.
    """

    def __init__(
        self,
        task,
        length_penalty=decoding.LENGTH_PENALTY,
        max_beam_width=MAX_BEAM_WIDTH,
        compiled_search=True,
    ):
        super().__init__(name="translator")
        if task.preprocessor is None:
            raise ValueError(
                f"{task.name}: a translation export needs the task's TranslationPreprocessor"
            )
        self.model = task.backbone
        self.stepper = task.stepper
        self.preprocessor = preprocessor = task.preprocessor
        # Tracked here too: their vocabulary files are the SavedModel's assets.
        self.source_tokenizer = preprocessor.source_tokenizer
        self.target_tokenizer = preprocessor.target_tokenizer
        self.length_penalty = length_penalty
        self.max_beam_width = max_beam_width
        self.compiled = None
        if compiled_search and self.stepper.preallocates:
            self.compiled = decoding.CompiledSearch(
                self.stepper, preprocessor.max_length, length_penalty=length_penalty
            )
            self.translate_compiled = graph.function(
                self._translate_compiled, input_signature=[TEXT, BEAM_WIDTH]
            )
            self.warm_up = graph.function(
                self._warm_up,
                input_signature=[BEAM_WIDTH, tf.TensorSpec([], tf.int32, name="rows")],
            )
        # a str: not tracked
        self._task_config = json.dumps(keras.saving.serialize_keras_object(task))

    def encode(self, text):
        """Strings → `(source ids (B, S ≥ 1), truncated (B,))`.

        Args:
            text: string tensor of shape `(B,)`. The texts to translate.

        Returns:
            `(source, truncated)`: the int32 source ids, of shape `(B, S)` with `S ≥ 1`, and
            whether each text was cut to the preprocessor's `max_length`, bool of shape `(B,)`.
        """
        return self.preprocessor.tokenize_source(text)

    def _decode_length(self, source):
        return decoding.max_decode_length(source, cap=self.preprocessor.max_length)

    @graph.function(input_signature=[TEXT, BEAM_WIDTH])
    def translate(self, text, beam_width):
        """The `translate` signature the class describes.

        Args:
            text: string tensor of shape `(B,)`. The texts to translate.
            beam_width: int32 scalar tensor. The beam width, clipped to [1, `max_beam_width`]
                and to the target vocabulary's size; 1 is greedy search.

        Returns:
            A dict of `translation` (string), `score` (float32) and `truncated` (bool)
            tensors of shape `(B,)`.
        """
        source, truncated = self.encode(text)
        # Beam search at every width (width 1 is greedy search): a signature holding both searches
        # exports and loads 1-3 s slower for 8% less time at width 1.
        result = decoding.beam_search(
            self.stepper,
            source,
            self._decode_length(source),
            self._width(beam_width),
            length_penalty=self.length_penalty,
        )
        return self._translations(text, source, truncated, result)

    def _translate_compiled(self, text, beam_width):
        source, truncated = self.encode(text)
        rows, width = tf.shape(source)[0], self._width(beam_width)
        small = tf.debugging.Assert(
            (rows >= 1) & (rows <= COMPILED_ROWS) & (width <= COMPILED_WIDTH),
            [
                tf.strings.format(
                    f"translate_compiled takes 1 to {COMPILED_ROWS} texts at beam widths up to "
                    f"{COMPILED_WIDTH}, not {{}} at {{}} (translate takes any)",
                    (rows, width),
                )
            ],
        )
        with tf.control_dependencies([small]):
            return self._translations(text, source, truncated, self.compiled(source, width))

    def _warm_up(self, beam_width, rows):
        return {"source_lengths": self.compiled.warm_up(self._width(beam_width), rows)}

    def _width(self, beam_width):
        return tf.clip_by_value(
            beam_width, 1, min(self.max_beam_width, self.target_tokenizer.vocabulary_size)
        )

    def _translations(self, text, source, truncated, result):
        empty = nothing_to_translate(text, source)
        tokens = tf.where(empty[:, None], PAD_ID, result["tokens"])
        return {
            "translation": self.target_tokenizer.detokenize(tokens),
            "score": tf.where(empty, 0.0, result["scores"]),
            "truncated": truncated,
        }

    @graph.function(input_signature=[TEXT])
    def attention(self, text):
        """The `attention` signature the class describes: greedy decoding's cross-attention.

        Args:
            text: string tensor of shape `(B,)`. The texts to translate.

        Returns:
            A dict of `translation` string `(B,)`, `source_tokens` string `(B, S)`,
            `output_tokens` string `(B, L)` and `cross_attention` float32
            `(B, L, layers, heads, S)` tensors.
        """
        source, _ = self.encode(text)
        empty = nothing_to_translate(text, source)
        result = decoding.greedy_search(
            self.stepper,
            source,
            max_length=self._decode_length(source),
            return_attention=True,
        )
        tokens = tf.where(empty[:, None], PAD_ID, result["tokens"])
        attention = tf.cast(result["attention"], tf.float32)
        return {
            "translation": self.target_tokenizer.detokenize(tokens),
            "source_tokens": self.source_tokenizer.id_to_token(source),
            "output_tokens": self.target_tokenizer.id_to_token(tokens),
            "cross_attention": tf.where(empty[:, None, None, None, None], 0.0, attention),
        }

    def fingerprint(self):
        """SHA-256 of what decides the outputs: weights, vocabularies and settings.

        Two translators with the same fingerprint translate alike (with the
        same code), so an export whose fingerprint equals the newest
        version's need not be written again.

        Returns:
            A str: the hex digest (`keras_attn.serving.versions.fingerprint`).
        """
        return fingerprint(
            [
                json.dumps([t.spec, t.lowercase])
                for t in (self.source_tokenizer, self.target_tokenizer)
            ]
            + [f"{self.preprocessor.max_length} {self.length_penalty} {self.max_beam_width}"]
            + (["source_eos"] if self.preprocessor.source_eos else []),
            self.model.weights,
        )

    def export_metadata(self):
        """What the export's `METADATA` says of it: whether it has `translate_compiled`.

        Returns:
            A dict: `{"compiled_search": bool}`.
        """
        return {"compiled_search": self.compiled is not None}

    def write_assets_extra(self, folder):
        """Writes the task's Keras config (backbone and preprocessor,
        vocabularies inline) into `folder`.

        Args:
            folder: str. The existing folder to write into (a version's `assets.extra/`).
        """
        with open(os.path.join(folder, TASK_CONFIG), "w", encoding="utf-8") as file:
            file.write(self._task_config)

    def signatures(self):
        """The signatures to export, by name (`export` saves them).

        Returns:
            A dict: `translate` (also as `serving_default`) and `attention`, with
            `translate_compiled` and `warm_up` when the search is compiled.
        """
        signatures = {
            "serving_default": self.translate,
            "translate": self.translate,
            "attention": self.attention,
        }
        if self.compiled is not None:
            signatures.update(translate_compiled=self.translate_compiled, warm_up=self.warm_up)
        return signatures


def is_export(model_dir):
    """Whether `model_dir` is a translation export of keras-attn (its task's config in
    `assets.extra/`).

    Args:
        model_dir: str. A version folder of an export.

    Returns:
        A bool.
    """
    return os.path.isfile(os.path.join(model_dir, "assets.extra", TASK_CONFIG))


def load_task(model_dir):
    """The `Seq2SeqLM` a translation export was made from: its Keras
    config, and the export's weights.

    Args:
        model_dir: str. The export's version folder.

    Returns:
        A `keras_attn.models.Seq2SeqLM`, with its preprocessor and the export's weights.

    Raises:
        UserError: when `model_dir` is not a translation export of keras-attn (a BERT
            export, or one written before exports kept their task's config), or its variables
            cannot be read or do not hold the task's weights.
    """
    path = os.path.join(model_dir, "assets.extra", TASK_CONFIG)
    try:
        with open(path, encoding="utf-8") as file:
            config = json.load(file)
    except (OSError, ValueError):
        from keras_attn.serving.bert import BACKBONE_SETTINGS

        if os.path.isfile(os.path.join(model_dir, "assets.extra", BACKBONE_SETTINGS)):
            raise UserError(
                f"{model_dir}: a BERT export, not a translation one (keras-attn fill-mask or "
                "classify reads it)"
            ) from None
        raise UserError(
            f"{model_dir}: no {TASK_CONFIG} in assets.extra (not a translation export of "
            "keras-attn, or one from before 2026-12-05: use its run folder)"
        ) from None
    from keras_attn import models  # noqa: F401  (registers the classes the config names)
    from pipelines import preprocessors  # noqa: F401

    task = keras.saving.deserialize_keras_object(config)
    try:
        saved = _saved_variables(os.path.join(model_dir, "variables", "variables"))
    # a truncated or damaged checkpoint
    except (
        tf.errors.OpError,
        IndexError,
        ValueError,
    ) as error:
        reason = str(error).strip().splitlines()[0]
        raise UserError(f"{model_dir}: its variables cannot be read ({reason})") from None
    for weight in task.backbone.weights:
        value = saved.get(weight.path)
        if value is None or tuple(value.shape) != tuple(weight.shape):
            raise UserError(
                f"{model_dir}: its variables do not hold {weight.path} {tuple(weight.shape)} of "
                "its task"
            )
        weight.assign(value)
    return task


def _saved_variables(prefix):
    """`{Keras variable path: value}` of a SavedModel's variables checkpoint.

    By the paths the variables were created with, not by the object graph:
    a deserialized Keras layer may track its weights under other attribute
    names (a `Dense` built by `build` or by a first call) than the exported one.
    """
    from tensorflow.core.protobuf import trackable_object_graph_pb2

    reader = tf.train.load_checkpoint(prefix)
    graph = trackable_object_graph_pb2.TrackableObjectGraph()
    graph.ParseFromString(reader.get_tensor("_CHECKPOINTABLE_OBJECT_GRAPH"))
    return {
        attribute.full_name: reader.get_tensor(attribute.checkpoint_key)
        for node in graph.nodes
        for attribute in node.attributes
        if attribute.checkpoint_key.endswith("/.ATTRIBUTES/VARIABLE_VALUE")
    }


def nothing_to_translate(text, source):
    """`(B,)` bool: the texts that are blank or whose `(B, S)` source
    ids are all padding (no tokens).

    (WordPiece makes no tokens of blank text; SentencePiece keeps its spaces.)

    Args:
        text: string tensor of shape `(B,)`. The texts.
        source: int tensor of shape `(B, S)`. Their source ids.

    Returns:
        A bool tensor of shape `(B,)`.
    """
    blank = tf.strings.regex_full_match(text, r"[\s\p{Z}]*")  # no-break and ideographic spaces too
    return blank | tf.reduce_all(tf.equal(source, PAD_ID), axis=1)
