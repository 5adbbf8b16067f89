"""Whole Multi30k epochs of the Transformer job with and without XLA, float32 and bfloat16.

    python -m benchmarks.xla_epochs                       # 4 cases, then again in reverse order
    python -m benchmarks.xla_epochs --repeats 1 --cases float32:xla mixed_bfloat16:plain

With `--jit-compile` the job rounds batch lengths up to
multiples of 8 ids (`translation.XLA_LENGTH_MULTIPLE`), so XLA compiles one
program per (source, target) width pair it meets instead of one per batch
shape. Each case here is the job itself (`keras_attn.jobs.translation.run`,
preset small, batch 128, Multi30k de→en train, val each epoch) training one
whole epoch in this process, compilations included, from the same
vocabularies (learned once, copied into every run folder). The cases run in
order, then in reverse order, so a machine that slows down or speeds up
during the benchmark weighs on every case alike. Prints, per case, the
epoch's training seconds (compilations, the epoch and its validation) and
ms/step, the validation loss after the epoch, and the number of distinct
batch shapes the epoch has with and without the rounding (one XLA program
each). The data is read from ../shared/data/multi30k, never copied.
"""

import argparse
import contextlib
import io
import os
import re
import shutil
import sys
import tempfile
import time
from pathlib import Path

from keras_attn.config import TranslationConfig  # noqa: E402

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "multi30k" / "raw"
CASES = ("float32:plain", "float32:xla", "mixed_bfloat16:plain", "mixed_bfloat16:xla")


def job_config(run_dir, precision, xla, batch_size):
    path = lambda split, lang: str(DATA / f"{split}.{lang}.gz")  # noqa: E731
    return TranslationConfig(
        src=path("train", "de"),
        tgt=path("train", "en"),
        valid_src=path("val", "de"),
        valid_tgt=path("val", "en"),
        test_src=path("test_2016_flickr", "de"),
        test_tgt=path("test_2016_flickr", "en"),
        preset="small",
        epochs=1,
        batch_size=batch_size,
        max_sequence_length=64,
        beam_width=1,
        samples=0,
        mixed_precision=precision == "mixed_bfloat16",
        jit_compile=xla,
        run_dir=str(run_dir),
        export=False,
        verbose=2,
        backup_every=0,
    )


def batch_shapes(config, length_multiples):
    """`{multiple: distinct (source, target) batch shapes of the epoch}`: one XLA program each."""
    from keras_attn.jobs import translation as job
    from pipelines import translation

    train = job.load_corpora(config)["train"]  # read once for every multiple
    source_tokenizer, target_tokenizer = job.build_tokenizers(config, train)
    counts = {}
    for multiple in length_multiples:
        epoch = translation.translation_epochs(
            train.sources,
            train.targets,
            source_tokenizer,
            target_tokenizer,
            batch_size=config.batch_size,
            max_length=config.max_sequence_length,
            seed=config.seed,
            length_multiple=multiple,
        )(0)
        counts[multiple] = len({(tuple(x["source"].shape), tuple(y.shape)) for x, y in epoch})
    return counts


def run_case(case, root, vocabularies, batch_size):
    from keras_attn.jobs import translation

    precision, mode = case.split(":")
    run_dir = Path(tempfile.mkdtemp(prefix=case.replace(":", "-") + "-", dir=root))
    for path in vocabularies:
        shutil.copy(path, run_dir)
    config = job_config(run_dir, precision, mode == "xla", batch_size)
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        result = translation.run(config, log=lambda line: None)
    line = next(line for line in printed.getvalue().splitlines() if line.startswith("epoch 1/1"))
    ms_per_step = float(re.search(r"\((\d+) ms/step\)", line).group(1))
    return dict(
        seconds=result.metrics["train_seconds"],
        ms_per_step=ms_per_step,
        val_loss=result.history["val_loss"][-1],
        steps=result.steps,
    )


def main():
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--cases", nargs="+", choices=CASES, default=list(CASES))
    parser.add_argument(
        "--repeats", type=int, default=2, help="in order, then in reverse order, ..."
    )
    parser.add_argument("--batch-size", type=int, default=128)
    args = parser.parse_args()
    if not DATA.is_dir():
        sys.exit(f"Multi30k not found at {DATA}")
    from keras_attn.jobs import translation

    root = Path(tempfile.mkdtemp(prefix="xla-epochs-"))
    try:
        first = job_config(root / "vocabularies", "float32", False, args.batch_size)
        os.makedirs(first.run_dir)
        multiple = translation.XLA_LENGTH_MULTIPLE
        shapes = batch_shapes(first, (1, multiple))
        print(
            f"load average {os.getloadavg()[0]:.1f}; distinct batch shapes in an epoch: "
            f"{shapes[1]} as batched, {shapes[multiple]} rounded to multiples of {multiple} (XLA)",
            flush=True,
        )
        vocabularies = sorted((root / "vocabularies").glob("vocab.*.txt"))
        results = {case: [] for case in args.cases}
        for repeat in range(args.repeats):
            for case in args.cases if repeat % 2 == 0 else args.cases[::-1]:
                started = time.strftime("%H:%M:%S")
                result = run_case(case, root, vocabularies, args.batch_size)
                results[case].append(result)
                print(
                    f"{started} {case:<22} {result['seconds']:5.0f} s  "
                    f"{result['ms_per_step']:5.0f} ms/step  val_loss {result['val_loss']:.4f}  "
                    f"({result['steps']} steps, load {os.getloadavg()[0]:.1f})",
                    flush=True,
                )
        base = min(r["seconds"] for r in results[args.cases[0]])
        print(f"best of {args.repeats}, relative to {args.cases[0]}:")
        for case, runs in results.items():
            best = min(r["seconds"] for r in runs)
            print(f"  {case:<22} {best:5.0f} s  {base / best:4.2f}x")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
