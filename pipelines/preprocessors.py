"""Preprocessors: tokenizers plus packing, as Keras layers (strings in, the ids a model reads out).

The tf.data pipelines, the tasks' `generate` and the SavedModel exports all
call these, so a sentence is tokenized, truncated and given its special
tokens one way everywhere.
"""

import keras
import tensorflow as tf
import tensorflow_text as tf_text

from pipelines.marian_tokenizer import MarianTokenizer
from pipelines.sentencepiece_tokenizer import SentencePieceTokenizer
from pipelines.special_tokens import BOS_ID, CLS_ID, EOS_ID, MASK_ID, PAD_ID, SEP_ID
from pipelines.tokenizers import SubwordTokenizer, WordPieceTokenizer


@keras.saving.register_keras_serializable(package="keras_attn")
class TranslationPreprocessor(keras.layers.Layer):
    """Sentence pairs to padded id batches, and target ids back to text.

    The source is tokenized and cut to `max_length` ids; the target becomes
    `target_in` ([BOS] and the target) and `target_out` (the target and
    [EOS]), each cut to `max_length`. Batches are dense, padded with [PAD];
    the source has at least one column (an all-empty batch still decodes).

    Args:
        source_tokenizer: pipelines.tokenizers.SubwordTokenizer, list of str or
            dict. A `WordPieceTokenizer`, `SentencePieceTokenizer` or
            `MarianTokenizer` (`pipelines`), or its `spec`: a WordPiece
            vocabulary (a list of tokens), or the dict of a SentencePiece or
            Marian tokenizer.
        target_tokenizer: pipelines.tokenizers.SubwordTokenizer, list of str or
            dict. The same for the target; `None` for the source's (one shared
            vocabulary). Defaults to None.
        max_length: int. The longest source and target, in ids. Defaults to
            64.
        lowercase: bool. Whether text is lowercased, for tokenizers given as
            a `spec`; a tokenizer object keeps its own. Defaults to False.
        source_eos: bool. Whether each source ends with [EOS], kept when a
            long source is cut (Marian's models read sources so). Defaults to
            False.
        **kwargs: `keras.layers.Layer` arguments, e.g. `name`.

    Call arguments:
        source_text: string tensor of shape `(B,)`. The sources.
        target_text: string tensor of shape `(B,)`. The targets; optional.

    Returns:
        `{"source": (B, S)}`, with `"target_in"` and `"target_out"` `(B, T)`
        when `target_text` is given; int32 ids.

    Raises:
        ValueError: when a tokenizer given as a `spec` cannot be rebuilt from
            it (as its constructor refuses it), or a Marian `spec` comes with
            `lowercase=True`.

    Example:

        >>> from pipelines.tokenizers import learn_wordpiece_vocabulary
        >>> vocabulary = learn_wordpiece_vocabulary(["a dog runs .", "ein hund rennt ."], 60)
        >>> preprocessor = TranslationPreprocessor(vocabulary, max_length=8)
        >>> ids = preprocessor(tf.constant(["ein hund"]), tf.constant(["a dog"]))
        >>> [ids[key].shape for key in ("source", "target_in", "target_out")]
        [TensorShape([1, 2]), TensorShape([1, 3]), TensorShape([1, 3])]
        >>> preprocessor.detokenize(ids["target_out"]).numpy()
        array([b'a dog'], dtype=object)
    """

    def __init__(
        self,
        source_tokenizer,
        target_tokenizer=None,
        max_length=64,
        lowercase=False,
        source_eos=False,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self._convert_input_args = False  # strings stay strings
        self._allow_non_tensor_positional_args = True
        self.source_tokenizer = _tokenizer(source_tokenizer, lowercase)
        self.target_tokenizer = (
            self.source_tokenizer
            if target_tokenizer is None
            else _tokenizer(target_tokenizer, lowercase)
        )
        self.max_length = max_length
        self.source_eos = source_eos
        self.built = True

    def tokenize_source(self, source_text):
        """`(B,)` strings → `(source ids (B, S ≥ 1), truncated (B,))`: which sources were cut.

        Args:
            source_text: string tensor of shape `(B,)`. The sources.

        Returns:
            A tuple `(source, truncated)`: int32 ids of shape `(B, S)`,
            `S ≥ 1`, padded with [PAD] (with `source_eos`, each ends with
            [EOS]), and a bool tensor of shape `(B,)`, True for a source that
            was cut.
        """
        ids = self.source_tokenizer.tokenize(source_text)
        room = self.max_length - 1 if self.source_eos else self.max_length
        truncated = ids.row_lengths() > room
        if self.source_eos:
            eos = tf.fill([ids.nrows(), 1], tf.constant(EOS_ID, ids.dtype))
            ids = tf.concat([ids[:, :room], eos], axis=1)
        return pack_source(ids, self.max_length), truncated

    def call(self, source_text, target_text=None):
        packed = {"source": self.tokenize_source(source_text)[0]}
        if target_text is not None:
            packed.update(pack_target(self.target_tokenizer.tokenize(target_text), self.max_length))
        return packed

    def detokenize(self, ids):
        """Target ids `(B, T)` (after [BOS], up to [EOS]) → `(B,)` strings.

        Args:
            ids: int tensor of shape `(B, T)`. Target ids.

        Returns:
            A string tensor of shape `(B,)`.
        """
        return self.target_tokenizer.detokenize(ids)

    def get_config(self):
        shared = self.target_tokenizer is self.source_tokenizer
        return {
            **super().get_config(),
            "source_tokenizer": self.source_tokenizer.spec,
            "target_tokenizer": None if shared else self.target_tokenizer.spec,
            "max_length": self.max_length,
            "lowercase": self.source_tokenizer.lowercase,
            "source_eos": self.source_eos,
        }


@keras.saving.register_keras_serializable(package="keras_attn")
class CaptionPreprocessor(keras.layers.Layer):
    """Images and captions to what a captioner reads, and caption ids back to text.

    Images become float32 in [0, 1] at `image_size`×`image_size` (resized
    when they have another size); captions become `target_in` and
    `target_out` as a translation's target does (`pack_target`).

    Args:
        tokenizer: pipelines.tokenizers.SubwordTokenizer, list of str or
            dict. A `WordPieceTokenizer`, `SentencePieceTokenizer` or
            `MarianTokenizer` (`pipelines`), or its `spec`: a WordPiece
            vocabulary (a list of tokens), or the dict of a SentencePiece or
            Marian tokenizer.
        image_size: int. The side of the square images the model reads.
            Defaults to 64.
        max_length: int. The longest caption, in ids. Defaults to 32.
        lowercase: bool. Whether text is lowercased, for a tokenizer given as
            a `spec`; a tokenizer object keeps its own. Defaults to True.
        **kwargs: `keras.layers.Layer` arguments, e.g. `name`.

    Call arguments:
        images: tensor or array of shape `(B, H, W, 3)`. uint8 (0-255) or
            float (0-1) pixels.
        captions: string tensor of shape `(B,)`. The captions; optional.

    Returns:
        `{"image": (B, image_size, image_size, 3)}` float32, with
        `"target_in"` and `"target_out"` `(B, T)` int32 when `captions` are given.

    Raises:
        ValueError: when a tokenizer given as a `spec` cannot be rebuilt from
            it (as its constructor refuses it), or a Marian `spec` comes with
            `lowercase=True`.

    Example:

        >>> from pipelines.tokenizers import learn_wordpiece_vocabulary
        >>> vocabulary = learn_wordpiece_vocabulary(["a red circle"], 30)
        >>> preprocessor = CaptionPreprocessor(vocabulary, image_size=32)
        >>> packed = preprocessor(np.zeros((1, 64, 64, 3), "uint8"), tf.constant(["a red circle"]))
        >>> packed["image"].shape, packed["target_in"].shape
        (TensorShape([1, 32, 32, 3]), TensorShape([1, 4]))
    """

    def __init__(self, tokenizer, image_size=64, max_length=32, lowercase=True, **kwargs):
        super().__init__(**kwargs)
        self._convert_input_args = False  # strings stay strings
        self._allow_non_tensor_positional_args = True
        self.tokenizer = _tokenizer(tokenizer, lowercase)
        self.image_size = image_size
        self.max_length = max_length
        self.built = True

    def images(self, images):
        """`(B, H, W, 3)` pixels → float32 in [0, 1] at the model's size.

        Args:
            images: tensor or array of shape `(B, H, W, 3)`. uint8 (0-255) or
                float (0-1) pixels.

        Returns:
            A float32 tensor of shape `(B, image_size, image_size, 3)`.
        """
        images = tf.convert_to_tensor(images)
        pixels = (
            tf.image.convert_image_dtype(images, tf.float32)
            if images.dtype == tf.uint8
            else tf.cast(images, tf.float32)
        )
        size = [self.image_size, self.image_size]
        if pixels.shape[1:3] != size:
            pixels = tf.clip_by_value(tf.image.resize(pixels, size, antialias=True), 0.0, 1.0)
        return pixels

    def call(self, images, captions=None):
        packed = {"image": self.images(images)}
        if captions is not None:
            packed.update(pack_target(self.tokenizer.tokenize(captions), self.max_length))
        return packed

    def detokenize(self, ids):
        """Caption ids `(B, T)` (after [BOS], up to [EOS]) → `(B,)` strings.

        Args:
            ids: int tensor of shape `(B, T)`. Caption ids.

        Returns:
            A string tensor of shape `(B,)`.
        """
        return self.tokenizer.detokenize(ids)

    def get_config(self):
        return {
            **super().get_config(),
            "tokenizer": self.tokenizer.spec,
            "image_size": self.image_size,
            "max_length": self.max_length,
            "lowercase": self.tokenizer.lowercase,
        }


def pack_source(source, max_length):
    """A source's ids `(B, None)` (ragged) cut to `max_length`: int32
    `(B, S ≥ 1)` padded with [PAD].

    Args:
        source: int `tf.RaggedTensor` of shape `(B, None)`. Source ids.
        max_length: int. The most ids kept of a source.

    Returns:
        An int32 tensor of shape `(B, S)`, `1 ≤ S ≤ max_length` (at least one
        column of padding for a batch of empty sources).
    """
    source = source[:, :max_length]
    # At least one (padding) column: TensorFlow crashes unbatching (B, 0)
    # when no source of a batch has a token (e.g. only zero-width spaces).
    width = tf.maximum(source.bounding_shape(1), 1)
    return tf.cast(source.to_tensor(PAD_ID, shape=tf.stack([source.nrows(), width])), tf.int32)


def pack_target(target, max_length):
    """Teacher forcing's pair of a target: `target_in` ([BOS] and the
    target), `target_out` (it and [EOS]).

    Args:
        target: int `tf.RaggedTensor` of shape `(B, None)`. Token ids.
        max_length: int. The longest row of each, in ids.

    Returns:
        `{"target_in", "target_out"}`, int32 `(B, T)` padded with [PAD].
    """
    bos = tf.fill([target.nrows(), 1], tf.constant(BOS_ID, target.dtype))
    eos = tf.fill([target.nrows(), 1], tf.constant(EOS_ID, target.dtype))
    return {
        "target_in": tf.cast(
            tf.concat([bos, target], axis=1)[:, :max_length].to_tensor(PAD_ID), tf.int32
        ),
        "target_out": tf.cast(
            tf.concat([target, eos], axis=1)[:, :max_length].to_tensor(PAD_ID), tf.int32
        ),
    }


def pack(segments, max_length):
    """BERT input rows of one or two segments of token ids.

    Args:
        segments: list of one or two int `tf.RaggedTensor`s of shape
            `(B, None)`. The segments' token ids.
        max_length: int. The longest row, `[CLS]` and `[SEP]`s included.

    Returns:
        `(token_ids, segment_ids, truncated)`: int32 `(B, T)` padded with
        `[PAD]` to the longest row (`T` ≥ 2, so an empty batch still runs
        through a model), and bool `(B,)`, whether tokens were cut.
    """
    budget = max_length - len(segments) - 1
    trimmed = tf_text.RoundRobinTrimmer(budget).trim(segments)
    kept = tf.add_n([segment.row_lengths() for segment in trimmed])
    truncated = tf.add_n([segment.row_lengths() for segment in segments]) > kept
    token_ids, segment_ids = tf_text.combine_segments(trimmed, CLS_ID, SEP_ID)
    width = tf.maximum(token_ids.bounding_shape(1), 2)
    shape = tf.stack([token_ids.nrows(), width])
    return (
        tf.cast(token_ids.to_tensor(PAD_ID, shape=shape), tf.int32),
        tf.cast(segment_ids.to_tensor(0, shape=shape), tf.int32),
        truncated,
    )


MASK_TEXT = r"(?i)\[mask\]"  # how a text asks for a masked word: [MASK], in any case


@keras.saving.register_keras_serializable(package="keras_attn")
class BertPreprocessor(keras.layers.Layer):
    """Texts, or pairs of texts, to BERT's rows: `[CLS] A [SEP]` or `[CLS] A [SEP] B [SEP]`.

    A pair longer than `max_length` ids loses tokens from its longer segment
    first (round robin, as BERT's `truncate_seq_pair`). Rows are padded with
    [PAD] to the longest of the batch; segment ids are 0 for `[CLS] A [SEP]`,
    1 for `B [SEP]`.

    Args:
        tokenizer: pipelines.tokenizers.SubwordTokenizer, list of str or
            dict. A `WordPieceTokenizer`, `SentencePieceTokenizer` or
            `MarianTokenizer` (`pipelines`), or its `spec`: a WordPiece
            vocabulary (a list of tokens), or the dict of a SentencePiece or
            Marian tokenizer.
        max_length: int. The longest row, `[CLS]` and `[SEP]`s included.
            Defaults to 512.
        lowercase: bool. Whether text is lowercased, for a tokenizer given as
            a `spec`; a tokenizer object keeps its own. Defaults to False.
        strip_accents: bool. With a vocabulary given as a list, whether
            accents are dropped (`WordPieceTokenizer`). Defaults to False.
        **kwargs: `keras.layers.Layer` arguments, e.g. `name`.

    Call arguments:
        text_a: string tensor of shape `(B,)`. The first segments.
        text_b: string tensor of shape `(B,)`. The second segments; optional.

    Returns:
        `{"token_ids": (B, T), "segment_ids": (B, T)}`, int32.

    Raises:
        ValueError: when a tokenizer given as a `spec` cannot be rebuilt from
            it (as its constructor refuses it), or a Marian `spec` comes with
            `lowercase=True`.

    Example:

        >>> from pipelines.tokenizers import learn_wordpiece_vocabulary
        >>> vocabulary = learn_wordpiece_vocabulary(["a dog runs .", "a cat sits ."], 60)
        >>> preprocessor = BertPreprocessor(vocabulary, 16)
        >>> rows = preprocessor(tf.constant(["a dog runs ."]), tf.constant(["a cat sits ."]))
        >>> rows["segment_ids"].numpy()
        array([[0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1]], dtype=int32)
    """

    def __init__(self, tokenizer, max_length=512, lowercase=False, strip_accents=False, **kwargs):
        super().__init__(**kwargs)
        self._convert_input_args = False  # strings stay strings
        self._allow_non_tensor_positional_args = True
        self.tokenizer = _tokenizer(tokenizer, lowercase, strip_accents)
        self.max_length = max_length
        self.built = True

    def pack(self, text_a, text_b=None):
        """`(token_ids (B, T), segment_ids (B, T), truncated (B,))`:
        `call`'s rows and which were cut.

        Args:
            text_a: string tensor of shape `(B,)`. The first segments.
            text_b: string tensor of shape `(B,)`. The second segments;
                `None` for rows of one segment. Defaults to None.

        Returns:
            A tuple `(token_ids, segment_ids, truncated)`, as
            `pipelines.preprocessors.pack` gives.
        """
        texts = [text_a] if text_b is None else [text_a, text_b]
        return pack([self.tokenizer.tokenize(text) for text in texts], self.max_length)

    def pack_with_masks(self, text):
        """`[CLS] text [SEP]` rows with `[MASK]` (any case) in the text read as the mask token.

        Args:
            text: string tensor of shape `(B,)`. The texts.

        Returns:
            `(token_ids (B, T), segment_ids (B, T), truncated (B,),
            num_masks (B,))`: `call`'s rows, which were cut, and how many
            masks each text has (before any cut).
        """
        text = tf.strings.regex_replace(tf.convert_to_tensor(text), MASK_TEXT, "[MASK]")
        pieces = tf.strings.split(text, "[MASK]")  # (B, pieces): a mask between each two
        piece_ids = self.tokenizer.tokenize(pieces.flat_values)
        piece_rows = pieces.value_rowids()
        piece_index = tf.range(tf.shape(piece_rows, out_type=tf.int64)[0])
        # a row's last piece
        last = tf.equal(piece_index + 1, tf.gather(pieces.row_splits[1:], piece_rows))
        followed_by_mask = tf.RaggedTensor.from_row_lengths(
            tf.fill(
                [tf.reduce_sum(tf.cast(~last, tf.int32))], tf.constant(MASK_ID, piece_ids.dtype)
            ),
            tf.cast(~last, tf.int64),
        )
        ids = tf.concat([piece_ids, followed_by_mask], axis=1)
        ids = tf.RaggedTensor.from_row_splits(ids, pieces.row_splits).merge_dims(1, 2)
        return (*pack([ids], self.max_length), tf.cast(pieces.row_lengths() - 1, tf.int32))

    def call(self, text_a, text_b=None):
        token_ids, segment_ids, _ = self.pack(text_a, text_b)
        return {"token_ids": token_ids, "segment_ids": segment_ids}

    def get_config(self):
        return {
            **super().get_config(),
            "tokenizer": self.tokenizer.spec,
            "max_length": self.max_length,
            "lowercase": self.tokenizer.lowercase,
            "strip_accents": getattr(self.tokenizer, "strip_accents", False),
        }


def _tokenizer(tokenizer_or_spec, lowercase, strip_accents=False):
    """A tokenizer, or one rebuilt from its `spec`: a WordPiece
    vocabulary, a SentencePiece model or a Marian tokenizer's."""
    if isinstance(tokenizer_or_spec, SubwordTokenizer):
        return tokenizer_or_spec
    if isinstance(tokenizer_or_spec, dict) and "marian" in tokenizer_or_spec:
        return MarianTokenizer.from_spec(tokenizer_or_spec, lowercase=lowercase)
    if isinstance(tokenizer_or_spec, dict):
        return SentencePieceTokenizer.from_spec(tokenizer_or_spec, lowercase=lowercase)
    return WordPieceTokenizer(
        list(tokenizer_or_spec), lowercase=lowercase, strip_accents=strip_accents
    )
