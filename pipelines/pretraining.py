"""BERT pretraining data in tf.data: sentence pairs for NSP, dynamic masks for MLM.

    documents ─tokenize once─► TokenizedDocuments (sentences as flat ids)
    range(pairs per epoch) ─map: one [CLS] A [SEP] B [SEP] pair─► mask 15%
        ─► batch ─► ({token_ids, segment_ids, mask_positions},
                      {mlm_labels, mlm_weights, nsp_labels}) ─► prefetch

Pairs and masks are made in the graph from stateless random numbers keyed
by `(seed, epoch, pair index)`: an epoch's batches are the same on every
run and every worker (so a resumed run sees the batches it missed), and
each epoch has new pairs and new masks (dynamic masking, RoBERTa's
improvement over BERT's static masks).

Pair creation follows BERT's `create_pretraining_data.py` (Devlin et al.
2019, appendix A.2) per pair instead of per document walk:

- a target length: `max_length - 3`, or with probability
  `short_sequence_probability` a uniform length in [2, max_length - 3];
- a random anchor sentence with a successor in its document; the chunk of
  its document's sentences from there until the target length is reached
  (at least two); segment A is its first 1..n-1 sentences;
- B is the rest of the chunk (IsNext, label 0) with probability
  `next_probability`, else sentences of another document from a random
  sentence on, until the target length (NotNext, label 1);
- the longer segment loses one token at a time, from its front or back at
  random, until the pair fits (closed form, same result).
"""

import dataclasses
import math

import numpy as np
import tensorflow as tf

from pipelines.prefetch import prefetched
from pipelines.tokenizers import CLS_ID, MASK_ID, SEP_ID, SPECIAL_TOKENS, SUBWORD_PREFIX, UNK_ID

IS_NEXT, NOT_NEXT = 0, 1  # next-sentence labels, BERT's convention
_TOKENIZE_BATCH = 4096
_PAIR, _MASK = 0, 1  # salts of the two random streams of a pair


@dataclasses.dataclass
class TokenizedDocuments:
    """Documents as token ids: what pair creation draws from.

    Each argument is also an attribute of the same name.

    Args:
        ids: int32 array of shape `(tokens,)`. Every sentence's ids, one
            after another.
        sentence_starts: int64 array of shape `(sentences + 1,)`. Where each
            sentence starts in `ids` (and the end).
        document_starts: int64 array of shape `(documents + 1,)`. Where each
            document starts in the sentences (and the end).
        dropped_sentences: int. Sentences with no tokens (invisible
            characters only), left out. Defaults to 0.
    """

    ids: np.ndarray
    sentence_starts: np.ndarray
    document_starts: np.ndarray
    dropped_sentences: int = 0

    @property
    def num_documents(self):
        """The number of documents, an int."""
        return len(self.document_starts) - 1

    @property
    def num_tokens(self):
        """The number of tokens, an int."""
        return len(self.ids)

    def sentence_document(self):
        """int64 `(sentences,)`: the document of each sentence.

        Returns:
            An int64 array of shape `(sentences,)`.
        """
        counts = np.diff(self.document_starts)
        return np.repeat(np.arange(len(counts)), counts)

    def anchors(self):
        """Sentences that have a next sentence in their document (where IsNext pairs start).

        Returns:
            An int64 array of sentence indices.
        """
        documents = self.sentence_document()
        return np.flatnonzero(documents[:-1] == documents[1:])


