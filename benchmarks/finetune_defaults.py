"""Fine-tuning's default learning rate on the default pretraining, against BERT's 1e-4.

    python -m benchmarks.finetune_defaults --run-dir runs/finetune-defaults --out out/finetune-defaults.json

Pretrains BERT as `keras-attn pretrain bert` does with its defaults (the
built-in documents, preset tiny), then fine-tunes it through the CLI on the
8-label task of the built-in documents (each document's first sentence and its
topic, `synthetic_documents.labelled_documents`, seed 11), for each number of
documents and each peak learning rate, 3 epochs (finetune's default) with 10%
held out: the validation accuracy is `finetune`'s own line. Chance is 1/8.
`keras_attn.jobs.bert.finetune_learning_rate` quotes the result.
"""

import argparse
import contextlib
import io
import json
import os
import re
from pathlib import Path

from keras_attn import cli
from pipelines import synthetic_documents


def run(argv):
    output = io.StringIO()
    with contextlib.redirect_stdout(output):
        code = cli.main(argv)
    if code:
        raise SystemExit(f"{' '.join(argv)} exited with {code}:\n{output.getvalue()}")
    return output.getvalue()


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--run-dir", default="runs/finetune-defaults")
    parser.add_argument("--documents", type=int, nargs="+", default=[500, 2000])
    parser.add_argument("--learning-rates", type=float, nargs="+", default=[1e-4, 1e-3])
    parser.add_argument("--out", default=None, help="a JSON file for the results")
    args = parser.parse_args(argv)
    root = Path(args.run_dir)
    pretrained = root / "bert"
    printed = run(["pretrain", "bert", "--run-dir", str(pretrained), "--no-export"])
    print(printed.splitlines()[1])  # the precision line
    print(next(line for line in printed.splitlines() if line.startswith("validation: ")))
    results = []
    for documents in args.documents:
        train = root / f"topics-{documents}.tsv"
        labelled = synthetic_documents.labelled_documents(documents, seed=11)
        train.write_text("".join(f"{topic}\t{document[0]}\n" for topic, document in labelled))
        for learning_rate in args.learning_rates:
            printed = run([
                "finetune", str(pretrained), "--train", str(train), "--learning-rate", str(learning_rate),
                "--precision", "float32", "--run-dir", str(root / f"classifier-{documents}-{learning_rate:g}"),
                "--no-export",
            ])
            accuracy, examples = re.search(r"^valid: accuracy ([\d.]+) on (\d+) examples$", printed, re.M).groups()
            results.append(dict(documents=documents, training_rows=documents - int(examples),
                                learning_rate=learning_rate, valid_accuracy=float(accuracy)))
            print(f"{documents} documents ({results[-1]['training_rows']} training rows), peak learning rate "
                  f"{learning_rate:g}: validation accuracy {float(accuracy):.1%} on {examples}", flush=True)
    if args.out:
        os.makedirs(os.path.dirname(args.out) or ".", exist_ok=True)
        with open(args.out, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
