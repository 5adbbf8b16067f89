"""The tf.data pipeline of translation: sentence pairs → padded id batches.

    strings ─batch(1024)─► tokenize, truncate, add BOS/EOS, pad (in the graph)
            ─unbatch─► cache ─► shuffle ─► repeat ─► sort pools by length
            ─► batch ─► trim padding columns ─► ({"source", "target_in"},
            target_out) ─► prefetch

All the work is vectorized: strings are tokenized 1024 at a time (ragged
ids, padded to a dense batch before unbatching), and bucketing sorts pools
of shuffled pairs by length and cuts each pool into batches (the "sorted
pools" of fairseq and tensor2tensor) instead of calling a function per pair
as `Dataset.bucket_by_sequence_length` (`group_by_window`) does. On
Multi30k (2 cores) the first epoch runs at about 40,000 pairs/s and later
epochs, served from the cache, at 80,000-100,000 pairs/s, with 8% padding;
`bucket_by_sequence_length` gives 25,000-35,000 pairs/s and 9.5%.

Between the unbatch and the final trim, each row keeps the padding of its
tokenization batch (up to the longest of its 1024 neighbours): per-row
slicing would cost a function call per pair and halve the speed. The cache
and the shuffle buffer therefore hold about 3 times the ids of the corpus
(about 0.75 GB for a million pairs of 20 tokens).

A corpus too large for that (`streamed_translation_epochs`, over a
`pipelines.streaming.ShardedCorpus`) is read anew every epoch instead:

    shards, in the epoch's order ─► check, strip ─► shuffle strings (262,144)
            ─► tokenize as above ─► sort pools ─► batches (no cache)

or, from shards tokenized once (`pipelines.prepared`), the same batches:

    prepared shards, in that order ─► shuffle records ─► parse, cut,
    add BOS/EOS ─► sort pools ─► batches

(4.5M pairs: 11.7 s to the first batch and 1.3 GB at most, where the cached
pipeline took 82 s and 11 GB: `benchmarks/corpus_scale.py`.)
"""

import numpy as np
import tensorflow as tf

from pipelines import prepared
from pipelines.prefetch import prefetched
from pipelines.preprocessors import TranslationPreprocessor
from pipelines.tokenizers import PAD_ID

_TOKENIZE_BATCH = 1024
# With a token budget, batch columns are counted in steps of this many ids.
BUDGET_GRANULARITY = 8
_TOP_UP = 1  # the seed key of the extra pass that tops up a short epoch
# Bucketing sorts pools of this many batches; more means less padding but
# longer runs of batches drawn from the same stretch of the shuffled data.
POOL_BATCHES = 64
# A streamed corpus is shuffled through a buffer of this many pairs (of strings).
SHUFFLE_PAIRS = 2**18
# With a token budget, a streamed epoch's length is estimated from this many batches.
ESTIMATE_BATCHES = 256