def tokenize_documents(documents, tokenizer):
    """Tokenizes documents once, sentence by sentence, in the graph.

    Args:
        documents: list of lists of str. The documents, each a list of
            sentence strings.
        tokenizer: pipelines.tokenizers.WordPieceTokenizer. The tokenizer.

    Returns:
        A `TokenizedDocuments`; documents left with no sentence are dropped.
    """
    sentences = [sentence for document in documents for sentence in document]
    rows = []
    for start in range(0, len(sentences), _TOKENIZE_BATCH):
        ragged = tokenizer.tokenize(tf.constant(sentences[start : start + _TOKENIZE_BATCH]))
        rows.extend(np.split(ragged.flat_values.numpy(), ragged.row_splits.numpy()[1:-1]))
    kept, sentence_counts, dropped, index = [], [], 0, 0
    for document in documents:
        pieces = [rows[index + i] for i in range(len(document)) if len(rows[index + i])]
        index += len(document)
        dropped += len(document) - len(pieces)
        if pieces:
            kept.extend(pieces)
            sentence_counts.append(len(pieces))
    lengths = np.array([len(piece) for piece in kept], np.int64)
    return TokenizedDocuments(
        ids=np.concatenate(kept).astype(np.int32) if kept else np.zeros([0], np.int32),
        sentence_starts=np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64),
        document_starts=np.concatenate([[0], np.cumsum(sentence_counts)]).astype(np.int64),
        dropped_sentences=dropped,
    )


