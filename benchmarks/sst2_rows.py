"""SST-2 with and without BERT pretraining, against the number of training rows.

    python -m benchmarks.sst2_rows --pretrained runs/b/ours/export/bert/1 --run-dir runs/sst2-rows
    python -m benchmarks.sst2_rows --pretrained ... --rows 1000 2000 --seeds 0 1 \
        --learning-rates 1e-4
    python -m benchmarks.sst2_rows --pretrained ... --keep-pretrained-blocks 0   # embeddings only

Pretraining is expected to help most where labelled rows are few; this runs
`bert_pretraining.py --only sst2` (the pretrained backbone and the same
architecture and vocabulary with random weights, fine-tuned alike) for each
number of sampled training rows, seed (which also draws the sample) and
fine-tuning peak learning rate, two processes at a time. Every run takes about
the same number of optimizer steps (`--steps`, 375 by default: 3 epochs of
4,000 rows at batch 32; the epochs drop their last partial batch), so fewer
rows means more epochs.

For each row count and backbone the learning rate is chosen on SST-2 dev (the
mean over seeds of the last epoch's dev accuracy), and the summary shows the
test accuracy of that choice only (mean and range over the seeds): test never
chooses. (Each run's log and JSON keep its own test score, which
`bert_pretraining.py` always computes.)
"""

import argparse
import concurrent.futures
import json
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

REPOSITORY = Path(__file__).resolve().parent.parent  # where `python -m benchmarks.X` runs


def run_one(args, rows, seed, learning_rate):
    name = f"rows{rows}-seed{seed}-lr{learning_rate:g}"
    if args.keep_pretrained_blocks is not None:
        name += f"-keep{args.keep_pretrained_blocks}"
    out = Path(args.run_dir) / f"{name}.json"
    if not out.exists():
        shutil.rmtree(Path(args.run_dir) / name, ignore_errors=True)  # an interrupted run's folder
        command = [
            sys.executable,
            "-m",
            "benchmarks.bert_pretraining",
            "--only",
            "sst2",
            "--pretrained",
            args.pretrained,
            "--sst2-train",
            str(rows),
            "--sst2-steps",
            str(args.steps),
            "--sst2-learning-rate",
            str(learning_rate),
            "--seed",
            str(seed),
            "--run-dir",
            str(Path(args.run_dir) / name),
            "--out",
            str(out),
        ]
        if args.keep_pretrained_blocks is not None:
            command += ["--keep-pretrained-blocks", str(args.keep_pretrained_blocks)]
        with open(Path(args.run_dir) / f"{name}.log", "w") as log:
            subprocess.run(
                command, stdout=log, stderr=subprocess.STDOUT, check=True, cwd=REPOSITORY
            )
    return rows, seed, learning_rate, json.loads(out.read_text())["sst2"]


def summarize(runs, learning_rates):
    """Per row count and backbone: the dev-chosen learning rate, its dev and test accuracies."""
    table = {}
    for rows in sorted({r for r, _, _, _ in runs}):
        for backbone in ("pretrained", "from_scratch"):

            def results(rate, rows=rows, backbone=backbone):
                return [result[backbone] for r, _, lr, result in runs if r == rows and lr == rate]

            dev = {
                rate: statistics.mean(res["val_accuracy"][-1] for res in results(rate))
                for rate in learning_rates
            }
            chosen = max(dev, key=dev.get)
            tests = [res["test_accuracy"] for res in results(chosen)]
            table[(rows, backbone)] = {
                "learning_rate": chosen,
                "dev": dev[chosen],
                "dev_by_rate": dev,
                "test_mean": statistics.mean(tests),
                "test_min": min(tests),
                "test_max": max(tests),
                "seeds": len(tests),
            }
    return table


def main():
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--pretrained", required=True, help="a pretraining export (RUN_DIR/ours/export/bert/1)"
    )
    parser.add_argument(
        "--run-dir", default="runs/sst2-rows", help="one folder and JSON per run; reruns reuse them"
    )
    parser.add_argument("--rows", type=int, nargs="+", default=[1000, 2000, 4000])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    parser.add_argument("--learning-rates", type=float, nargs="+", default=[1e-4, 3e-4])
    parser.add_argument(
        "--steps", type=int, default=375, help="optimizer steps of every fine-tuning"
    )
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument(
        "--keep-pretrained-blocks",
        type=int,
        help="as bert_pretraining.py: keep only the embeddings and this many bottom blocks",
    )
    args = parser.parse_args()
    Path(args.run_dir).mkdir(parents=True, exist_ok=True)

    grid = [
        (rows, seed, rate)
        for rows in args.rows
        for seed in args.seeds
        for rate in args.learning_rates
    ]
    with concurrent.futures.ThreadPoolExecutor(args.processes) as pool:
        runs = list(pool.map(lambda cell: run_one(args, *cell), grid))

    table = summarize(runs, args.learning_rates)
    print(
        f"{'rows':>5}  {'backbone':<12}  {'lr (dev)':>8}  {'dev':>6}  {'test mean':>9}  "
        f"{'test range':>13}"
    )
    for (rows, backbone), row in table.items():
        print(
            f"{rows:>5}  {backbone:<12}  {row['learning_rate']:>8g}  {row['dev']:>6.3f}  "
            f"{row['test_mean']:>9.3f}  {row['test_min']:.3f}-{row['test_max']:.3f}"
        )
    suffix = "" if args.keep_pretrained_blocks is None else f"-keep{args.keep_pretrained_blocks}"
    Path(args.run_dir, f"summary{suffix}.json").write_text(
        json.dumps({f"{rows} {backbone}": row for (rows, backbone), row in table.items()}, indent=1)
    )


if __name__ == "__main__":
    main()
