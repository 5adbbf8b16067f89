"""Corpus scale: the streamed translation pipeline against the in-memory one as the corpus grows.

    python -m benchmarks.corpus_scale                                 # 29k, 290k, 4.5M pairs
    python -m benchmarks.corpus_scale --sizes 29000 290000 --pipelines streamed

The corpus: Multi30k train pairs (../shared/data, never copied into the
project), two drawn at random and joined a line on both sides (a line then
has about WMT14 en-de's length: 4.5M pairs are 1.2-1.3 GB of text), one
word of each side dropped at random as noise; written in 32 gzip shards
under `--root` (once: later runs reuse them). The vocabulary: WordPiece,
8,000 pieces, shared, learned from the first 100,000 pairs.

For each size and pipeline, in a fresh process (so each peak is its own):
- `streamed`: what the job does with shards: `ShardedCorpus.parallel` over
  the 32 shards, its pairs estimated from the files' sizes, then
  `streamed_translation_epochs` (batch 64, max_length 64; every line
  checked as it is read);
- `prepared`: the same over the shards tokenized once (`--prepared`:
  `pipelines.prepared`, TFRecord shards in the size's folder, written anew
  and timed apart as `prepare_s`);
- `in-memory`: what the job did before: every shard read into Python lists
  (`text.read_parallel`), then `translation_epochs` (the pairs as one
  constant, tokenized and cached in memory, shuffled whole).
It reports the time to the first batch of epoch 0 (the estimate or the
reading included), the pairs/s and target tokens/s (padding excluded) of a whole
epoch 1 drained without Python work per batch, its padding fraction, and
the peak RSS of the process (`ru_maxrss`) beside its RSS before the corpus
is touched (TensorFlow and the vocabulary loaded). Last, what the training
step consumes: preset small (3+3, width 256) in `mixed_bfloat16` where the
CPU runs bfloat16 natively (float32 otherwise) on the streamed batches,
steps/s times the pairs of a batch.
"""

import argparse
import gzip
import json
import os
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np  # noqa: E402

MULTI30K = Path(__file__).resolve().parents[2] / "shared" / "data" / "multi30k" / "raw"
SHARDS, BATCH, MAX_LENGTH, VOCAB_SIZE, VOCAB_PAIRS = 32, 64, 64, 8000, 100_000
PIPELINES = ("streamed", "prepared", "in-memory")


def generate(folder, pairs, seed=0):
    """Writes `pairs` noisy joined Multi30k pairs as `SHARDS` gzip
    shard pairs under `folder` (once).
    """
    from pipelines import text

    folder = Path(folder)
    if (folder / "done").exists():
        return
    folder.mkdir(parents=True, exist_ok=True)
    multi30k = text.read_parallel(MULTI30K / "train.de.gz", MULTI30K / "train.en.gz")
    words = [[line.split() for line in side] for side in (multi30k.sources, multi30k.targets)]
    rng = np.random.default_rng(seed)
    for shard in range(SHARDS):
        count = pairs // SHARDS + (shard < pairs % SHARDS)
        first, second = rng.integers(len(multi30k), size=(2, count))
        with (
            gzip.open(folder / f"train-{shard:02d}.de.gz", "wt", compresslevel=1) as de,
            gzip.open(folder / f"train-{shard:02d}.en.gz", "wt", compresslevel=1) as en,
        ):
            for out, side in ((de, words[0]), (en, words[1])):
                lines = []
                for a, b in zip(first, second):
                    joined = side[a] + side[b]
                    del joined[rng.integers(len(joined))]
                    lines.append(" ".join(joined) + "\n")
                out.write("".join(lines))
    (folder / "done").write_text(f"{pairs}\n")


def vocabulary(root):
    """The shared WordPiece vocabulary of the benchmark, learned once
    from the 290k corpus's first pairs.
    """
    from pipelines.streaming import ShardedCorpus
    from pipelines.tokenizers import learn_wordpiece_vocabulary

    path = Path(root) / "vocab.txt"
    if not path.exists():
        folder = Path(root) / "290000"
        generate(folder, 290_000)
        sample = ShardedCorpus.parallel(folder / "*.de.gz", folder / "*.en.gz").head(VOCAB_PAIRS)
        path.write_text(
            "".join(
                f"{piece}\n"
                for piece in learn_wordpiece_vocabulary(sample.sources + sample.targets, VOCAB_SIZE)
            )
        )
    return path


