"""Speed of the input side: vocabulary learning, tokenization, tf.data pipeline.

Run from the repository root (Multi30k is read from ../shared/data/multi30k):

    python -m benchmarks.pipeline                    # about 3-4 minutes
    python -m benchmarks.pipeline --skip-keras-hub   # without the slow anchor

On Multi30k train (29,000 German-English pairs) it measures:

1. WordPiece vocabulary learning (8,000 tokens per side) with
   `pipelines.tokenizers.learn_wordpiece_vocabulary` (HuggingFace
   `tokenizers`, Rust) against `keras_hub.tokenizers.compute_word_piece_vocabulary`
   (tf-text's Python learner), both sides.
2. In-graph tokenization alone: `WordPieceTokenizer.tokenize` on all
   sentences, eager, in batches of 1024.
3. `pipelines.translation.translation_dataset` (batch 64, max_length 64):
   pairs/s of the first epoch (tokenization and cache filling) and of later
   epochs (from the cache), the padding fraction, and the same for
   `bucket=False` and for a variant that buckets with
   `Dataset.bucket_by_sequence_length` instead of sorted pools. A dataset is
   drained with `Dataset.reduce`, as a Keras training loop would consume it,
   without Python work per batch.

The machine has 2 cores; numbers from a loaded machine are lower.
"""

import argparse
import os
import statistics
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import tensorflow as tf  # noqa: E402

from benchmarks.measures import count_truncated, padding_fraction  # noqa: E402
from pipelines import translation  # noqa: E402
from pipelines.text import read_parallel  # noqa: E402
from pipelines.tokenizers import (  # noqa: E402
    BOS_ID,
    EOS_ID,
    SPECIAL_TOKENS,
    WordPieceTokenizer,
    learn_wordpiece_vocabulary,
)

ROOT = Path(__file__).resolve().parents[1]
VOCAB_SIZE, BATCH, MAX_LENGTH, EPOCHS = 8000, 64, 64, 5


def timed(function, *args, **kwargs):
    start = time.perf_counter()
    result = function(*args, **kwargs)
    return result, time.perf_counter() - start


def count_pairs(dataset):
    return int(
        dataset.reduce(
            tf.constant(0, tf.int64),
            lambda total, batch: total + tf.cast(tf.shape(batch[1])[0], tf.int64),
        )
    )


def epochs_per_second(dataset, pairs):
    """(first-epoch pairs/s, median pairs/s of the later epochs)."""
    rates = []
    for _ in range(EPOCHS):
        counted, seconds = timed(count_pairs, dataset)
        assert counted == pairs, (counted, pairs)
        rates.append(pairs / seconds)
    return rates[0], statistics.median(rates[1:])


