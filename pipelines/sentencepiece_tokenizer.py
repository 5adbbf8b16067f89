"""SentencePiece subwords (Kudo and Richardson 2018): BPE or unigram,
learned in Python, applied in TF.

The model is learned by the `sentencepiece` library (byte-pair encoding,
Sennrich et al. 2016, or the unigram language model, Kudo 2018) over raw
text, spaces included: a space is the piece marker ▁, so detokenizing is
joining the pieces and turning ▁ back into spaces, exact for any text with
no language-specific rules. Text is tokenized inside the TensorFlow graph
by `tensorflow_text.SentencepieceTokenizer` (the same C++ library), so
tokenization runs in `tf.data` and inside exported SavedModels.

Choices made so that `detokenize(tokenize(text)) == text` for all valid
UTF-8 without ▁ (U+2581, which SentencePiece reads as its space marker: it
comes back as a space): no normalization (`identity`: NFKC would rewrite characters), spaces
kept as written, every character the vocabulary lacks spelled as its UTF-8
bytes (`byte_fallback`: no `[UNK]` from text), and a space put before each
text but the empty one (SentencePiece's "dummy prefix", done here so the
first word is split as the others are) that `detokenize` takes off again. The special tokens keep
their ids (`SPECIAL_TOKENS`): SentencePiece's pad, unk, bos and eos pieces,
then `[CLS] [SEP] [MASK]` as control symbols, never produced from text.
"""

import base64
import io
import os
import re
from pathlib import Path

import tensorflow as tf
import tensorflow_text  # noqa: F401  (registers the kernels)
from tensorflow_text.python.ops.sentencepiece_tokenizer import (
    gen_sentencepiece_tokenizer as kernels,
)

from pipelines.special_tokens import BOS_ID, EOS_ID, PAD_ID, SPECIAL_TOKENS, UNK_ID
from pipelines.tokenizers import SubwordTokenizer

# Put before every text and taken off after: the first word gets its ▁ as the others do.
PREFIX = " "


def learn_sentencepiece_model(texts, vocabulary_size=8000, model_type="bpe", lowercase=False):
    """Learns a SentencePiece model from training text; returns its serialized proto (bytes).

    Args:
        texts: iterable of str. The training text, sentences or lines.
        vocabulary_size: int. Pieces in the model, `SPECIAL_TOKENS` and the
            256 byte pieces included. Defaults to 8000.
        model_type: str. One of `"bpe"`, `"unigram"`. Defaults to `"bpe"`.
        lowercase: bool. Whether text is lowercased before learning; pass the
            same value to `SentencePieceTokenizer`. Defaults to False.

    Returns:
        The serialized model, bytes.

    Raises:
        ValueError: when `model_type` is another string, or
            `vocabulary_size` is below the pieces the text needs (each of its
            characters, the 256 bytes and the special tokens).

    Example:

        >>> texts = ["A man in a blue shirt.", "Two men, one dog."] * 20
        >>> model = learn_sentencepiece_model(texts, 300)
        >>> SentencePieceTokenizer(model).vocabulary[:8]
        ['[PAD]', '[UNK]', '[BOS]', '[EOS]', '[CLS]', '[SEP]', '[MASK]', '<0x00>']
    """
    if model_type not in ("bpe", "unigram"):
        raise ValueError(f"`model_type` must be 'bpe' or 'unigram', got {model_type!r}.")
    lines = (PREFIX + (text.lower() if lowercase else text) for text in texts)
    model = io.BytesIO()
    try:
        _train(lines, model, vocabulary_size, model_type)
    # "Vocabulary size is smaller than required_chars. 200 vs 284. Increase ..."
    except RuntimeError as error:
        if "required_chars" not in str(error):
            raise
        needed = re.search(r" vs (\d+)", str(error)).group(1)
        raise ValueError(
            f"vocabulary_size={vocabulary_size} is below the {needed} pieces the text needs (each "
            "of its characters, the 256 bytes and the special tokens)"
        ) from None
    return model.getvalue()


def _train(lines, model, vocabulary_size, model_type):
    import sentencepiece

    pieces = dict(zip(("pad", "unk", "bos", "eos"), SPECIAL_TOKENS))
    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=lines,
        model_writer=model,
        vocab_size=vocabulary_size,
        model_type=model_type,
        character_coverage=1.0,
        byte_fallback=True,
        normalization_rule_name="identity",
        remove_extra_whitespaces=False,
        add_dummy_prefix=False,
        split_digits=False,
        pad_id=PAD_ID,
        unk_id=UNK_ID,
        bos_id=BOS_ID,
        eos_id=EOS_ID,
        **{f"{name}_piece": piece for name, piece in pieces.items()},
        control_symbols=list(SPECIAL_TOKENS[len(pieces) :]),
        hard_vocab_limit=False,
        num_threads=os.cpu_count() or 1,
        minloglevel=2,
    )