def rss_mb():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def drain(batches):
    """`(batches, pairs, real target ids, padding fraction)` of a dataset, drained in the graph."""
    import tensorflow as tf

    def add(totals, batch):
        inputs, target_out = batch
        ids = (inputs["source"], inputs["target_in"], target_out)
        real = [tf.math.count_nonzero(x, dtype=tf.int64) for x in ids]
        size = sum(tf.size(x, tf.int64) for x in ids)
        return (
            totals[0] + 1,
            totals[1] + tf.cast(tf.shape(target_out)[0], tf.int64),
            totals[2] + real[2],
            totals[3] + size - sum(real),
            totals[4] + size,
        )

    zero = tf.constant(0, tf.int64)
    count, pairs, targets, padding, ids = (int(x) for x in batches.reduce((zero,) * 5, add))
    return count, pairs, targets, padding / ids


def measure(folder, pipeline, vocab_path):
    """One size and one pipeline, in this process: a dict of the figures."""
    from pipelines import prepared, text, translation
    from pipelines.streaming import ShardedCorpus, corpus_files
    from pipelines.tokenizers import WordPieceTokenizer

    tokenizer = WordPieceTokenizer.load(vocab_path)
    settings = dict(
        source_tokenizer=tokenizer,
        target_tokenizer=tokenizer,
        batch_size=BATCH,
        max_length=MAX_LENGTH,
    )
    before = rss_mb()
    prepare_seconds = None
    # tokenized once into a new folder, as `--prepared` does (timed apart)
    if pipeline == "prepared":
        corpus = ShardedCorpus.parallel(Path(folder) / "*.de.gz", Path(folder) / "*.en.gz")
        shutil.rmtree(Path(folder) / "prepared", ignore_errors=True)
        started = time.perf_counter()
        prepared.prepare(
            corpus, tokenizer, tokenizer, Path(folder) / "prepared", log=lambda line: None
        )
        prepare_seconds = round(time.perf_counter() - started, 1)
    started = time.perf_counter()
    # as the job streams: the pairs estimated, the lines checked as read
    if pipeline in (
        "streamed",
        "prepared",
    ):
        corpus = ShardedCorpus.parallel(Path(folder) / "*.de.gz", Path(folder) / "*.en.gz")
        pairs = corpus.estimated_pairs()
        if pipeline == "prepared":
            corpus = prepared.PreparedCorpus.load(Path(folder) / "prepared")
        scanned = time.perf_counter() - started
        epochs = translation.streamed_translation_epochs(corpus, pairs, **settings)
    else:
        sources, targets = [], []
        for source, target in zip(
            corpus_files(Path(folder) / "*.de.gz"), corpus_files(Path(folder) / "*.en.gz")
        ):
            shard = text.read_parallel(source, target)
            sources += shard.sources
            targets += shard.targets
        scanned = time.perf_counter() - started
        epochs, pairs = translation.translation_epochs(sources, targets, **settings), len(sources)
    next(iter(epochs(0)))
    first_batch = time.perf_counter() - started
    epoch_started = time.perf_counter()
    batches, delivered, targets, padding = drain(epochs(1))
    seconds = time.perf_counter() - epoch_started
    return dict(
        pipeline=pipeline,
        pairs=pairs,
        prepare_s=prepare_seconds,
        read_or_estimate_s=round(scanned, 1),
        first_batch_s=round(first_batch, 1),
        epoch_s=round(seconds, 1),
        batches=batches,
        pairs_per_s=round(delivered / seconds),
        target_tokens_per_s=round(targets / seconds),
        padding=round(padding, 4),
        rss_before_mb=round(before),
        peak_rss_mb=round(rss_mb()),
    )


