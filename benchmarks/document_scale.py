"""Document scale: BERT's streamed pretraining pipeline against the
in-memory one as the corpus grows.

    python -m benchmarks.document_scale                          # 10 MB, 100 MB, 1 GB of text
    python -m benchmarks.document_scale --sizes-mb 10 100 --pipelines streamed

The corpus: the built-in generated documents (`pipelines.synthetic_documents`,
our own code), blank lines between documents, in 16 files a size under
`--root` (written once). The vocabulary: uncased WordPiece, 8,000 pieces,
learned from the first 10 MB; sequences of 128, batch 32.

For each size and pipeline, in a fresh process: `streamed` is what
`keras-attn pretrain bert` does over 512 MB of text (`document_stream`:
the epoch's pairs estimated from the files' bytes, blocks of about 8 MB of
text tokenized and paired in tf.data); `in-memory` what it does below that
(every document read into Python lists, tokenized at once, pairs drawn from
the whole). Reported: time to the first batch (reading included), pairs/s
over `--batches` batches after it, drained in the graph, and the peak RSS
(`ru_maxrss`) beside the RSS before the corpus is touched. Last, what
BERT-mini (L4/H256/A4) consumes at sequence 128 in mixed_bfloat16 where the
CPU runs bfloat16 natively (float32 otherwise): steps/s times 32.
"""

import argparse
import json
import sys
import time
from pathlib import Path

from benchmarks.corpus_scale import in_fresh_process, rss_mb

FILES, MAX_LENGTH, BATCH, VOCAB_SIZE, VOCAB_MB = 16, 128, 32, 8000, 10
PIPELINES = ("streamed", "in-memory")


def generate(folder, megabytes, seed=0):
    """Writes about `megabytes` MB of generated documents as `FILES` files under `folder` (once)."""
    from pipelines.synthetic_documents import document_corpus

    folder = Path(folder)
    if (folder / "done").exists():
        return
    folder.mkdir(parents=True, exist_ok=True)
    for number in range(FILES):
        written, chunk = 0, 0
        with open(folder / f"docs-{number:02d}.txt", "w") as out:
            while written < megabytes * 2**20 / FILES:
                text = "\n\n".join(
                    " ".join(d)
                    for d in document_corpus(2000, seed=seed * 10**6 + number * 10**4 + chunk)
                )
                out.write(text + "\n\n")
                written, chunk = written + len(text) + 2, chunk + 1
    (folder / "done").write_text(f"{megabytes}\n")


def preprocessor(root):
    """The benchmark's `BertPreprocessor`, its vocabulary learned once
    from `VOCAB_MB` MB of documents.
    """
    from pipelines import documents
    from pipelines.preprocessors import BertPreprocessor
    from pipelines.tokenizers import WordPieceTokenizer, learn_wordpiece_vocabulary

    path = Path(root) / "vocab.txt"
    if not path.exists():
        generate(Path(root) / str(VOCAB_MB), VOCAB_MB)
        read = documents.read_documents(Path(root) / str(VOCAB_MB))
        WordPieceTokenizer(
            learn_wordpiece_vocabulary(read.sentences, VOCAB_SIZE, lowercase=True), lowercase=True
        ).save(path)
    return BertPreprocessor(WordPieceTokenizer.load(path, lowercase=True), MAX_LENGTH)