def translation_dataset(
    sources,
    targets,
    source_tokenizer,
    target_tokenizer,
    batch_size,
    max_length,
    shuffle=True,
    seed=0,
    bucket=True,
    cache=True,
    repeat=False,
    drop_remainder=False,
    reshuffle_each_iteration=True,
    length_multiple=1,
    batch_tokens=None,
):
    """Batches of token ids for teacher-forced training of a translator.

    Every pair becomes `source` = source tokens, `target_in` = `[BOS]` +
    target tokens and `target_out` = target tokens + `[EOS]`, each cut to
    `max_length` ids and padded with `PAD_ID` (0) at the end.

    Args:
        sources: list of str. The source sentences.
        targets: list of str. The target sentences, `targets[i]` the
            translation of `sources[i]`.
        source_tokenizer: pipelines.tokenizers.SubwordTokenizer, list of str or
            dict. A `SubwordTokenizer` (`WordPieceTokenizer`,
            `SentencePieceTokenizer`, `MarianTokenizer`), or what a
            `TranslationPreprocessor` rebuilds one from: a WordPiece
            vocabulary (a list of tokens) or a tokenizer's `spec`.
        target_tokenizer: pipelines.tokenizers.SubwordTokenizer, list of str or
            dict. The same for the targets.
        batch_size: int. Pairs per batch (with `batch_tokens`: the most pairs
            a batch may hold).
        max_length: int. The longest `source` and `target_in`/`target_out`
            rows, at least 1.
        shuffle: bool. Whether the pairs are shuffled (whole-dataset buffer)
            with `seed`. Defaults to True.
        seed: int. The seed of the shuffles. The order is a function of
            `seed` and TensorFlow's global seed (`keras.utils.set_random_seed`).
            Defaults to 0.
        bucket: bool. Whether pairs of similar length are batched together,
            so that little padding is needed: pools of
            `POOL_BATCHES * batch_size` pairs are sorted by length, cut into
            batches, and the batches of a pool are shuffled. Otherwise
            batches follow the (shuffled) order. Defaults to True.
        cache: bool. Whether the tokenized pairs are kept in memory after the
            first pass. Defaults to True.
        repeat: bool. Whether the dataset repeats forever (epochs are then
            separated by `steps_per_epoch`). Defaults to False.
        drop_remainder: bool. Whether the last, smaller batch is dropped;
            batches then have a static batch size. Defaults to False.
        reshuffle_each_iteration: bool. Whether every epoch has a new order
            (still determined by `seed`). Defaults to True.
        length_multiple: int. Each batch's columns are padded up to a
            multiple of this (never beyond `max_length`), so a batch has one
            of few shapes: XLA compiles one program per shape. Defaults to 1.
        batch_tokens: int. A budget of ids instead of a number of pairs (the
            `--max-tokens` of fairseq): each batch holds as many pairs of
            similar length as fit in `rows x columns <= batch_tokens`,
            columns being the longer side's padded length rounded up to a
            multiple of 8 (of `length_multiple` when that is larger), at most
            `max_length` (a pair longer than the budget gets a batch of its
            own). Needs `bucket` and no `drop_remainder`; batches then have
            varying sizes, and the dataset does not declare its length
            (`translation_epochs` does). `None` for batches of `batch_size`
            pairs. Defaults to None.

    Returns:
        A `tf.data.Dataset` of `({"source": (B, S), "target_in": (B, T)},
        target_out (B, T))`, all int32, `S, T <= max_length`.

    Raises:
        ValueError: when `sources` and `targets` differ in length, when
            `max_length`, `batch_tokens` or `length_multiple` is below 1, or
            when `batch_tokens` is given without `bucket` or with
            `drop_remainder`.

    Example:

        >>> from pipelines.synthetic import translation_corpus
        >>> from pipelines.tokenizers import WordPieceTokenizer, learn_wordpiece_vocabulary
        >>> corpus = translation_corpus(train_size=200)["train"]
        >>> vocabulary = learn_wordpiece_vocabulary(corpus.sources + corpus.targets)
        >>> tokenizer = WordPieceTokenizer(vocabulary)
        >>> dataset = translation_dataset(corpus.sources, corpus.targets, tokenizer, tokenizer,
        ...                               batch_size=64, max_length=64)
        >>> inputs, target_out = next(iter(dataset))
        >>> len(inputs["source"]), inputs["target_in"].shape == target_out.shape
        (64, True)
    """
    _check(
        sources, targets, max_length, "translation_dataset", bucket, drop_remainder, batch_tokens
    )
    pairs = _tokenized_pairs(
        sources, targets, source_tokenizer, target_tokenizer, max_length, cache
    )
    batches = _batches(
        pairs,
        len(sources),
        batch_size,
        shuffle,
        seed,
        bucket,
        repeat,
        drop_remainder,
        reshuffle_each_iteration,
        _width(max_length, length_multiple),
        _budget(batch_tokens, max_length, length_multiple),
    )
    return (
        batches
        if repeat or batch_tokens
        else _declared(batches, len(sources), batch_size, drop_remainder)
    )