def pairs_per_epoch(corpus, max_length):
    """The default epoch: about as many pairs as the corpus fills sequences.

    Args:
        corpus: pipelines.pretraining.TokenizedDocuments. The corpus.
        max_length: int. The length of a pair, in tokens.

    Returns:
        int, at least 1.
    """
    return max(1, corpus.num_tokens // max(1, max_length - 3))


def sentence_pairs(
    corpus,
    max_length,
    num_pairs,
    seed=0,
    epoch=0,
    short_sequence_probability=0.1,
    next_probability=0.5,
):
    """`[CLS] A [SEP] B [SEP]` pairs for next-sentence prediction (see the module).

    Args:
        corpus: pipelines.pretraining.TokenizedDocuments. A corpus of at
            least two documents, one with two sentences or more.
        max_length: int. The length of every pair, padded with `[PAD]`; at
            least 5.
        num_pairs: int. Pairs in the dataset.
        seed: int. With `epoch` and the pair's index, decides everything
            random. Defaults to 0.
        epoch: int. Another epoch gives other pairs. Defaults to 0.
        short_sequence_probability: float. The probability of a shorter
            target length. Defaults to 0.1.
        next_probability: float. The probability that B follows A (IsNext).
            Defaults to 0.5.

    Returns:
        A `tf.data.Dataset` of dicts: `token_ids` and `segment_ids` int32
        `(max_length,)`, `next_sentence_label` int32 (`IS_NEXT` or
        `NOT_NEXT`), `last_a_sentence`, `first_b_sentence` int64 (indices
        into the corpus's sentences, before truncation) and `index`.

    Raises:
        ValueError: when the corpus has fewer than two documents or no
            document of two sentences, or `max_length` is below 5.
    """
    _check_pairable(corpus.num_documents, len(corpus.anchors()), max_length)
    make_pair = pair_maker(
        tf.constant(corpus.ids, tf.int32),
        tf.constant(corpus.sentence_starts, tf.int64),
        tf.constant(corpus.document_starts, tf.int64),
        max_length,
        seed,
        epoch,
        short_sequence_probability,
        next_probability,
    )
    return tf.data.Dataset.range(num_pairs).map(
        make_pair, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True
    )


def _check_pairable(documents, anchors, max_length):
    if documents < 2 or not anchors:
        raise ValueError(
            "sentence_pairs: the corpus needs two documents or more and one of two "
            f"sentences or more; it has {documents} documents and "
            f"{anchors} sentences followed by another"
        )
    if max_length < 5:
        raise ValueError(f"sentence_pairs: max_length must be at least 5, got {max_length}")


def is_pairable(corpus):
    """Whether `sentence_pairs` can draw from `corpus`: two
    documents, one of two sentences or more.

    Args:
        corpus: pipelines.pretraining.TokenizedDocuments. The corpus.

    Returns:
        bool.
    """
    return corpus.num_documents >= 2 and len(corpus.anchors()) > 0


def pair_maker(
    ids,
    starts,
    document_starts,
    max_length,
    seed,
    epoch,
    short_sequence_probability,
    next_probability,
    first_index=0,
):
    """`make_pair(index)` of `sentence_pairs` over a corpus given as
    tensors (`TokenizedDocuments`' fields).

    The pair's random numbers are keyed by `first_index + index` (its `"index"` too): a stream of
    corpora (`pipelines.document_stream`) gives each block its own range of indices.

    Args:
        ids: int32 tensor of shape `(tokens,)`. The corpus's ids
            (`TokenizedDocuments.ids`).
        starts: int64 tensor of shape `(sentences + 1,)`. Where each sentence
            starts (`TokenizedDocuments.sentence_starts`).
        document_starts: int64 tensor of shape `(documents + 1,)`. Where each
            document starts (`TokenizedDocuments.document_starts`).
        max_length: int. The length of every pair, padded with `[PAD]`.
        seed: int. With `epoch` and the pair's index, decides everything
            random.
        epoch: int. Another epoch gives other pairs.
        short_sequence_probability: float. The probability of a shorter
            target length.
        next_probability: float. The probability that B follows A (IsNext).
        first_index: int. Added to every index `make_pair` is given.
            Defaults to 0.

    Returns:
        A function `make_pair(index)` of an int64 scalar, giving one pair as
        `sentence_pairs` does.
    """
    counts = document_starts[1:] - document_starts[:-1]
    sentence_document = tf.repeat(tf.range(tf.size(counts, tf.int64)), counts)
    anchors = tf.where(sentence_document[:-1] == sentence_document[1:])[:, 0]
    num_documents = tf.size(document_starts, tf.int64) - 1
    max_tokens = max_length - 3

    def sentences(first, end):
        return ids[starts[first] : starts[end]]

    def chunk_end(first, document_end, target):
        """The end of the sentences from `first` that reach `target` tokens (at least one)."""
        lengths = starts[first + 1 : document_end + 1] - starts[first:document_end]
        reached = tf.reduce_sum(tf.cast(tf.cumsum(lengths) < target, tf.int64)) + 1
        return first + tf.minimum(reached, document_end - first)

    def make_pair(index):
        index = first_index + index
        keys = tf.random.experimental.stateless_split(_key(seed, epoch, index, _PAIR), 8)
        uniform = lambda key, low, high: tf.random.stateless_uniform(  # noqa: E731
            [], key, low, high, dtype=tf.int64
        )
        short = tf.random.stateless_uniform([], keys[0]) < short_sequence_probability
        target = tf.where(
            short, uniform(keys[1], 2, max_tokens + 1), tf.constant(max_tokens, tf.int64)
        )
        first = tf.gather(anchors, uniform(keys[2], 0, tf.size(anchors, tf.int64)))
        document = sentence_document[first]
        end = chunk_end(first, document_starts[document + 1], target)
        end = tf.maximum(end, first + 2)  # anchors have a successor
        a_end = first + uniform(keys[3], 1, end - first)
        tokens_a = sentences(first, a_end)
        random_next = tf.random.stateless_uniform([], keys[4]) >= next_probability

        other = uniform(keys[5], 0, num_documents - 1)
        other += tf.cast(other >= document, tf.int64)
        b_random = uniform(keys[6], document_starts[other], document_starts[other + 1])
        b_random_end = chunk_end(
            b_random,
            document_starts[other + 1],
            tf.maximum(target - tf.size(tokens_a, tf.int64), 1),
        )
        b_first = tf.where(random_next, b_random, a_end)
        b_end = tf.where(random_next, b_random_end, end)
        tokens_a, tokens_b = _truncate_pair(
            tokens_a, sentences(b_first, b_end), max_tokens, keys[7]
        )
        token_ids = tf.concat([[CLS_ID], tokens_a, [SEP_ID], tokens_b, [SEP_ID]], 0)
        segment_ids = tf.concat(
            [
                tf.zeros([tf.size(tokens_a) + 2], tf.int32),
                tf.ones([tf.size(tokens_b) + 1], tf.int32),
            ],
            0,
        )
        padding = [[0, max_length - tf.size(token_ids)]]
        return {
            "token_ids": tf.ensure_shape(tf.pad(token_ids, padding), [max_length]),
            "segment_ids": tf.ensure_shape(tf.pad(segment_ids, padding), [max_length]),
            "next_sentence_label": tf.cast(random_next, tf.int32),
            "last_a_sentence": a_end - 1,
            "first_b_sentence": b_first,
            "index": index,
        }

    return make_pair


def _key(seed, epoch, index, salt):
    """The stateless random key of one pair's `salt` stream."""
    key = tf.stack([tf.constant(seed, tf.int64), tf.cast(epoch, tf.int64)])
    key = tf.random.experimental.stateless_fold_in(key, index)
    return tf.random.experimental.stateless_fold_in(key, salt)


def _truncate_pair(tokens_a, tokens_b, max_tokens, key):
    """Cuts the longer segment, a token at a time from its front or back, until both fit.

    Removing one token from the longer segment (B on ties) until the total
    is `max_tokens` removes, from equal lengths on, alternately from B and A:
    that count is computed directly; which end each token leaves from is a
    fair coin, so the count from the front is binomial.
    """
    length_a, length_b = tf.size(tokens_a), tf.size(tokens_b)
    excess = tf.maximum(length_a + length_b - max_tokens, 0)
    equalize = tf.minimum(excess, tf.abs(length_a - length_b))
    rest = excess - equalize
    remove_a = tf.where(length_a > length_b, equalize, 0) + rest // 2
    remove_b = tf.where(length_a > length_b, 0, equalize) + rest - rest // 2
    keys = tf.random.experimental.stateless_split(key, 2)

    def cut(tokens, remove, key):
        front = tf.random.stateless_binomial(
            [], key, tf.cast(remove, tf.float32), 0.5, output_dtype=tf.int32
        )
        return tokens[front : tf.size(tokens) - (remove - front)]

    return cut(tokens_a, remove_a, keys[0]), cut(tokens_b, remove_b, keys[1])


def default_max_predictions(mask_rate, max_length):
    """The most masked tokens per pair that never cut `mask_rate`: the
    rate of `max_length`, rounded up.

    BERT's `max_predictions_per_seq`: 20 for 128 tokens at 15%.

    Args:
        mask_rate: float. The fraction of tokens masked.
        max_length: int. The length of a pair, in tokens.

    Returns:
        int, at least 1.
    """
    return max(1, math.ceil(round(mask_rate * max_length, 6)))


def masker(
    vocabulary,
    max_predictions,
    mask_rate=0.15,
    whole_word=False,
    seed=0,
    epoch=0,
):
    """A function that masks one pair for the masked language model (BERT, 3.1).

    `mask_rate` of the pair's tokens that are not `[CLS]`, `[SEP]` or
    `[PAD]` (rounded, at least one, at most `max_predictions`) are chosen
    at random; each becomes `[MASK]` with probability 0.8, a random
    non-special token with probability 0.1, and stays itself otherwise.
    With `whole_word`, all pieces of a word (a token and the `##` pieces
    after it) are chosen together: words are taken in random order while
    their pieces fit in the budget (the first word that does not fit ends
    the choice, so a pair may get slightly fewer predictions).

    Args:
        vocabulary: list of str. The tokens (for the vocabulary size and `##`
            pieces).
        max_predictions: int. The most tokens chosen per pair (BERT's
            `max_predictions_per_seq`); the labels are padded to it.
        mask_rate: float. The fraction of tokens chosen. Defaults to 0.15.
        whole_word: bool. Whether whole words are chosen. Defaults to False.
        seed: int. With `epoch` and the pair's index, decides the mask.
            Defaults to 0.
        epoch: int. Another epoch gives other masks. Defaults to 0.

    Returns:
        `mask(pair) -> (features, labels)` for `Dataset.map` over
        `sentence_pairs`: features `token_ids` (masked), `segment_ids`,
        `mask_positions` int32 `(max_predictions,)`; labels `mlm_labels`
        int32 `(max_predictions,)` (the original tokens), `mlm_weights`
        float32 (1 for a real prediction, 0 for padding), `nsp_labels` int32.
    """
    vocabulary_size = len(vocabulary)
    continuation = tf.constant([token.startswith(SUBWORD_PREFIX) for token in vocabulary])
    first_regular = len(SPECIAL_TOKENS)

    def mask(pair):
        token_ids = pair["token_ids"]
        length = tf.size(token_ids)
        keys = tf.random.experimental.stateless_split(_key(seed, epoch, pair["index"], _MASK), 3)
        candidate = (token_ids >= first_regular) | tf.equal(token_ids, UNK_ID)
        count = tf.reduce_sum(tf.cast(candidate, tf.int32))
        budget = tf.cast(tf.round(tf.cast(count, tf.float32) * mask_rate), tf.int32)
        budget = tf.minimum(tf.minimum(tf.maximum(budget, 1), max_predictions), count)

        if whole_word:
            piece = tf.gather(continuation, token_ids) & candidate
            previous_candidate = tf.concat([[False], candidate[:-1]], 0)
            starts = candidate & ~(piece & previous_candidate)
            unit = tf.maximum(tf.cumsum(tf.cast(starts, tf.int32)) - 1, 0)
        else:
            unit = tf.range(length)
        score = tf.gather(tf.random.stateless_uniform([length], keys[0]), unit)
        score = tf.where(candidate, score, 2.0)  # special tokens last, never chosen
        unit = tf.where(candidate, unit, length)  # and in no word
        order = tf.argsort(score, stable=True)  # words in random order, their pieces in order
        sorted_unit = tf.gather(unit, order)
        counted = tf.cumsum(tf.cast(tf.gather(candidate, order), tf.int32))
        # A word is taken when its last piece still fits in the budget.
        word_end = tf.math.unsorted_segment_max(counted, sorted_unit, length + 1)
        take = (tf.gather(word_end, sorted_unit) <= budget) & tf.gather(candidate, order)
        chosen = tf.scatter_nd(order[:, None], tf.cast(take, tf.int32), [length]) > 0

        positions = tf.cast(tf.where(chosen)[:, 0], tf.int32)
        action = tf.random.stateless_uniform([length], keys[1])
        random_token = tf.random.stateless_uniform(
            [length], keys[2], first_regular, vocabulary_size, dtype=tf.int32
        )
        replaced = tf.where(action < 0.8, MASK_ID, tf.where(action < 0.9, random_token, token_ids))
        masked = tf.where(chosen, replaced, token_ids)
        padding = [[0, max_predictions - tf.size(positions)]]
        features = {
            "token_ids": masked,
            "segment_ids": pair["segment_ids"],
            "mask_positions": tf.ensure_shape(tf.pad(positions, padding), [max_predictions]),
        }
        labels = {
            "mlm_labels": tf.ensure_shape(
                tf.pad(tf.gather(token_ids, positions), padding), [max_predictions]
            ),
            "mlm_weights": tf.ensure_shape(
                tf.pad(tf.ones_like(positions, tf.float32), padding), [max_predictions]
            ),
            "nsp_labels": pair["next_sentence_label"],
        }
        return features, labels

    return mask


def pretraining_dataset(
    corpus,
    preprocessor,
    batch_size,
    max_predictions=None,
    num_pairs=None,
    seed=0,
    epoch=0,
    mask_rate=0.15,
    whole_word=False,
    short_sequence_probability=0.1,
    next_probability=0.5,
    drop_remainder=True,
):
    """Batches of masked sentence pairs: one epoch of BERT pretraining.

    The preprocessor the model reads text with at inference gives the
    vocabulary (the tokens masking draws from) and the tokens per pair; the
    pairs are packed here, not by its `pack`: pretraining samples sentence
    pairs and trims the longer one from either end at random (BERT's
    `truncate_seq_pair`), where inference cuts at the end.

    Args:
        corpus: pipelines.pretraining.TokenizedDocuments. The corpus,
            tokenized by `preprocessor.tokenizer`.
        preprocessor: pipelines.preprocessors.BertPreprocessor. Gives the
            vocabulary and `max_length`.
        batch_size: int. Pairs per batch.
        max_predictions: int. The most masked tokens per pair; `None` for
            `default_max_predictions`. Defaults to None.
        num_pairs: int. Pairs in the epoch; `None` for `pairs_per_epoch`.
            Defaults to None.
        seed: int. The data's seed. Defaults to 0.
        epoch: int. The epoch, for new pairs and masks. Defaults to 0.
        mask_rate: float. The fraction of tokens masked (see `masker`).
            Defaults to 0.15.
        whole_word: bool. Whether whole words are masked (see `masker`).
            Defaults to False.
        short_sequence_probability: float. The probability of a shorter
            target length (see `sentence_pairs`). Defaults to 0.1.
        next_probability: float. The probability that B follows A (see
            `sentence_pairs`). Defaults to 0.5.
        drop_remainder: bool. Whether a last, smaller batch is dropped.
            Defaults to True.

    Returns:
        A `tf.data.Dataset` of `(features, labels)` batches (see `masker`),
        of known length.

    Raises:
        ValueError: as `sentence_pairs`.

    Example:

        >>> from pipelines.preprocessors import BertPreprocessor
        >>> from pipelines.synthetic_documents import document_corpus
        >>> from pipelines.tokenizers import WordPieceTokenizer, learn_wordpiece_vocabulary
        >>> documents = document_corpus(200)
        >>> tokenizer = WordPieceTokenizer(learn_wordpiece_vocabulary(sum(documents, []), 500))
        >>> corpus = tokenize_documents(documents, tokenizer)
        >>> preprocessor = BertPreprocessor(tokenizer, max_length=128)
        >>> data = pretraining_dataset(corpus, preprocessor, batch_size=32)
        >>> features, labels = next(iter(data))
        >>> features["token_ids"].shape, labels["mlm_labels"].shape
        (TensorShape([32, 128]), TensorShape([32, 20]))
    """
    max_length, vocabulary = preprocessor.max_length, preprocessor.tokenizer.vocabulary
    num_pairs = num_pairs or pairs_per_epoch(corpus, max_length)
    pairs = sentence_pairs(
        corpus,
        max_length,
        num_pairs,
        seed=seed,
        epoch=epoch,
        short_sequence_probability=short_sequence_probability,
        next_probability=next_probability,
    )
    max_predictions = max_predictions or default_max_predictions(mask_rate, max_length)
    mask = masker(vocabulary, max_predictions, mask_rate, whole_word, seed=seed, epoch=epoch)
    batches = pairs.map(mask, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
    return prefetched(batches.batch(batch_size, drop_remainder=drop_remainder))


def pretraining_epochs(corpus, preprocessor, **settings):
    """`epoch -> pretraining_dataset(..., epoch=epoch)`: the runner's training data.

    Args:
        corpus: pipelines.pretraining.TokenizedDocuments. The corpus.
        preprocessor: pipelines.preprocessors.BertPreprocessor. As
            `pretraining_dataset`.
        **settings: the other arguments of `pretraining_dataset` but
            `epoch`.

    Returns:
        A function `epoch -> tf.data.Dataset` of that epoch's batches.
    """
    return lambda epoch: pretraining_dataset(corpus, preprocessor, epoch=epoch, **settings)