def measure(folder, pipeline, root, batches):
    """One size and one pipeline, in this process: a dict of the figures."""
    import tensorflow as tf

    from pipelines import document_stream, documents, pretraining

    packer = preprocessor(root)
    files = documents.document_files([folder])
    before = rss_mb()
    started = time.perf_counter()
    if pipeline == "streamed":
        pairs = document_stream.estimated_pairs(files, packer.tokenizer, MAX_LENGTH)
        epochs = document_stream.streamed_pretraining_epochs(files, packer, BATCH, pairs)
    else:
        corpus = pretraining.tokenize_documents(
            documents.read_documents(files).documents, packer.tokenizer
        )
        pairs = pretraining.pairs_per_epoch(corpus, MAX_LENGTH)
        epochs = pretraining.pretraining_epochs(corpus, packer, batch_size=BATCH, num_pairs=pairs)
    iterator = iter(epochs(0))
    next(iterator)
    first_batch = time.perf_counter() - started
    drained = time.perf_counter()
    count = epochs(0).skip(1).take(batches).reduce(tf.constant(0, tf.int64), lambda n, _: n + 1)
    seconds = time.perf_counter() - drained
    return dict(
        pipeline=pipeline,
        pairs_an_epoch=pairs,
        first_batch_s=round(first_batch, 1),
        pairs_per_s=round(int(count) * BATCH / seconds),
        batches=int(count),
        rss_before_mb=round(before),
        peak_rss_mb=round(rss_mb()),
    )


def training_pairs_per_second(folder, root, steps=20):
    """Pairs/s BERT-mini consumes on the streamed batches (its fastest precision here)."""
    import keras

    from benchmarks.measures import fit_steps_per_second
    from keras_attn.models import BertPretrainer
    from keras_attn.training.precision import native_bfloat16
    from pipelines import document_stream, documents

    packer = preprocessor(root)
    files = documents.document_files([folder])
    batches = document_stream.streamed_pretraining_epochs(files, packer, BATCH, 10**6)(0)
    precision = "mixed_bfloat16" if native_bfloat16() else "float32"
    keras.mixed_precision.set_global_policy(precision)
    model = BertPretrainer.from_preset("mini", packer, dropout=0.1)
    model.compile(learning_rate=1e-4)
    rate = fit_steps_per_second(model, batches, steps, warmup_steps=5)
    return dict(precision=precision, steps_per_s=round(rate, 3), pairs_per_s=round(rate * BATCH, 1))


def main():
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sizes-mb", type=int, nargs="+", default=[10, 100, 1024])
    parser.add_argument("--pipelines", nargs="+", choices=PIPELINES, default=list(PIPELINES))
    parser.add_argument(
        "--root", default="/tmp/document_scale", help="where the generated documents are kept"
    )
    parser.add_argument("--batches", type=int, default=500, help="batches drained for the pairs/s")
    parser.add_argument("--timeout", type=int, default=3600, help="seconds a measurement may take")
    parser.add_argument(
        "--measure", nargs=2, metavar=("FOLDER", "PIPELINE"), help=argparse.SUPPRESS
    )
    parser.add_argument("--train-rate", metavar="FOLDER", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.measure:
        print(json.dumps(measure(*args.measure, args.root, args.batches)))
        return
    if args.train_rate:
        print(json.dumps(training_pairs_per_second(args.train_rate, args.root)))
        return
    preprocessor(args.root)
    for megabytes in args.sizes_mb:
        folder = Path(args.root) / str(megabytes)
        started = time.perf_counter()
        generate(folder, megabytes)
        text_mb = sum(path.stat().st_size for path in folder.glob("docs-*.txt")) / 2**20
        print(
            f"{megabytes} MB: {text_mb:.0f} MB of documents in {FILES} files "
            f"({time.perf_counter() - started:.0f} s)",
            flush=True,
        )
        for pipeline in args.pipelines:
            result = in_fresh_process(
                "--measure",
                folder,
                pipeline,
                "--root",
                args.root,
                "--batches",
                args.batches,
                timeout=args.timeout,
                module="benchmarks.document_scale",
            )
            print(json.dumps({"megabytes": round(text_mb), **result}), flush=True)
    training = in_fresh_process(
        "--train-rate",
        Path(args.root) / str(args.sizes_mb[0]),
        "--root",
        args.root,
        timeout=args.timeout,
        module="benchmarks.document_scale",
    )
    print(json.dumps({"training": training}), flush=True)


if __name__ == "__main__":
    sys.exit(main())
