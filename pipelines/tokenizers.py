"""WordPiece: vocabulary learned with HuggingFace `tokenizers`, applied in TF.

The vocabulary is learned by the Rust `tokenizers.trainers.WordPieceTrainer`
(seconds, where `keras_hub.tokenizers.compute_word_piece_vocabulary` takes
minutes), and text is tokenized inside the TensorFlow graph by
`tensorflow_text.FastWordpieceTokenizer`, so tokenization runs in `tf.data`
and inside exported SavedModels.

The two halves split text into words identically. Training uses BERT's
normalizer (control and format characters removed, CJK ideographs split,
accents kept, optional lowercasing) and BERT's pre-tokenizer (split on
whitespace, every punctuation character a word of its own); in the graph,
`WordPieceTokenizer.normalize` removes the same characters (U+FFFD
aside) and lowercases the same way, and FastWordpieceTokenizer's end-to-end mode splits on the same
whitespace and punctuation. Over all of Unicode, the two differ only on a few
hundred code points that TF's and HF's Unicode tables classify differently
(scripts and punctuation added in recent Unicode versions).
"""

import os
from pathlib import Path

import tensorflow as tf
import tensorflow_text as tf_text

from pipelines.special_tokens import (  # noqa: F401  (this module's users import them from here too)
    BOS_ID,
    CLS_ID,
    EOS_ID,
    MASK_ID,
    PAD_ID,
    SEP_ID,
    SPECIAL_TOKENS,
    UNK_ID,
)

SUBWORD_PREFIX = "##"
# Longer words become a single [UNK] (the limit of FastWordpieceTokenizer).
MAX_BYTES_PER_WORD = 100

# BERT's clean_text: C0/C1 control characters except \t \n \r, format
# characters (zero-width spaces and joiners, soft hyphen, BOM) and private use.
_INVISIBLE_CHARACTERS = r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\p{Cf}\p{Co}]"
_LETTER_OR_DIGIT = r"[\pL\pN]"

# Detokenization: words are first joined with single spaces, every
# punctuation character standing alone; these rules, applied in order, then
# remove the spaces that ordinary English or German text does not have.
# Rules whose matches can overlap ("a - b - c") run twice.
_CLOSING = r"[.,!?;:%)\]}…]"
_DETOKENIZE_RULES = (
    # Subword continuations: "play ##ing" → "playing".
    (" " + SUBWORD_PREFIX, "", 1),
    ("^" + SUBWORD_PREFIX, "", 1),
    # Inside numbers: "3 . 5" → "3.5", "1 , 000" → "1,000", "10 : 30" → "10:30".
    (r"(\pN) ([.,:]) (\pN)", r"\1\2\3", 2),
    # Quote pairs, left to right: „ … “ (German), “ … ”, ‘ … ’, " … ".
    (r"„ ([^“]*?) “", r"„\1“", 1),
    (r"“ ([^”]*?) ”", r"“\1”", 1),
    (r"‘ ([^’]*?) ’", r"‘\1’", 1),
    (r'" ([^"]*?) "', r'"\1"', 1),
    # Contractions and possessives: "man ' s" → "man's", "80 ' s" → "80's".
    (r"([\pL\pN]) (['’]) (s|t|re|ve|ll|d|m)\b", r"\1\2\3", 1),
    # Single quotes left standing alone are paired: "' Cafe Express '".
    (r"(^| )' ([^']*?) '( |$|" + _CLOSING + ")", r"\1'\2'\3", 1),
    # Plural possessives: "the dogs ' ball" → "the dogs' ball".
    (r"(\pL)s (['’])( |$|" + _CLOSING + ")", r"\1s\2\3", 1),
    # German elided compounds: "Ess - und Wohnzimmer" → "Ess- und Wohnzimmer".
    (r"(\pL) - (und|oder|bis|sowie) ", r"\1- \2 ", 1),
    # Hyphens and slashes inside words: "t - shirt" → "t-shirt", "and/or".
    (r"([\pL\pN“”\"’]) ([-/]) ([\pL\pN])", r"\1\2\3", 2),
    # No space before closing punctuation: "blue shirt ." → "blue shirt.".
    (" (" + _CLOSING + ")", r"\1", 1),
    # No space after opening brackets and "#": "( left )" → "(left)", "#19".
    (r"([(\[{#]) ", r"\1", 1),
)


