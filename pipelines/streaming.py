"""Corpora read as streams: many files (shards), never held whole in memory.

A corpus of WMT's or Wikipedia's size is one file, a glob or a folder of
shards, plain text or gzip. `ShardedCorpus` reads line-aligned source and
target shards, or TSV shards, through tf.data: a `TextLineDataset` a shard,
shards interleaved in a seeded order, every line checked and stripped as
`pipelines.text` checks and strips it, so a streamed corpus gives the pairs
`text.read_parallel` / `text.read_tsv` give, in the same order for one
shard (but for a carriage return inside a line, which `TextLineDataset`
drops where `text` keeps it).

A bad line stops the stream inside TensorFlow; `corpus.reported()` turns
that into the one-line `DataError` of `pipelines.text` (file, line, what is
wrong) by reading the shard at fault again in Python:

    data/shards/train-017.de.gz:4211: invalid UTF-8 (byte 0xff at column 5)
"""

import contextlib
import dataclasses
import glob
import itertools
import os
import re
import zlib

import numpy as np
import tensorflow as tf

from pipelines import text

# Lines are checked and stripped this many at a time.
_LINE_BATCH = 1024
# Shards read at once (each a TextLineDataset in the interleave).
READ_CYCLE = 8
# Python's `str.strip()` whitespace, as one RE2 class: a streamed line is stripped as a read one is.
_WHITESPACE = (
    "[" + "".join(f"\\x{{{ord(c):04x}}}" for c in map(chr, range(0x110000)) if c.isspace()) + "]"
)
_BYTE_ORDER_MARK = "^\\x{feff}"
# A bad line's assertion carries this and the shard's index, found
# again in TensorFlow's error message.
_BAD_SHARD = "keras-attn: bad input in shard"
_BAD_SHARD_PATTERN = re.compile(re.escape(_BAD_SHARD) + r"\] \[(\d+)\]")


def corpus_files(spec):
    """The files `spec` names: one file, a glob (`data/train-*.de.gz`)
    or a folder (its files, sorted).

    Args:
        spec: str or os.PathLike. A file, a glob or a folder.

    Returns:
        A list of `str` paths.

    Raises:
        DataError: when a glob matches no file, a folder holds no file, or
            the file is missing.

    Example:

        >>> os.makedirs("shards", exist_ok=True)
        >>> for name in ("b.txt", "a.txt"):
        ...     _ = open(os.path.join("shards", name), "w").write("text\\n")
        >>> [os.path.basename(path) for path in corpus_files("shards")]
        ['a.txt', 'b.txt']
    """
    spec = str(spec)
    if os.path.isdir(spec):
        files = sorted(
            os.path.join(spec, name)
            for name in os.listdir(spec)
            if not name.startswith(".") and os.path.isfile(os.path.join(spec, name))
        )
        if not files:
            raise text.DataError(f"{spec}: a folder without files")
        return files
    if glob.has_magic(spec):
        files = sorted(path for path in glob.glob(spec) if os.path.isfile(path))
        if not files:
            raise text.DataError(f"{spec}: no file matches")
        return files
    if not os.path.exists(spec):
        raise text.DataError(f"{spec}: file not found")
    return [spec]


@dataclasses.dataclass(frozen=True)
class Scan:
    """What one pass over a corpus found: `pairs` usable, `skipped_empty` with an empty side.

    Each argument is also an attribute of the same name.

    Args:
        pairs: int. The usable pairs.
        skipped_empty: int. The pairs with an empty side.
    """

    pairs: int
    skipped_empty: int