def training_pairs_per_second(folder, vocab_path, steps=30):
    """Pairs/s the preset-small Transformer consumes on the streamed
    batches (its fastest precision here).
    """
    import keras

    from benchmarks.measures import fit_steps_per_second
    from keras_attn.losses import MaskedSparseCrossEntropy
    from keras_attn.models import TransformerBackbone
    from keras_attn.optimizers import transformer_adam
    from keras_attn.schedules import TransformerSchedule
    from keras_attn.training.precision import native_bfloat16
    from pipelines import translation
    from pipelines.streaming import ShardedCorpus
    from pipelines.tokenizers import WordPieceTokenizer

    tokenizer = WordPieceTokenizer.load(vocab_path)
    corpus = ShardedCorpus.parallel(Path(folder) / "*.de.gz", Path(folder) / "*.en.gz")
    epochs = translation.streamed_translation_epochs(
        corpus,
        corpus.estimated_pairs(),
        tokenizer,
        tokenizer,
        BATCH,
        MAX_LENGTH,
        shuffle_buffer=20_000,
    )
    precision = "mixed_bfloat16" if native_bfloat16() else "float32"
    keras.mixed_precision.set_global_policy(precision)
    model = TransformerBackbone(
        tokenizer.vocabulary_size,
        tokenizer.vocabulary_size,
        max_sequence_length=MAX_LENGTH,
        preset="small",
        dropout=0.1,
    )
    model.compile(
        optimizer=transformer_adam(TransformerSchedule(256, 4000)),
        loss=MaskedSparseCrossEntropy(0.1),
    )
    rate = fit_steps_per_second(model, epochs(0).repeat(), steps, warmup_steps=10)
    return dict(precision=precision, steps_per_s=round(rate, 3), pairs_per_s=round(rate * BATCH, 1))


def in_fresh_process(*args, timeout, module="benchmarks.corpus_scale"):
    """Runs `module` with `args` in a new Python; its JSON line, or an error dict."""
    command = [sys.executable, "-m", module, *map(str, args)]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"not done in {timeout} s"}
    if done.returncode:
        return {
            "error": (done.stderr.strip().splitlines() or [f"exit {done.returncode}"])[-1][:300]
        }
    return json.loads(done.stdout.strip().splitlines()[-1])


def main():
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sizes", type=int, nargs="+", default=[29_000, 290_000, 4_500_000])
    parser.add_argument("--pipelines", nargs="+", choices=PIPELINES, default=list(PIPELINES))
    parser.add_argument(
        "--root", default="/tmp/corpus_scale", help="where the generated shards are kept"
    )
    parser.add_argument("--timeout", type=int, default=1800, help="seconds a measurement may take")
    parser.add_argument(
        "--measure", nargs=2, metavar=("FOLDER", "PIPELINE"), help=argparse.SUPPRESS
    )
    parser.add_argument("--train-rate", metavar="FOLDER", help=argparse.SUPPRESS)
    args = parser.parse_args()
    vocab_path = Path(args.root) / "vocab.txt"
    if args.measure:
        print(json.dumps(measure(*args.measure, vocab_path)))
        return
    if args.train_rate:
        print(json.dumps(training_pairs_per_second(args.train_rate, vocab_path)))
        return
    if not (MULTI30K / "train.de.gz").exists():
        sys.exit(f"Multi30k not found at {MULTI30K}")
    vocabulary(args.root)
    results = []
    for size in args.sizes:
        folder = Path(args.root) / str(size)
        started = time.perf_counter()
        generate(folder, size)
        text_mb = sum(os.path.getsize(p) for p in folder.glob("*.gz")) / 2**20
        print(
            f"{size} pairs: {text_mb:.0f} MB of gzip shards ({time.perf_counter() - started:.0f} "
            "s)",
            flush=True,
        )
        for pipeline in args.pipelines:
            result = {
                "size": size,
                "gzip_mb": round(text_mb),
                **in_fresh_process(
                    "--measure", folder, pipeline, "--root", args.root, timeout=args.timeout
                ),
            }
            print(json.dumps(result), flush=True)
            results.append(result)
    training = in_fresh_process(
        "--train-rate",
        Path(args.root) / str(args.sizes[0]),
        "--root",
        args.root,
        timeout=args.timeout,
    )
    print(json.dumps({"training": training}), flush=True)


if __name__ == "__main__":
    main()
