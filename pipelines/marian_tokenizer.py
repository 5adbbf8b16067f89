"""Marian's tokenization (OPUS-MT) in the TF graph: SentencePiece
pieces, looked up in a vocabulary of their own.

A Marian model folder has two SentencePiece models (`source.spm`, `target.spm`) and one
vocabulary (`vocab.json`) that gives the model's ids. Hugging Face's `MarianTokenizer` splits
text into pieces with a side's SentencePiece model and looks each piece up in the vocabulary (a
piece it lacks is `<unk>`); a source ends with `</s>`
(`TranslationPreprocessor(source_eos=True)` adds it); a leading language code such as `>>fra<<`
(the target language of a multilingual model) is a token of its own. Here the same happens
inside the TensorFlow graph: the pieces' ids in the SentencePiece model map to the vocabulary's
through a table computed once, so an export needs neither `sentencepiece` nor `transformers`.
"""

import base64

import tensorflow as tf
import tensorflow_text  # noqa: F401  (registers the kernels)
from tensorflow_text.python.ops.sentencepiece_tokenizer import (
    gen_sentencepiece_tokenizer as kernels,
)

from pipelines.special_tokens import SPECIAL_TOKENS, UNK_ID
from pipelines.tokenizers import SubwordTokenizer

LANGUAGE_CODE = r"^>>.*?<<"  # what MarianTokenizer takes off the front of a text as one token
SPACE = "\u2581"  # ▁, SentencePiece's space