def translation_epochs(
    sources,
    targets,
    source_tokenizer,
    target_tokenizer,
    batch_size,
    max_length,
    seed=0,
    bucket=True,
    drop_remainder=False,
    length_multiple=1,
    batch_tokens=None,
):
    """`translation_dataset` one epoch at a time, each epoch in an order of its own.

    The pairs are tokenized once and cached; `epochs(e)` shuffles and
    batches them in an order that is a function of `seed`, `e` and
    TensorFlow's global seed only: the same in every process and every
    time. A training run that resumes in the middle of epoch `e` therefore
    sees the batches it had not seen yet, and every worker of a cluster sees
    the same global batches.

    With `batch_tokens` the number of batches of a shuffled pass varies a
    little with the order, so every epoch is cut (or topped up from another
    pass) to the number of batches of epoch 0's pass: the runner needs epochs
    of one declared length.

    Epochs are always shuffled, and never repeated.

    Args:
        sources: list of str. The source sentences.
        targets: list of str. The target sentences, `targets[i]` the
            translation of `sources[i]`.
        source_tokenizer: pipelines.tokenizers.SubwordTokenizer, list of str or
            dict. The source tokenizer, as in `translation_dataset`.
        target_tokenizer: pipelines.tokenizers.SubwordTokenizer, list of str or
            dict. The same for the targets.
        batch_size: int. Pairs per batch (with `batch_tokens`: the most pairs
            a batch may hold).
        max_length: int. The longest `source` and `target_in`/`target_out`
            rows, at least 1.
        seed: int. The seed of the shuffles, as in `translation_dataset`.
            Defaults to 0.
        bucket: bool. Whether pairs of similar length are batched together,
            as in `translation_dataset`. Defaults to True.
        drop_remainder: bool. Whether the last, smaller batch of an epoch is
            dropped. Defaults to False.
        length_multiple: int. Each batch's columns are padded up to a
            multiple of this, as in `translation_dataset`. Defaults to 1.
        batch_tokens: int. A budget of ids per batch instead of a number of
            pairs, as in `translation_dataset`; `None` for batches of
            `batch_size` pairs. Defaults to None.

    Returns:
        A function `epoch -> tf.data.Dataset` of that epoch's batches.

    Raises:
        ValueError: as `translation_dataset`.

    Example:

        >>> from pipelines.synthetic import translation_corpus
        >>> from pipelines.tokenizers import WordPieceTokenizer, learn_wordpiece_vocabulary
        >>> corpus = translation_corpus(train_size=200)["train"]
        >>> vocabulary = learn_wordpiece_vocabulary(corpus.sources + corpus.targets)
        >>> tokenizer = WordPieceTokenizer(vocabulary)
        >>> epochs = translation_epochs(
        ...     corpus.sources, corpus.targets, tokenizer, tokenizer, 64, 64
        ... )
        >>> remaining = epochs(3).skip(2)  # epoch 3 after its first 2 steps
        >>> len(epochs(3)), len(remaining)
        (4, 2)
    """
    _check(sources, targets, max_length, "translation_epochs", bucket, drop_remainder, batch_tokens)
    pairs = _tokenized_pairs(sources, targets, source_tokenizer, target_tokenizer, max_length, True)

    def shuffled_pass(*key):
        return _batches(
            pairs,
            len(sources),
            batch_size,
            True,
            _pass_seed(seed, key),
            bucket,
            False,
            drop_remainder,
            False,
            _width(max_length, length_multiple),
            _budget(batch_tokens, max_length, length_multiple),
        )

    if batch_tokens is None:
        return lambda epoch: _declared(
            shuffled_pass(epoch), len(sources), batch_size, drop_remainder
        )
    return _of_length(shuffled_pass, int(shuffled_pass(0).reduce(0, lambda count, _: count + 1)))