def learn_wordpiece_vocabulary(texts, vocabulary_size=8000, lowercase=False):
    """Learns a WordPiece vocabulary from training text.

    Uses the Rust trainer of HuggingFace `tokenizers` with BERT's normalizer
    and pre-tokenizer, which split words exactly as `WordPieceTokenizer`
    does in the graph.

    Args:
        texts: iterable of str. The training text, sentences or lines.
        vocabulary_size: int. The size to aim for, special tokens included.
            Smaller text may give a smaller vocabulary. Defaults to 8000.
        lowercase: bool. Whether text is lowercased before learning; pass the
            same value to `WordPieceTokenizer`. Defaults to False.

    Returns:
        A list of tokens: `SPECIAL_TOKENS` first (so `[PAD]` is id 0), then
        the learned tokens, continuation pieces prefixed with `##`.

    Example:

        >>> vocabulary = learn_wordpiece_vocabulary(["A man in a blue shirt."], 100)
        >>> vocabulary[:8]
        ['[PAD]', '[UNK]', '[BOS]', '[EOS]', '[CLS]', '[SEP]', '[MASK]', '.']
    """
    import tokenizers

    tokenizer = huggingface_tokenizer(lowercase=lowercase)
    trainer = tokenizers.trainers.WordPieceTrainer(
        vocab_size=vocabulary_size,
        special_tokens=list(SPECIAL_TOKENS),
        continuing_subword_prefix=SUBWORD_PREFIX,
        show_progress=False,
    )
    tokenizer.train_from_iterator(texts, trainer)
    ids = tokenizer.get_vocab()
    return sorted(ids, key=ids.get)


def huggingface_tokenizer(vocabulary=None, lowercase=False):
    """The HuggingFace tokenizer that `learn_wordpiece_vocabulary` trains.

    With a `vocabulary` it tokenizes like `WordPieceTokenizer` (in Python,
    outside the graph): a reference to test the in-graph tokenizer against.

    Args:
        vocabulary: list of str. The tokens by id; `None` for the untrained
            model that `learn_wordpiece_vocabulary` trains. Defaults to None.
        lowercase: bool. Whether the normalizer lowercases text. Defaults to
            False.

    Returns:
        A `tokenizers.Tokenizer` with BERT's normalizer and pre-tokenizer.
    """
    import tokenizers

    tokenizer = tokenizers.Tokenizer(
        tokenizers.models.WordPiece(
            vocab=None if vocabulary is None else {t: i for i, t in enumerate(vocabulary)},
            unk_token=SPECIAL_TOKENS[UNK_ID],
            continuing_subword_prefix=SUBWORD_PREFIX,
            max_input_chars_per_word=MAX_BYTES_PER_WORD,
        )
    )
    tokenizer.normalizer = tokenizers.normalizers.BertNormalizer(
        clean_text=True,
        handle_chinese_chars=True,
        strip_accents=False,
        lowercase=lowercase,
    )
    tokenizer.pre_tokenizer = tokenizers.pre_tokenizers.BertPreTokenizer()
    return tokenizer