@dataclasses.dataclass(frozen=True)
class ShardedCorpus:
    """Sentence pairs in shards, read as a stream.

    Build one with `ShardedCorpus.parallel(source_spec, target_spec)`
    (line-aligned files: the i-th source shard with the i-th target shard,
    both sorted by name) or `ShardedCorpus.tsv(spec)`.

    Each argument is also an attribute of the same name.

    Args:
        shards: tuple of tuples of str. A tuple per shard:
            `(source_path, target_path)`, or `(tsv_path,)`.
        source_column: int. A TSV shard's source column (0-based). Defaults
            to 0.
        target_column: int. Its target column (0-based). Defaults to 1.

    Example:

        >>> _ = open("a.de", "w").write("Ein Hund.\\n\\n Zwei Katzen. \\n")
        >>> _ = open("a.en", "w").write("A dog.\\nA cat.\\nTwo cats.\\n")
        >>> corpus = ShardedCorpus.parallel("a.de", "a.en")
        >>> [(s.decode(), t.decode()) for s, t in corpus.pairs().as_numpy_iterator()]
        [('Ein Hund.', 'A dog.'), ('Zwei Katzen.', 'Two cats.')]
        >>> corpus.scan()
        Scan(pairs=2, skipped_empty=1)
    """

    shards: tuple
    source_column: int = 0
    target_column: int = 1

    @classmethod
    def parallel(cls, source_spec, target_spec):
        """A corpus of line-aligned files: the i-th source shard with the i-th target shard.

        Args:
            source_spec: str or os.PathLike. The source files: one file, a
                glob or a folder (`corpus_files`).
            target_spec: str or os.PathLike. The target files, the same way.

        Returns:
            A `ShardedCorpus`.

        Raises:
            DataError: as `corpus_files`, or when the two name different
                numbers of files.
        """
        sources, targets = corpus_files(source_spec), corpus_files(target_spec)
        if len(sources) != len(targets):
            raise text.DataError(
                f"{source_spec} names {len(sources)} files but {target_spec} names {len(targets)}"
            )
        return cls(tuple(zip(sources, targets)))

    @classmethod
    def tsv(cls, spec, source_column=0, target_column=1):
        """A corpus of TSV files, a sentence pair a line.

        Args:
            spec: str or os.PathLike. The files: one file, a glob or a
                folder (`corpus_files`).
            source_column: int. The source column (0-based). Defaults to 0.
            target_column: int. The target column (0-based). Defaults to 1.

        Returns:
            A `ShardedCorpus`.

        Raises:
            DataError: as `corpus_files`.
        """
        return cls(tuple((path,) for path in corpus_files(spec)), source_column, target_column)

    @property
    def is_tsv(self):
        """Whether the shards are TSV files, a bool."""
        return len(self.shards[0]) == 1

    def __str__(self):
        first = " and ".join(self.shards[0])
        return first if len(self.shards) == 1 else f"{len(self.shards)} shards ({first}, ...)"

    def pairs(self, order_seed=None, skip_empty=True, worker=0, workers=1):
        """A `tf.data.Dataset` of `(source, target)` strings, stripped.

        Args:
            order_seed: int. Shards are read in an order drawn with this
                seed; `None` for name order. Defaults to None.
            skip_empty: bool. Whether the pairs with an empty side are
                dropped (else they come as they are). Defaults to True.
            worker: int. This worker's index, of `workers`: with at least as
                many shards as workers, each reads the shards `worker`,
                `worker + workers`, ... of the order; otherwise every
                worker reads all and keeps every `workers`-th pair.
                Defaults to 0.
            workers: int. The number of workers. Defaults to 1.

        Returns:
            A `tf.data.Dataset` of `(source, target)` scalar strings.
        """
        pairs = interleaved(len(self.shards), self._read_shard, order_seed, worker, workers)
        return pairs.filter(_usable) if skip_empty else pairs

    def shard_pairs(self, index):
        """The usable pairs of shard `index`, in its order.

        Args:
            index: int. The shard's index in `shards`.

        Returns:
            A `tf.data.Dataset` of `(source, target)` scalar strings.
        """
        return self._read_shard(index).filter(_usable)

    def head(self, pairs):
        """A `text.ParallelCorpus` of the first usable pairs of each
        shard, `pairs` in all (or fewer), in memory.

        Args:
            pairs: int. The most pairs read.

        Returns:
            A `pipelines.text.ParallelCorpus`.

        Raises:
            DataError: when a line read is bad (as `reported`).
        """
        each = -(-pairs // len(self.shards))
        shards = tf.data.Dataset.range(len(self.shards))
        firsts = shards.interleave(
            lambda index: self._read_shard(index).filter(_usable).take(each),
            cycle_length=1,
            num_parallel_calls=tf.data.AUTOTUNE,
        )
        with self.reported():
            read = [
                (source.decode(), target.decode())
                for source, target in firsts.take(pairs).as_numpy_iterator()
            ]
        return text.ParallelCorpus(
            [source for source, _ in read],
            [target for _, target in read],
            source_origin=f"{self} (a sample)",
            target_origin=f"{self} (a sample)",
        )

    def estimated_pairs(self, sample_lines=10_000):
        """About how many pairs the corpus holds, without reading it: its (source) files' text bytes
        over the mean bytes of a line among the first `sample_lines` of its first shards.

        Args:
            sample_lines: int. The lines sampled, shared among the first
                (at most 4) shards. Defaults to 10000.

        Returns:
            int, at least 1.

        Raises:
            DataError: when a sampled shard cannot be read.
        """
        sampled = self.shards[:4]
        lines, sample_bytes = 0, 0
        for shard in sampled:
            try:
                with text.open_bytes(shard[0]) as stream:
                    for line in itertools.islice(stream, sample_lines // len(sampled)):
                        lines, sample_bytes = lines + 1, sample_bytes + len(line)
            except (OSError, EOFError, zlib.error):
                self._check_in_python(shard)  # raises the one-line DataError
                raise
        return max(
            1,
            round(
                sum(text.text_bytes(shard[0]) for shard in self.shards)
                * lines
                / max(sample_bytes, 1)
            ),
        )

    def scan(self):
        """Reads the whole corpus once: a `Scan` of its pairs; a bad line raises `DataError`.

        Returns:
            A `Scan`.

        Raises:
            DataError: when a line is bad (file, line, problem).
        """

        def count(totals, batch):
            empty = tf.reduce_sum(tf.cast(~_usable(*batch), tf.int64))
            return totals[0] + tf.size(batch[0], tf.int64) - empty, totals[1] + empty

        with self.reported():
            pairs, empty = (
                self.pairs(skip_empty=False)
                .batch(_LINE_BATCH)
                .reduce((tf.constant(0, tf.int64), tf.constant(0, tf.int64)), count)
            )
        return Scan(int(pairs), int(empty))

    @contextlib.contextmanager
    def reported(self):
        """Turns a bad line met by a stream of this corpus into
        `text.DataError` (file, line, problem).

        A context manager. A `tf.errors.OpError` raised inside it is raised
        again as it is when the shards read fine in Python.

        Raises:
            DataError: when a stream read inside it met a bad line.
        """
        try:
            yield
        except tf.errors.OpError as error:
            found = _BAD_SHARD_PATTERN.search(error.message)
            for shard in [self.shards[int(found.group(1))]] if found else self.shards:
                self._check_in_python(shard)  # raises the one-line DataError
            raise

    def _check_in_python(self, shard):
        if self.is_tsv:
            for _ in text.tsv_rows(shard[0], self.source_column, self.target_column):
                pass
        else:
            text.check_aligned(*shard)

    def _read_shard(self, index):
        paths = tf.constant([list(shard) for shard in self.shards])
        compressions = tf.constant(
            [["GZIP" if _is_gzip(path) else "" for path in shard] for shard in self.shards]
        )

        def lines(side):
            numbered = tf.data.TextLineDataset(
                paths[index, side], compression_type=compressions[index, side]
            )
            return (
                numbered.enumerate(start=1)
                .batch(_LINE_BATCH)
                .map(
                    lambda numbers, batch: _checked(numbers, batch, index),
                    num_parallel_calls=tf.data.AUTOTUNE,
                )
            )

        if self.is_tsv:
            return (
                lines(0)
                .map(lambda batch: self._columns(batch, index), num_parallel_calls=tf.data.AUTOTUNE)
                .unbatch()
            )
        # A source line without a target line (or the reverse) is found where one side ends first.
        ended = tf.data.Dataset.from_tensors(tf.constant([], tf.string)).repeat()
        both = tf.data.Dataset.zip(lines(0).concatenate(ended), lines(1).concatenate(ended))

        def stripped(source, target):
            tf.debugging.Assert(tf.size(source) == tf.size(target), [_BAD_SHARD, index])
            return _strip(source), _strip(target)

        both = both.take_while(lambda source, target: tf.size(source) + tf.size(target) > 0)
        return both.map(stripped, num_parallel_calls=tf.data.AUTOTUNE).unbatch()

    def _columns(self, lines, shard):
        """`(source, target)` columns of a batch of TSV lines,
        stripped; both empty for a blank line.
        """
        needed = max(self.source_column, self.target_column) + 1
        blank = _strip(lines) == ""
        columns = tf.strings.split(lines, "\t")
        tf.debugging.Assert(
            tf.reduce_all(blank | (columns.row_lengths() >= needed)), [_BAD_SHARD, shard]
        )
        columns = columns.to_tensor(default_value="", shape=[None, needed])
        return _strip(columns[:, self.source_column]), _strip(columns[:, self.target_column])


def interleaved(shards, read_shard, order_seed=None, worker=0, workers=1):
    """The elements of `read_shard(index)` for `shards` shards, read `READ_CYCLE` at a time, one
    from each in turn, in an order drawn with `order_seed` (`None`: in index order); this worker's
    part (see `ShardedCorpus.pairs`).

    Args:
        shards: int. The number of shards.
        read_shard: callable. `index -> tf.data.Dataset` of a shard's
            elements, `index` an int64 scalar tensor.
        order_seed: int. The seed of the shards' order; `None` for index
            order. Defaults to None.
        worker: int. This worker's index, of `workers`. Defaults to 0.
        workers: int. The number of workers. Defaults to 1.

    Returns:
        A `tf.data.Dataset` of the shards' elements.
    """
    order = np.arange(shards)
    if order_seed is not None:
        order = np.random.default_rng(order_seed).permutation(order)
    by_file = shards >= workers
    if by_file:
        order = order[worker::workers]
    elements = tf.data.Dataset.from_tensor_slices(order.astype(np.int64)).interleave(
        read_shard,
        cycle_length=min(READ_CYCLE, len(order)),
        block_length=1,
        num_parallel_calls=tf.data.AUTOTUNE,
        deterministic=True,
    )
    return elements if by_file else elements.shard(workers, worker)


def _checked(numbers, lines, shard):
    """A batch of lines, checked to be UTF-8, without a first line's byte order mark."""
    valid = (
        tf.strings.unicode_transcode(
            lines, "UTF-8", "UTF-8", errors="replace", replacement_char=0xFFFD
        )
        == lines
    )
    tf.debugging.Assert(tf.reduce_all(valid), [_BAD_SHARD, shard])
    return tf.where(numbers == 1, tf.strings.regex_replace(lines, _BYTE_ORDER_MARK, ""), lines)


def _usable(source, target):
    return (tf.strings.length(source) > 0) & (tf.strings.length(target) > 0)


def _strip(strings):
    return tf.strings.regex_replace(strings, f"^{_WHITESPACE}+|{_WHITESPACE}+$", "")


def _is_gzip(path):
    try:
        return text.is_gzip(path)
    except OSError as error:
        raise text.DataError(f"{path}: cannot be read ({error.strerror or error})") from None