def streamed_translation_epochs(
    corpus,
    pairs,
    source_tokenizer,
    target_tokenizer,
    batch_size,
    max_length,
    seed=0,
    length_multiple=1,
    batch_tokens=None,
    shuffle_buffer=SHUFFLE_PAIRS,
    worker=0,
    workers=1,
):
    """`translation_epochs` over a corpus too large for memory, read as a stream every epoch.

    Each pass reads the shards of `corpus` in an order of its own, shuffles
    the pairs through a buffer of `shuffle_buffer` (nothing else is held),
    tokenizes them and cuts sorted pools into batches as `translation_epochs`
    does; all of it a function of `seed` and the epoch. For a corpus of one
    shard and no more pairs than the buffer holds, the batches are those of
    `translation_epochs` on the same pairs read into memory.

    An epoch has a declared number of batches: `ceil(pairs / batch_size)`,
    or with `batch_tokens` the pairs over the mean pairs a batch of the first
    `ESTIMATE_BATCHES` batches (of worker 0; counting them all would read the corpus);
    an epoch is cut to that number or topped up from another pass.

    Args:
        corpus: pipelines.streaming.ShardedCorpus or
            pipelines.prepared.PreparedCorpus. The corpus, or a
            `PreparedCorpus` of it (the same batches, without tokenizing).
        pairs: int. Its usable pairs (`corpus.scan().pairs`, or an estimate:
            `corpus.estimated_pairs()`), on this worker.
        source_tokenizer: pipelines.tokenizers.SubwordTokenizer, list of str or
            dict. The source tokenizer, as in `translation_dataset` (unused
            for a `PreparedCorpus`).
        target_tokenizer: pipelines.tokenizers.SubwordTokenizer, list of str or
            dict. The same for the targets.
        batch_size: int. Pairs per batch (with `batch_tokens`: the most pairs
            a batch may hold).
        max_length: int. The longest `source` and `target_in`/`target_out`
            rows.
        seed: int. The seed of the shards' order and of the shuffles.
            Defaults to 0.
        length_multiple: int. Each batch's columns are padded up to a
            multiple of this, as in `translation_dataset`. Defaults to 1.
        batch_tokens: int. A budget of ids per batch instead of a number of
            pairs, as in `translation_dataset`; `None` for batches of
            `batch_size` pairs. Defaults to None.
        shuffle_buffer: int. The pairs (of strings) the shuffle buffer
            holds. Defaults to `SHUFFLE_PAIRS` (262,144).
        worker: int. This process's index among `workers`: it reads its
            part of the corpus (`ShardedCorpus.pairs`). Defaults to 0.
        workers: int. The number of processes that read the corpus.
            Defaults to 1.

    Returns:
        A function `epoch -> tf.data.Dataset` of that epoch's batches.

    Raises:
        ValueError: when `length_multiple` is below 1.
    """
    budget = _budget(batch_tokens, max_length, length_multiple)

    prepared_ids = isinstance(corpus, prepared.PreparedCorpus)

    def shuffled_pass(*key, part=worker):
        pass_seed = _pass_seed(seed, key)
        if prepared_ids:
            strings = corpus.records(order_seed=pass_seed, worker=part, workers=workers)
        else:
            strings = corpus.pairs(order_seed=pass_seed, worker=part, workers=workers)
        # Strings are shuffled, not ids: the buffer fills at reading speed
        # and holds a third of the bytes. A pass that tops up an epoch
        # gives a few batches: a pool's worth of buffer fills fast enough.
        buffer = POOL_BATCHES * batch_size if _TOP_UP in key[1:] else shuffle_buffer
        strings = strings.shuffle(
            min(buffer, max(pairs, 1)), seed=pass_seed, reshuffle_each_iteration=False
        )
        if prepared_ids:
            ids = prepared.tokenized(strings, max_length)
        else:
            ids = _tokenized(strings, source_tokenizer, target_tokenizer, max_length)
        return _batches(
            ids,
            pairs,
            batch_size,
            True,
            pass_seed,
            True,
            False,
            False,
            False,
            _width(max_length, length_multiple),
            budget,
            shuffled=True,
        )

    if budget is None:
        return _of_length(shuffled_pass, -(-pairs // batch_size))
    # Every worker estimates from worker 0's part: all then declare epochs of one length.
    sample = (
        shuffled_pass(0, part=0)
        .take(ESTIMATE_BATCHES)
        .map(lambda inputs, _: tf.shape(inputs["source"])[0])
    )
    sizes = list(sample.as_numpy_iterator())
    return _of_length(shuffled_pass, max(1, round(pairs * len(sizes) / sum(sizes))))


def _of_length(shuffled_pass, steps):
    """`epoch -> ` the first `steps` batches of `shuffled_pass(epoch)`, topped up from another pass
    (again as often as needed) if short."""

    def epoch_batches(epoch):
        batches = shuffled_pass(epoch).concatenate(shuffled_pass(epoch, _TOP_UP).repeat())
        return batches.take(steps).apply(tf.data.experimental.assert_cardinality(steps))

    return epoch_batches


def _pass_seed(seed, key):
    """The seed of one shuffled pass over the data, keyed by the
    epoch (and `_TOP_UP` for a top-up).
    """
    return int(np.random.SeedSequence([seed, *key]).generate_state(1)[0])


def _check(sources, targets, max_length, caller, bucket, drop_remainder, batch_tokens):
    if len(sources) != len(targets):
        raise ValueError(f"{caller}: {len(sources)} sources but {len(targets)} targets.")
    if max_length < 1:
        raise ValueError(f"{caller}: max_length must be >= 1, got {max_length}.")
    if batch_tokens is not None:
        if batch_tokens < 1:
            raise ValueError(f"{caller}: batch_tokens must be >= 1, got {batch_tokens}.")
        if not bucket or drop_remainder:
            raise ValueError(f"{caller}: batch_tokens needs bucket=True and drop_remainder=False.")


def _tokenized_pairs(sources, targets, source_tokenizer, target_tokenizer, max_length, cache):
    """`(source, target_in, target_out)` id rows, one a pair, in corpus order."""
    strings = tf.data.Dataset.from_tensor_slices(
        (tf.constant(list(sources), tf.string), tf.constant(list(targets), tf.string))
    )
    dataset = _tokenized(strings, source_tokenizer, target_tokenizer, max_length)
    return dataset.cache() if cache else dataset


def _tokenized(strings, source_tokenizer, target_tokenizer, max_length):
    """`(source, target_in, target_out)` id rows of a dataset of
    `(source, target)` strings, in its order.
    """
    preprocessor = TranslationPreprocessor(source_tokenizer, target_tokenizer, max_length)

    def tokenize(source_text, target_text):
        # Dense (B, L) rows: unbatching ragged rows is several times slower.
        ids = preprocessor(source_text, target_text)
        return ids["source"], ids["target_in"], ids["target_out"]

    dataset = strings.batch(_TOKENIZE_BATCH)
    dataset = dataset.map(tokenize, num_parallel_calls=tf.data.AUTOTUNE)
    return dataset.unbatch()


def _batches(
    pairs,
    count,
    batch_size,
    shuffle,
    seed,
    bucket,
    repeat,
    drop_remainder,
    reshuffle,
    width,
    budget=None,
    shuffled=False,
):
    """Shuffled, bucketed, padded and trimmed batches of `count` tokenized pairs.

    `width(length)` is the number of columns of a batch whose longest row has `length` ids
    (`None`: that length); `budget` a `_Budget` (batches by tokens) or `None`; `shuffled`: the
    pairs come shuffled already (only the batches of each pool are).
    """
    dataset = pairs
    if shuffle and not shuffled:  # with a whole-dataset buffer
        dataset = dataset.shuffle(max(count, 1), seed=seed, reshuffle_each_iteration=reshuffle)
    if repeat:
        dataset = dataset.repeat()
    if bucket:
        dataset = _sorted_pool_batches(
            dataset, batch_size, drop_remainder, shuffle, seed, reshuffle, budget
        )
    else:
        dataset = dataset.padded_batch(
            batch_size,
            padding_values=(PAD_ID, PAD_ID, PAD_ID),
            drop_remainder=drop_remainder,
        )
    dataset = dataset.map(
        lambda s, t_in, t_out: (
            {"source": _trim(s, width), "target_in": _trim(t_in, width)},
            _trim(t_out, width),
        ),
        num_parallel_calls=tf.data.AUTOTUNE,
    )
    return prefetched(dataset)


def _declared(batches, count, batch_size, drop_remainder):
    """`batches` of `count` pairs by `batch_size`, declaring their number.

    Pools hold a whole number of batches, so bucketing makes as many batches
    as plain batching; declaring it gives Keras's progress bar its length
    from the first epoch on.
    """
    steps = count // batch_size if drop_remainder else -(-count // batch_size)
    return batches.apply(tf.data.experimental.assert_cardinality(steps))


def _sorted_pool_batches(
    dataset, batch_size, drop_remainder, shuffle, seed, reshuffle, budget=None
):
    """Batches of similar length: sorts pools of pairs, then cuts them."""
    pool_size = POOL_BATCHES * (batch_size if budget is None else budget.pool_rows(batch_size))

    def batches_of_pool(source, target_in, target_out):
        # (P, S), (P, T), (P, T) padded to the pool's longest. Ids are never
        # PAD inside a row (target_in starts with BOS), so lengths are counts.
        source_lengths = _lengths(source)
        target_lengths = _lengths(target_in)
        longer = tf.maximum(source_lengths, target_lengths)
        shorter = tf.minimum(source_lengths, target_lengths)
        order = tf.argsort(longer * (tf.reduce_max(shorter) + 1) + shorter, stable=True)
        source, target_in, target_out = (
            tf.gather(ids, order) for ids in (source, target_in, target_out)
        )
        if budget is None:
            starts = tf.range(0, tf.shape(source)[0], batch_size)
            ends = tf.minimum(starts + batch_size, tf.shape(source)[0])
            sizes = ends - starts
        else:
            starts, ends, sizes = budget.cuts(tf.gather(longer, order), batch_size)

        def batch(start, end, size):
            ids = source[start:end], target_in[start:end], target_out[start:end]
            if budget is None or not budget.fixed_rows:
                return ids
            # Rows of padding complete a short batch (their ids are all PAD, which no loss counts).
            return tuple(
                tf.pad(x, [[0, size - (end - start)], [0, 0]], constant_values=PAD_ID) for x in ids
            )

        return tf.data.Dataset.from_tensor_slices((starts, ends, sizes)).map(batch)

    dataset = dataset.padded_batch(pool_size, padding_values=(PAD_ID, PAD_ID, PAD_ID))
    dataset = dataset.flat_map(batches_of_pool)
    if drop_remainder:
        dataset = dataset.filter(lambda s, t_in, t_out: tf.shape(s)[0] == batch_size)
        dataset = dataset.map(
            lambda *ids: tuple(tf.ensure_shape(x, [batch_size, None]) for x in ids)
        )
    if shuffle:  # sorted pools emit their batches shortest first: mix them
        dataset = dataset.shuffle(POOL_BATCHES, seed=seed, reshuffle_each_iteration=reshuffle)
    return dataset


class _Budget:
    """Cuts a pool of pairs sorted by length into batches of at most `tokens` ids."""

    def __init__(self, tokens, max_length, length_multiple):
        self.tokens = tokens
        self.max_length = max_length
        # Columns are counted as the batch will be padded
        # (`length_multiple`), at least in steps of 8.
        self.step = max(length_multiple, BUDGET_GRANULARITY)
        # Padded columns (for XLA) want few shapes: the last batch of a run of equal
        # column counts is then padded with empty rows to its run's number of pairs.
        self.fixed_rows = length_multiple > 1

    def pool_rows(self, batch_size):
        """Pairs per batch when every pair is as long as allowed: a pool holds at least
        `POOL_BATCHES` batches' worth.
        """
        return max(1, min(batch_size, self.tokens // self.max_length))

    def cuts(self, lengths, batch_size):
        """`(starts, ends, rows)` of the batches of a pool whose
        longer sides have the (sorted) `lengths`.
        """
        columns = tf.minimum(-(-lengths // self.step) * self.step, self.max_length)
        rows_per_batch = tf.clip_by_value(self.tokens // columns, 1, batch_size)
        index = tf.range(tf.shape(lengths)[0])
        # Each run of equal column counts is cut from its first pair on.
        run = tf.cumsum(tf.cast(tf.concat([[True], columns[1:] != columns[:-1]], 0), tf.int32)) - 1
        first_of_run = tf.gather(tf.math.segment_min(index, run), run)
        is_start = (index - first_of_run) % rows_per_batch == 0
        starts = tf.boolean_mask(index, is_start)
        ends = tf.concat([starts[1:], tf.shape(lengths)[:1]], 0)
        rows = tf.boolean_mask(rows_per_batch, is_start) if self.fixed_rows else ends - starts
        return starts, ends, rows


def most_pairs(batch_tokens):
    """The most pairs a batch of `batch_tokens` ids can hold (each counts 8 columns at least).

    Args:
        batch_tokens: int. The budget of ids of a batch.

    Returns:
        int, at least 1.
    """
    return max(1, batch_tokens // BUDGET_GRANULARITY)


def _budget(batch_tokens, max_length, length_multiple):
    return None if batch_tokens is None else _Budget(batch_tokens, max_length, length_multiple)


def _lengths(ids):
    return tf.math.count_nonzero(ids, axis=1, dtype=tf.int32)


def _trim(ids, width):
    """Drops the columns that are padding in every row, then pads to `width(longest row)`."""
    longest = tf.reduce_max(_lengths(ids))
    ids = ids[:, :longest]
    if width is None:
        return ids
    return tf.pad(ids, [[0, 0], [0, width(longest) - longest]], constant_values=PAD_ID)


def _width(max_length, multiple):
    """`length -> columns`: `length` rounded up to a multiple of `multiple`, at most
    `max_length`; `None` for `multiple` 1 (a batch keeps its own length)."""
    if multiple < 1:
        raise ValueError(f"length_multiple must be >= 1, got {multiple}.")
    if multiple == 1:
        return None
    return lambda length: tf.minimum(-(-length // multiple) * multiple, max_length)


def width_count(max_length, multiple):
    """How many column counts a batch can have with `length_multiple=multiple`.

    Args:
        max_length: int. The longest row.
        multiple: int. The `length_multiple` that batches are padded to.

    Returns:
        int, the number of widths.

    Example:

        >>> width_count(64, 8)  # 8, 16, ..., 64
        8
    """
    return -(-max_length // multiple)