class SentencePieceTokenizer(SubwordTokenizer):
    """A SentencePiece model that runs in the TF graph (tf.data,
    SavedModel), as `WordPieceTokenizer` does.

    Text is made valid UTF-8 (invalid bytes become U+FFFD), optionally
    lowercased, and split into the model's pieces; `detokenize` joins them
    back into exactly that text. No input string makes `tokenize` raise.
    The model is a constant of the graph: a SavedModel holding the
    tokenizer needs no file and loads where only `tensorflow` and
    `tensorflow_text` are imported.

    Args:
        model: bytes, or str or os.PathLike. The serialized model (what
            `learn_sentencepiece_model` returns) or the path of a `.model`
            file.
        lowercase: bool. Whether text is lowercased before tokenizing; must
            match the value the model was learned with. Defaults to False.
        name: str. The name of the `tf.Module`. Defaults to None.

    Raises:
        ValueError: when the model's first pieces are not `SPECIAL_TOKENS`.

    Example:

        >>> model = learn_sentencepiece_model(["A man in a blue shirt."] * 20, 300)
        >>> tokenizer = SentencePieceTokenizer(model)
        >>> tokenizer.detokenize(tokenizer.tokenize(["A  man, in a blue shirt."])).numpy()
        array([b'A  man, in a blue shirt.'], dtype=object)
    """

    def __init__(self, model, lowercase=False, name=None):
        super().__init__(name=name)
        if isinstance(model, (str, os.PathLike)):
            model = Path(model).read_bytes()
        self.model = bytes(model)
        self.lowercase = lowercase
        pieces = kernels.sentencepiece_id_to_string_op(
            self._model(), tf.range(kernels.sentencepiece_vocab_size_op(self._model()))
        )
        self._vocabulary = [piece.decode("utf-8") for piece in pieces.numpy()]
        if tuple(self._vocabulary[: len(SPECIAL_TOKENS)]) != SPECIAL_TOKENS:
            raise ValueError(
                f"SentencePieceTokenizer: the model's first pieces must be {list(SPECIAL_TOKENS)}, "
                f"got {self._vocabulary[: len(SPECIAL_TOKENS)]}."
            )
        self._tokens = tf.constant(self._vocabulary, tf.string)

    def _model(self):
        # The model's resource, made by an op of the graph that uses it (or eagerly, per
        # call), never once up front as tensorflow_text.SentencepieceTokenizer does: its
        # kernel owns the resource, and tf.random.set_seed (keras.utils.set_random_seed)
        # empties the eager kernel cache, which deletes a resource made eagerly under
        # every graph still using it (tensorflow/text#570). A graph's own op makes its
        # resource again whenever its kernels are made again.
        return kernels.sentencepiece_op(model=self.model)

    @property
    def spec(self):
        """What rebuilds the tokenizer in a config: `{"sentencepiece": the model, base64}`."""
        return {"sentencepiece": base64.b64encode(self.model).decode("ascii")}

    def normalize(self, strings):
        """Valid UTF-8 (U+FFFD for invalid bytes), lowercased with `lowercase`.

        Args:
            strings: str, list of str or `tf.string` tensor. Text of any
                shape.

        Returns:
            A `tf.string` tensor of the same shape.
        """
        strings = tf.strings.unicode_transcode(
            tf.convert_to_tensor(strings, tf.string),
            "UTF-8",
            "UTF-8",
            errors="replace",
            replacement_char=0xFFFD,
        )
        return tf.strings.lower(strings, encoding="utf-8") if self.lowercase else strings

    def tokenize(self, strings):
        """Piece ids of strings.

        Args:
            strings: str, list of str or `tf.string` tensor. A scalar string
                or a batch of shape `(B,)`.

        Returns:
            int32 ids: a `(B, None)` `tf.RaggedTensor` for a batch, a 1-D
            tensor for a scalar string.
        """
        strings = self.normalize(strings)
        strings = tf.where(tf.equal(strings, ""), strings, tf.strings.join([PREFIX, strings]))
        if strings.shape.rank == 0:
            return self._pieces(strings[None])[0]
        return self._pieces(strings)

    def _pieces(self, strings):
        ids, splits = kernels.sentencepiece_tokenize_op(
            self._model(),
            strings,
            nbest_size=0,
            alpha=1.0,
            add_bos=False,
            add_eos=False,
            reverse=False,
            out_type=tf.int32,
        )
        return tf.RaggedTensor.from_row_splits(ids, splits, validate=False)

    def detokenize(self, ids):
        """The text of piece ids `(B, None)` ragged or `(B, T)` dense
        (padding dropped), or of a 1-D sequence.

        Special tokens and ids outside the model are dropped.

        Args:
            ids: int tensor, `tf.RaggedTensor` or nested list of int.
                `(B, None)` ragged or `(B, T)` dense ids, or a 1-D sequence of
                ids.

        Returns:
            A `(B,)` `tf.string` tensor, or a scalar for 1-D `ids`.
        """
        ids, single = self._ordinary_ids(ids)
        text = kernels.sentencepiece_detokenize_op(
            self._model(),
            ids.flat_values,
            ids.row_splits,
            add_bos=False,
            add_eos=False,
            reverse=False,
        )
        text = tf.strings.regex_replace(text, "^" + PREFIX, "")
        return text[0] if single else text

    def save(self, path):
        """Writes the model to `path` (a `.model` file the
        `sentencepiece` library also reads), atomically.

        Args:
            path: str or os.PathLike. The model file to write.
        """
        path = Path(path)
        temporary = path.with_name(path.name + ".tmp")
        temporary.write_bytes(self.model)
        os.replace(temporary, path)

    @classmethod
    def load(cls, path, lowercase=False):
        """A tokenizer from a model file written by `save`.

        Args:
            path: str or os.PathLike. The `.model` file.
            lowercase: bool. As the constructor's `lowercase`. Defaults to
                False.

        Returns:
            A `SentencePieceTokenizer`.
        """
        return cls(Path(path), lowercase=lowercase)

    @classmethod
    def from_spec(cls, spec, lowercase=False):
        """The tokenizer of a `spec`.

        Args:
            spec: dict. A tokenizer's `spec`: `{"sentencepiece": the model,
                base64}`.
            lowercase: bool. As the constructor's `lowercase`. Defaults to
                False.

        Returns:
            A `SentencePieceTokenizer`.
        """
        return cls(base64.b64decode(spec["sentencepiece"]), lowercase=lowercase)