class SubwordTokenizer(tf.Module):
    """What the in-graph subword tokenizers share: a vocabulary
    indexed by id, and ids back to their tokens.

    A subclass sets `self._vocabulary` (a list of `str`, `SPECIAL_TOKENS`
    first), `self._tokens` (the same as a string tensor) and `lowercase`,
    and has `tokenize`, `detokenize` and `spec` (what a preprocessor's
    config holds to rebuild it). The tokenizers learned here also have
    `save` and `load`.

    Args:
        name: str. The name of the `tf.Module`. Defaults to None.
    """

    @property
    def vocabulary(self):
        """The tokens, a list of `str` indexed by id."""
        return list(self._vocabulary)

    @property
    def vocabulary_size(self):
        """The number of tokens, an int."""
        return len(self._vocabulary)

    def id_to_token(self, ids):
        """Token strings of ids, same shape; unknown ids give `[UNK]`.

        Args:
            ids: int tensor, `tf.RaggedTensor` or nested list of int. Token
                ids of any shape.

        Returns:
            A `tf.string` tensor of the shape of `ids` (ragged for ragged
            `ids`).
        """
        ids = tf.cast(as_ids(ids), tf.int32)
        known = lambda i: tf.where((i >= 0) & (i < self.vocabulary_size), i, UNK_ID)  # noqa: E731
        ids = (
            ids.with_flat_values(known(ids.flat_values))
            if isinstance(ids, tf.RaggedTensor)
            else known(ids)
        )
        return tf.gather(self._tokens, ids)

    def _ordinary_ids(self, ids):
        """What `detokenize` reads of `ids` (`(B, None)` ragged or `(B, T)` dense, or one 1-D
        sequence): `((B, None)` ragged int32 ids without special tokens and ids outside the
        vocabulary, whether one sequence was given)."""
        ids = tf.cast(as_ids(ids), tf.int32)
        single = ids.shape.rank == 1
        if single:
            ids = tf.expand_dims(ids, 0)
        if not isinstance(ids, tf.RaggedTensor):
            ids = tf.RaggedTensor.from_tensor(ids)
        return tf.ragged.boolean_mask(
            ids, (ids >= len(SPECIAL_TOKENS)) & (ids < self.vocabulary_size)
        ), single

    def tokens(self, ids):
        """Token strings of a 1-D sequence of ids, as a list of `str` (for plots).

        Args:
            ids: int tensor, array or list of shape `(T,)`. Token ids.

        Returns:
            A list of `str`, `[UNK]` for ids outside the vocabulary.
        """
        return [
            self._vocabulary[i] if 0 <= i < self.vocabulary_size else SPECIAL_TOKENS[UNK_ID]
            for i in (int(i) for i in tf.reshape(ids, [-1]).numpy())
        ]