class MarianTokenizer(SubwordTokenizer):
    """One side of a Marian model's tokenization, in the graph
    (tf.data, SavedModel), with our special ids.

    Args:
        model: bytes. The side's serialized SentencePiece model (the bytes of
            `source.spm` or `target.spm`).
        vocabulary: list of str. The tokens by id, `SPECIAL_TOKENS` first,
            then the pieces of the model's `vocab.json`
            (`keras_attn.checkpoints.marian` puts them in this order).
        name: str. The name of the `tf.Module`. Defaults to None.

    Raises:
        ValueError: when `vocabulary` does not start with `SPECIAL_TOKENS`.

    Example:

        >>> import io, sentencepiece
        >>> model = io.BytesIO()
        >>> sentencepiece.SentencePieceTrainer.train(
        ...     sentence_iterator=iter(["a dog runs", "a cat sits"] * 9),
        ...     model_writer=model,
        ...     model_type="word",
        ...     vocab_size=8,
        ...     minloglevel=2,
        ... )
        >>> vocabulary = [*SPECIAL_TOKENS, "▁a", "▁dog", "▁runs", ">>de<<"]  # no "▁cat"
        >>> tokenizer = MarianTokenizer(model.getvalue(), vocabulary)
        >>> tokenizer.tokenize(["a dog runs", ">>de<< a cat"]).to_list()
        [[7, 8, 9], [10, 7, 1]]
        >>> tokenizer.detokenize([[7, 8, 9, 3]]).numpy()
        array([b'a dog runs'], dtype=object)
    """

    def __init__(self, model, vocabulary, name=None):
        super().__init__(name=name)
        self.model = bytes(model)
        # Marian's models normalize text themselves (their SentencePiece rules)
        self.lowercase = False
        self._vocabulary = list(vocabulary)
        if tuple(self._vocabulary[: len(SPECIAL_TOKENS)]) != SPECIAL_TOKENS:
            raise ValueError(
                f"MarianTokenizer: the vocabulary must start with {list(SPECIAL_TOKENS)}, "
                f"got {self._vocabulary[: len(SPECIAL_TOKENS)]}."
            )
        self._tokens = tf.constant(self._vocabulary, tf.string)
        pieces = kernels.sentencepiece_id_to_string_op(
            self._model(), tf.range(kernels.sentencepiece_vocab_size_op(self._model()))
        ).numpy()
        ours = {token: i for i, token in enumerate(self._vocabulary) if i >= len(SPECIAL_TOKENS)}
        # The SentencePiece model's id → ours (pieces the vocabulary lacks are [UNK]).
        self._to_vocabulary = tf.constant(
            [ours.get(piece.decode("utf-8"), UNK_ID) for piece in pieces], tf.int32
        )
        self._token_ids = tf.lookup.StaticHashTable(
            tf.lookup.KeyValueTensorInitializer(
                tf.constant(list(ours) or [""], tf.string),
                tf.constant(list(ours.values()) or [UNK_ID], tf.int32),
            ),
            default_value=UNK_ID,
        )

    def _model(self):
        # The model's resource made by an op of the graph using it, as
        # `SentencePieceTokenizer._model` explains.
        return kernels.sentencepiece_op(model=self.model)

    @property
    def spec(self):
        """What rebuilds the tokenizer in a config: the model (base64) and the vocabulary."""
        return {
            "marian": base64.b64encode(self.model).decode("ascii"),
            "vocabulary": self._vocabulary,
        }

    @classmethod
    def from_spec(cls, spec, lowercase=False):
        """The tokenizer of a `spec` (`lowercase` must be False:
        the model's own rules normalize).

        Args:
            spec: dict. A tokenizer's `spec`: `{"marian": the model, base64,
                "vocabulary": the tokens}`.
            lowercase: bool. Must be False. Defaults to False.

        Returns:
            A `MarianTokenizer`.

        Raises:
            ValueError: when `lowercase` is True.
        """
        if lowercase:
            raise ValueError(
                "MarianTokenizer: lowercase=True; Marian's SentencePiece models normalize text "
                "themselves"
            )
        return cls(base64.b64decode(spec["marian"]), spec["vocabulary"])

    def tokenize(self, strings):
        """Ids of strings, a leading language code (`>>fra<<`) one token.

        Args:
            strings: str, list of str or `tf.string` tensor. A scalar string
                or a batch of shape `(B,)`.

        Returns:
            int32 ids: a `(B, None)` `tf.RaggedTensor` for a batch, a 1-D
            tensor for a scalar string.
        """
        strings = tf.convert_to_tensor(strings, tf.string)
        if strings.shape.rank == 0:
            return self.tokenize(strings[None])[0]
        strings = tf.strings.unicode_transcode(
            strings, "UTF-8", "UTF-8", errors="replace", replacement_char=0xFFFD
        )
        code = tf.strings.regex_replace(strings, "(?s)(" + LANGUAGE_CODE + ")?.*", r"\1")
        text = tf.strings.substr(strings, tf.strings.length(code), tf.strings.length(strings))
        ids, splits = kernels.sentencepiece_tokenize_op(
            self._model(),
            text,
            nbest_size=0,
            alpha=1.0,
            add_bos=False,
            add_eos=False,
            reverse=False,
            out_type=tf.int32,
        )
        pieces = tf.RaggedTensor.from_row_splits(
            tf.gather(self._to_vocabulary, ids), splits, validate=False
        )
        has_code = tf.not_equal(code, "")
        code_ids = tf.RaggedTensor.from_row_lengths(
            tf.boolean_mask(self._token_ids.lookup(code), has_code),
            tf.cast(has_code, tf.int64),
            validate=False,
        )
        return tf.concat([code_ids, pieces], axis=1)

    def detokenize(self, ids):
        """The text of ids `(B, None)` ragged or `(B, T)` dense, or of
        a 1-D sequence; special tokens dropped.

        As `MarianTokenizer.decode(ids, skip_special_tokens=True)`:
        the pieces joined, ▁ read as a space, the ends stripped.

        Args:
            ids: int tensor, `tf.RaggedTensor` or nested list of int.
                `(B, None)` ragged or `(B, T)` dense ids, or a 1-D sequence of
                ids.

        Returns:
            A `(B,)` `tf.string` tensor, or a scalar for 1-D `ids`.
        """
        ids, single = self._ordinary_ids(ids)
        text = tf.strings.reduce_join(tf.gather(self._tokens, ids), axis=1)
        text = tf.strings.strip(tf.strings.regex_replace(text, SPACE, " "))
        return text[0] if single else text
