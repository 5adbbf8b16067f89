"""Prepared shards: a streamed corpus tokenized once, so later epochs
and later runs skip tokenizing.

What fairseq's `preprocess` and the Model Garden's TFRecords do: `prepare`
writes one TFRecord file of `tf.train.Example`s a shard of a
`pipelines.streaming.ShardedCorpus` (int64 lists `source` and `target`: the
tokenizers' ids of each usable pair, in the shard's order, before any cut
to a length). A file is written under a temporary name and renamed when
whole, so a preparation killed midway resumes at the shards not yet
written. The folder is bound to the corpus (its files' names and sizes)
and to the vocabularies: a later run with other data or another
vocabulary is refused, one with the same reuses it.

    folder/prepared.json                  what it was prepared from (written first)
    folder/shard-00007-of-00032.tfrecord  the pairs of shard 7, renamed into place when whole
    folder/pairs.json                     the pairs of each shard (written last: then whole)

A `PreparedCorpus` reads the files as `ShardedCorpus` reads the text, in
the same orders, so the batches of an epoch are the same from either.
"""

import contextlib
import dataclasses
import hashlib
import json
import os

import numpy as np
import tensorflow as tf

from pipelines import streaming, text
from pipelines.preprocessors import pack_source, pack_target

BINDING_FILE, PAIRS_FILE = "prepared.json", "pairs.json"
_RECORD = {"source": tf.io.RaggedFeature(tf.int64), "target": tf.io.RaggedFeature(tf.int64)}
_BATCH = 1024  # pairs tokenized, or records parsed, at a time


def shard_path(folder, index, shards):
    """The TFRecord file of shard `index` in a prepared folder.

    Args:
        folder: str or os.PathLike. The prepared folder.
        index: int. The shard's index.
        shards: int. The number of shards.

    Returns:
        str, e.g. `folder/shard-00007-of-00032.tfrecord` for shard 7 of 32.
    """
    return os.path.join(folder, f"shard-{index:05d}-of-{shards:05d}.tfrecord")


def binding(corpus, source_tokenizer, target_tokenizer):
    """What a prepared folder holds, as a digest: the corpus's files
    (names, sizes) and the vocabularies.

    The digest also covers a TSV corpus's columns and whether each
    tokenizer lowercases and strips accents.

    Args:
        corpus: pipelines.streaming.ShardedCorpus. The corpus.
        source_tokenizer: pipelines.tokenizers.SubwordTokenizer. The
            tokenizer of the sources.
        target_tokenizer: pipelines.tokenizers.SubwordTokenizer. The
            tokenizer of the targets.

    Returns:
        str, the SHA-256 hex digest.
    """
    files = [
        [os.path.basename(path), os.path.getsize(path)] for shard in corpus.shards for path in shard
    ]
    columns = [corpus.source_column, corpus.target_column] if corpus.is_tsv else None
    # (accent stripping only when on: a folder prepared without it keeps its digest)
    tokenizers = [
        [tokenizer.spec, tokenizer.lowercase] + ([True] if _strips_accents(tokenizer) else [])
        for tokenizer in (source_tokenizer, target_tokenizer)
    ]
    return hashlib.sha256(json.dumps([files, columns, tokenizers]).encode()).hexdigest()


def _strips_accents(tokenizer):
    return bool(getattr(tokenizer, "strip_accents", False))


def prepare(corpus, source_tokenizer, target_tokenizer, folder, log=print):
    """Tokenizes every shard of `corpus` into `folder` (the shards already there are kept).

    Args:
        corpus: pipelines.streaming.ShardedCorpus. The corpus to tokenize.
        source_tokenizer: pipelines.tokenizers.SubwordTokenizer. The
            tokenizer of the sources.
        target_tokenizer: pipelines.tokenizers.SubwordTokenizer. The
            tokenizer of the targets.
        folder: str or os.PathLike. The prepared folder, made if missing.
        log: callable. Called with a one-line summary when done. Defaults to
            `print`.

    Returns:
        The `PreparedCorpus` of `folder`.

    Raises:
        DataError: when `folder` was prepared from other data or
            vocabularies, or a line of the corpus is bad.
    """
    key = binding(corpus, source_tokenizer, target_tokenizer)
    os.makedirs(folder, exist_ok=True)
    _check_binding(folder, key)
    shards = len(corpus.shards)
    text.write_text_atomically(
        os.path.join(folder, BINDING_FILE), json.dumps({"binding": key, "shards": shards})
    )
    pairs, written = [], 0
    with corpus.reported():
        for index in range(shards):
            path = shard_path(folder, index, shards)
            if os.path.exists(path):
                pairs.append(_count(path))
                continue
            pairs.append(_write_shard(corpus, index, source_tokenizer, target_tokenizer, path))
            written += 1
    text.write_text_atomically(os.path.join(folder, PAIRS_FILE), json.dumps({"pairs": pairs}))
    log(
        f"prepared: {sum(pairs)} pairs of {shards} shards tokenized in {folder} ({written} shards "
        "written now)"
    )
    return PreparedCorpus.load(folder, key)