def bucket_by_sequence_length_variant(corpus, source_tokenizer, target_tokenizer):
    """The pipeline with `Dataset.bucket_by_sequence_length`, for comparison."""

    def tokenize(source_text, target_text):
        source = source_tokenizer.tokenize(source_text)[:, :MAX_LENGTH]
        target = target_tokenizer.tokenize(target_text)
        rows = target.nrows()
        bos = tf.fill([rows, 1], BOS_ID)
        eos = tf.fill([rows, 1], EOS_ID)
        target_in = tf.concat([bos, target], 1)[:, :MAX_LENGTH]
        target_out = tf.concat([target, eos], 1)[:, :MAX_LENGTH]
        return source, target_in, target_out

    boundaries = [8, 10, 12, 14, 16, 18, 20, 22, 24, 28, 32, 40, 48, 56]
    dataset = (
        tf.data.Dataset.from_tensor_slices((corpus.sources, corpus.targets))
        .batch(1024)
        .map(tokenize, num_parallel_calls=tf.data.AUTOTUNE)
        .unbatch()
        .map(lambda *rows: tuple(tf.convert_to_tensor(r) for r in rows))
        .cache()
        .shuffle(len(corpus), seed=0)
        .bucket_by_sequence_length(
            lambda s, t_in, t_out: tf.maximum(tf.shape(s)[0], tf.shape(t_in)[0]),
            boundaries,
            [BATCH] * (len(boundaries) + 1),
        )
        .map(lambda s, t_in, t_out: ({"source": s, "target_in": t_in}, t_out))
    )
    return dataset.prefetch(tf.data.AUTOTUNE)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=ROOT.parent / "shared" / "data" / "multi30k")
    parser.add_argument("--skip-keras-hub", action="store_true")
    args = parser.parse_args()

    corpus = read_parallel(args.data / "raw" / "train.de.gz", args.data / "raw" / "train.en.gz")
    print(f"Multi30k train: {len(corpus)} pairs, {os.cpu_count()} CPU cores\n")

    print("1. WordPiece vocabulary learning, 8000 tokens per side")
    vocabularies = {}
    for side, texts in (("de", corpus.sources), ("en", corpus.targets)):
        vocabularies[side], seconds = timed(learn_wordpiece_vocabulary, texts, VOCAB_SIZE)
        size = len(vocabularies[side])
        print(f"   pipelines (HF tokenizers)   {side}: {seconds:7.2f} s  ({size} tokens)")
    if not args.skip_keras_hub:
        import keras_hub

        for side, texts in (("de", corpus.sources), ("en", corpus.targets)):
            vocabulary, seconds = timed(
                keras_hub.tokenizers.compute_word_piece_vocabulary,
                tf.data.Dataset.from_tensor_slices(texts).batch(1000),
                VOCAB_SIZE,
                reserved_tokens=list(SPECIAL_TOKENS),
            )
            size = len(vocabulary)
            print(f"   keras_hub (tf-text, Python) {side}: {seconds:7.2f} s  ({size} tokens)")

    source_tokenizer = WordPieceTokenizer(vocabularies["de"])
    target_tokenizer = WordPieceTokenizer(vocabularies["en"])

    print("\n2. In-graph tokenization alone (eager, batches of 1024)")
    for side, tokenizer, texts in (
        ("de", source_tokenizer, corpus.sources),
        ("en", target_tokenizer, corpus.targets),
    ):
        tokenizer.tokenize(texts[:1024])  # warm up
        batches = [texts[i : i + 1024] for i in range(0, len(texts), 1024)]
        rates = []
        for _ in range(3):
            _, seconds = timed(lambda: [tokenizer.tokenize(batch) for batch in batches])
            rates.append(len(texts) / seconds)
        print(f"   {side}: {statistics.median(rates):9,.0f} sentences/s")

    print(f"\n3. translation_dataset, batch {BATCH}, max_length {MAX_LENGTH}, {EPOCHS} epochs")
    variants = {
        "sorted pools (default)": translation.translation_dataset(
            corpus.sources, corpus.targets, source_tokenizer, target_tokenizer, BATCH, MAX_LENGTH
        ),
        "no bucketing": translation.translation_dataset(
            corpus.sources, corpus.targets, source_tokenizer, target_tokenizer, BATCH, MAX_LENGTH,
            bucket=False,
        ),
        "bucket_by_sequence_length": bucket_by_sequence_length_variant(
            corpus, source_tokenizer, target_tokenizer
        ),
    }
    for name, dataset in variants.items():
        first, cached = epochs_per_second(dataset, len(corpus))
        padding = padding_fraction(dataset)
        print(
            f"   {name:26s} first epoch {first:9,.0f} pairs/s   cached {cached:9,.0f} pairs/s"
            f"   padding {padding:6.1%}"
        )
    truncated = count_truncated(
        corpus.sources, corpus.targets, source_tokenizer, target_tokenizer, MAX_LENGTH
    )
    print(f"   pairs truncated at max_length {MAX_LENGTH}: {truncated}")


if __name__ == "__main__":
    main()