class WordPieceTokenizer(SubwordTokenizer):
    """WordPiece tokenizer that runs in the TF graph (tf.data, SavedModel).

    Text is normalized (invalid UTF-8 replaced by U+FFFD, invisible
    characters removed, optionally lowercased), split on whitespace and
    punctuation as BERT does, and each word is split greedily into the
    longest vocabulary pieces. A word that cannot be split (a character never
    seen in training, U+FFFD, more than `MAX_BYTES_PER_WORD` bytes) becomes
    `[UNK]`. Special tokens are never produced from text: `"[SEP]"` in the
    input is the three words `[`, `SEP`, `]`. No input string makes
    `tokenize` raise: empty, blank, huge or malformed strings give short,
    empty or `[UNK]` rows.

    The compiled WordPiece model and the token strings are constants of the
    graph, so a SavedModel holding the tokenizer needs no file to serve and
    loads where only `tensorflow` and `tensorflow_text` are imported. A
    tokenizer built from a file (`load`, or a path) or saved with `save`
    also carries its vocabulary file as a `tf.saved_model.Asset`, copied
    into the SavedModel's `assets/`.

    Args:
        vocabulary: list of str, or str or os.PathLike. The tokens, starting
            with `SPECIAL_TOKENS`, or the path of a vocabulary file with one
            token per line.
        lowercase: bool. Whether text is lowercased before tokenizing; must
            match the value the vocabulary was learned with. Defaults to
            False.
        strip_accents: bool. Whether accents are dropped (the combining marks
            of the text's canonical decomposition, NFD), as BERT's uncased
            vocabularies were made: "café" reads as "cafe". Defaults to False.
        name: str. The name of the `tf.Module`. Defaults to None.

    Raises:
        ValueError: when the vocabulary does not start with `SPECIAL_TOKENS`,
            or has duplicate tokens.

    Example:

        >>> texts = ["A man in a blue shirt.", "Two men, one dog."]
        >>> tokenizer = WordPieceTokenizer(learn_wordpiece_vocabulary(texts, 100))
        >>> ids = tokenizer.tokenize(["A man, in a blue shirt."])
        >>> tokenizer.detokenize(ids).numpy()
        array([b'A man, in a blue shirt.'], dtype=object)
    """

    def __init__(self, vocabulary, lowercase=False, strip_accents=False, name=None):
        super().__init__(name=name)
        self.vocabulary_file = None
        if isinstance(vocabulary, (str, os.PathLike)):
            self.vocabulary_file = tf.saved_model.Asset(str(vocabulary))
            vocabulary = _read_vocabulary(vocabulary)
        vocabulary = [str(token) for token in vocabulary]
        _check_vocabulary(vocabulary)
        self._vocabulary = vocabulary
        self.lowercase, self.strip_accents = lowercase, strip_accents
        self._wordpiece = tf_text.FastWordpieceTokenizer(
            vocab=vocabulary,
            suffix_indicator=SUBWORD_PREFIX,
            max_bytes_per_word=MAX_BYTES_PER_WORD,
            token_out_type=tf.int32,
            unknown_token=SPECIAL_TOKENS[UNK_ID],
            no_pretokenization=False,
        )
        self._tokens = tf.constant(vocabulary, tf.string)

    def normalize(self, strings):
        """Makes any string valid, visible text, as the vocabulary saw it.

        Invalid UTF-8 becomes U+FFFD, BERT's invisible characters are
        removed, with `lowercase` text is lowercased and with
        `strip_accents` its accents are dropped. (BERT's normalizer
        also deletes U+FFFD; here it stays, so that a word with broken bytes
        becomes `[UNK]` instead of silently fusing its pieces.)

        Args:
            strings: str, list of str or `tf.string` tensor. Text of any
                shape.

        Returns:
            A `tf.string` tensor of the same shape.
        """
        strings = tf.convert_to_tensor(strings, tf.string)
        strings = tf.strings.unicode_transcode(
            strings, "UTF-8", "UTF-8", errors="replace", replacement_char=0xFFFD
        )
        strings = tf.strings.regex_replace(strings, _INVISIBLE_CHARACTERS, "")
        if self.lowercase:
            # TF lowercases a word-final Σ to ς, HF (like BERT) always to σ.
            strings = tf.strings.regex_replace(strings, "Σ", "σ")
            strings = tf.strings.lower(strings, encoding="utf-8")
        if self.strip_accents:
            strings = tf.strings.regex_replace(
                tf_text.normalize_utf8(strings, "NFD"), r"\p{Mn}", ""
            )
        return strings

    def tokenize(self, strings):
        """Token ids of strings.

        Args:
            strings: str, list of str or `tf.string` tensor. A scalar string
                or a batch of shape `(B,)`.

        Returns:
            int32 ids: a `(B, None)` `tf.RaggedTensor` for a batch, a 1-D
            `tf.Tensor` for a scalar string.
        """
        return self._wordpiece.tokenize(self.normalize(strings))

    def detokenize(self, ids):
        """Text of token ids: subwords joined into words, words into text.

        Special tokens other than `[UNK]` (padding, BOS/EOS, ...) and ids
        outside the vocabulary are dropped; `[UNK]` is kept as the text
        `[UNK]`. Words are joined with spaces, then `_DETOKENIZE_RULES`
        remove the spaces that normal English and German text does not
        have: before closing punctuation (`. , ! ? ; : % ) ] } …`), after
        `( [ { #`, inside quote pairs (`"…"`, `'…'`, `„…“`, `“…”`, `‘…’`),
        in contractions and possessives (`man's`, `don't`, `dogs'`), around
        `-` and `/` between letters or digits (`t-shirt`, `and/or`), in
        German elided compounds (`Ess- und Wohnzimmer`), and around `. , :`
        between digits (`3.5`, `1,000`, `10:30`). Text written that way
        comes back unchanged; on Multi30k 99.7% (German) and 99.8%
        (English) of the training sentences do, the rest having irregular
        spacing in the data ("Ein Mann , der").

        Args:
            ids: int tensor, `tf.RaggedTensor` or nested list of int.
                `(B, None)` ragged or `(B, T)` dense ids (padding is dropped),
                or a 1-D sequence of ids.

        Returns:
            A `(B,)` `tf.string` tensor, or a scalar for 1-D `ids`.
        """
        ids = as_ids(ids)
        if ids.shape.rank == 1:
            return self.detokenize(tf.expand_dims(ids, 0))[0]
        if not isinstance(ids, tf.RaggedTensor):
            ids = tf.RaggedTensor.from_tensor(ids)
        ids = tf.cast(ids, tf.int32)
        keep = (ids >= len(SPECIAL_TOKENS)) & (ids < self.vocabulary_size)
        ids = tf.ragged.boolean_mask(ids, keep | tf.equal(ids, UNK_ID))
        text = tf.strings.reduce_join(tf.gather(self._tokens, ids), axis=-1, separator=" ")
        for pattern, rewrite, passes in _DETOKENIZE_RULES:
            for _ in range(passes):
                text = tf.strings.regex_replace(text, pattern, rewrite)
        return text

    def save(self, path):
        """Writes the vocabulary to `path`, one token per line, atomically.

        The file becomes this tokenizer's `vocabulary_file` asset.

        Args:
            path: str or os.PathLike. The vocabulary file to write.
        """
        path = Path(path)
        temporary = path.with_name(path.name + ".tmp")
        temporary.write_text("".join(t + "\n" for t in self._vocabulary), "utf-8")
        os.replace(temporary, path)
        self.vocabulary_file = tf.saved_model.Asset(str(path))

    @classmethod
    def load(cls, path, lowercase=False, strip_accents=False):
        """A tokenizer from a vocabulary file written by `save`.

        Args:
            path: str or os.PathLike. The vocabulary file, one token per line.
            lowercase: bool. As the constructor's `lowercase`. Defaults to
                False.
            strip_accents: bool. As the constructor's `strip_accents`.
                Defaults to False.

        Returns:
            A `WordPieceTokenizer`.

        Raises:
            ValueError: as the constructor.
        """
        return cls(Path(path), lowercase=lowercase, strip_accents=strip_accents)

    @property
    def spec(self):
        """What rebuilds the tokenizer in a config: its vocabulary."""
        return self.vocabulary


def as_ids(ids):
    """A tensor or ragged tensor of ids (Python lists may be ragged).

    Args:
        ids: tensor, `tf.RaggedTensor`, array or nested list of int. The ids.

    Returns:
        `ids` itself when it is a tensor or ragged tensor; otherwise a
        `tf.Tensor`, or a `tf.RaggedTensor` when its rows differ in length.
    """
    if isinstance(ids, (tf.Tensor, tf.RaggedTensor)):
        return ids
    try:
        return tf.convert_to_tensor(ids)
    except ValueError:
        return tf.ragged.constant(ids)


def _read_vocabulary(path):
    with open(path, encoding="utf-8") as stream:
        return [line.rstrip("\n") for line in stream]


def _check_vocabulary(vocabulary):
    if tuple(vocabulary[: len(SPECIAL_TOKENS)]) != SPECIAL_TOKENS:
        raise ValueError(
            f"WordPieceTokenizer: the vocabulary must start with "
            f"{list(SPECIAL_TOKENS)}, got {vocabulary[: len(SPECIAL_TOKENS)]}."
        )
    duplicates = len(vocabulary) - len(set(vocabulary))
    if duplicates:
        raise ValueError(f"WordPieceTokenizer: the vocabulary has {duplicates} duplicate tokens.")