@dataclasses.dataclass(frozen=True)
class PreparedCorpus:
    """A prepared folder, read as `ShardedCorpus` reads text.

    Each argument is also an attribute of the same name.

    Args:
        files: tuple of str. Its shard files, in the corpus's shard order.
        shard_pairs: tuple of int. The pairs of each.
    """

    files: tuple
    shard_pairs: tuple

    @classmethod
    def load(cls, folder, key=None):
        """The complete prepared folder `folder` (bound to `key`, when given).

        Args:
            folder: str or os.PathLike. The prepared folder.
            key: str. The `binding` it must have been prepared with; `None`
                for any. Defaults to None.

        Returns:
            A `PreparedCorpus`.

        Raises:
            DataError: when the folder is not completely prepared, or was
                prepared from other data or vocabularies than `key` says.
        """
        if key is not None:
            _check_binding(folder, key)
        try:
            with open(os.path.join(folder, PAIRS_FILE)) as file:
                pairs = json.load(file)["pairs"]
        except FileNotFoundError:
            raise text.DataError(
                f"{folder}: not completely prepared ({PAIRS_FILE} missing)"
            ) from None
        return cls(
            tuple(shard_path(folder, index, len(pairs)) for index in range(len(pairs))),
            tuple(pairs),
        )

    def records(self, order_seed=None, worker=0, workers=1):
        """Serialized pairs (strings), in the order `ShardedCorpus.pairs` gives the text pairs.

        Args:
            order_seed: int. Shards are read in an order drawn with this
                seed; `None` for their order. Defaults to None.
            worker: int. This worker's index, of `workers`, as in
                `ShardedCorpus.pairs`. Defaults to 0.
            workers: int. The number of workers. Defaults to 1.

        Returns:
            A `tf.data.Dataset` of serialized `tf.train.Example`s.
        """
        files = tf.constant(self.files)
        return streaming.interleaved(
            len(self.files),
            lambda index: tf.data.TFRecordDataset(files[index]),
            order_seed,
            worker,
            workers,
        )

    @contextlib.contextmanager
    def reported(self):
        """Turns a damaged file met by a stream of this corpus into one line.

        A context manager.

        Raises:
            DataError: when a stream read inside it met a damaged shard file.
        """
        try:
            yield
        except tf.errors.DataLossError as error:
            folder = os.path.dirname(self.files[0])
            message = error.message.splitlines()[0]
            raise text.DataError(
                f"{folder}: a prepared shard is damaged ({message}); "
                "delete the folder to prepare it again"
            ) from None


def tokenized(records, max_length):
    """`(source, target_in, target_out)` id rows of serialized pairs,
    as `TranslationPreprocessor` gives for their text.

    Args:
        records: tf.data.Dataset. Serialized pairs (scalar strings), as
            `PreparedCorpus.records` gives them.
        max_length: int. The longest row, in ids.

    Returns:
        A `tf.data.Dataset` of `(source, target_in, target_out)` int32 rows.
    """

    def parse(batch):
        ids = tf.io.parse_example(batch, _RECORD)
        return (
            pack_source(ids["source"], max_length),
            *pack_target(ids["target"], max_length).values(),
        )

    return records.batch(_BATCH).map(parse, num_parallel_calls=tf.data.AUTOTUNE).unbatch()


def _write_shard(corpus, index, source_tokenizer, target_tokenizer, path):
    def tokenize(source, target):
        ids = source_tokenizer.tokenize(source), target_tokenizer.tokenize(target)
        return tuple((side.values, side.row_splits) for side in ids)

    batches = (
        corpus.shard_pairs(index).batch(_BATCH).map(tokenize, num_parallel_calls=tf.data.AUTOTUNE)
    )
    count, temporary = 0, path + ".tmp"
    with tf.io.TFRecordWriter(temporary) as writer:
        for (sources, source_splits), (targets, target_splits) in batches.as_numpy_iterator():
            sources, targets = (
                np.split(ids, splits[1:-1])
                for ids, splits in ((sources, source_splits), (targets, target_splits))
            )
            for source, target in zip(sources, targets):
                writer.write(tf_example(source, target))
                count += 1
    os.replace(temporary, path)
    return count


def tf_example(source, target):
    """A pair's ids as a serialized `tf.train.Example` (int64 lists `source` and `target`).

    Args:
        source: array or list of int. The source's ids.
        target: array or list of int. The target's ids.

    Returns:
        bytes.
    """
    feature = {
        name: tf.train.Feature(int64_list=tf.train.Int64List(value=ids))
        for name, ids in (("source", source), ("target", target))
    }
    return tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString()


def _count(path):
    return int(
        tf.data.TFRecordDataset(path).reduce(tf.constant(0, tf.int64), lambda count, _: count + 1)
    )


def _check_binding(folder, key):
    try:
        with open(os.path.join(folder, BINDING_FILE)) as file:
            found = json.load(file)["binding"]
    except FileNotFoundError:
        return
    if found != key:
        raise text.DataError(
            f"{folder}: prepared from other data or another vocabulary; "
            "give a new folder, or delete this one"
        )
