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
    return os.path.join(folder, f"shard-{index:05d}-of-{shards:05d}.tfrecord")


def binding(corpus, source_tokenizer, target_tokenizer):
    """What a prepared folder holds, as a digest: the corpus's files
    (names, sizes) and the vocabularies.
    """
    files = [
        [os.path.basename(path), os.path.getsize(path)] for shard in corpus.shards for path in shard
    ]
    columns = [corpus.source_column, corpus.target_column] if corpus.is_tsv else None
    tokenizers = [
        [tokenizer.spec, tokenizer.lowercase] for tokenizer in (source_tokenizer, target_tokenizer)
    ]
    return hashlib.sha256(json.dumps([files, columns, tokenizers]).encode()).hexdigest()


def prepare(corpus, source_tokenizer, target_tokenizer, folder, log=print):
    """Tokenizes every shard of `corpus` into `folder` (the shards already there are kept).

    Returns:
        The `PreparedCorpus` of `folder`.

    Raises:
        DataError: `folder` was prepared from other data or vocabularies.
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

    Attributes:
        files: its shard files, in the corpus's shard order.
        shard_pairs: the pairs of each.
    """

    files: tuple
    shard_pairs: tuple

    @classmethod
    def load(cls, folder, key=None):
        """The complete prepared folder `folder` (bound to `key`, when given)."""
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
        """Serialized pairs (strings), in the order `ShardedCorpus.pairs` gives the text pairs."""
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
        """Turns a damaged file met by a stream of this corpus into one line."""
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
    as `TranslationPreprocessor` gives for their text."""

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
