"""Time to quality: training wall time until test2016 BLEU first reaches a bar.

    python -m benchmarks.time_to_quality --epochs 5 --batch-size 64 --learning-rate 1e-3 \
        --warmup-steps 800 --run-dir runs/ttq-5
    python -m benchmarks.time_to_quality --model seq2seq --attention luong --bar 30 ...

The Transformer job
(`translation.run`, Multi30k de→en, preset small, beam 4), or with
`--model seq2seq` the RNN job with multi30k.py's model flags, trains with
validation after every epoch, as a normal run does; a callback keeps each
epoch's weights and the wall time since training began (the first step's
tracing and every validation included, the snapshot writes excluded).
After training, each epoch is scored the way a run stopped there would be:
the weights of the epoch with the lowest validation loss so far (the model
selection uses val only), on val and on test2016, tokenized-lowercased
BLEU (close to the published scores' scoring, not the same: see
benchmarks/REFERENCES.md and benchmarks/published_scoring.py). Prints a row
per epoch, the first epoch whose chosen model reaches `--bar` on test2016,
and the final model's BLEU by source length.
Start from an empty run folder: the times of a resumed run would miss its
first part. The data is read from ../shared/data/multi30k, never copied.
"""

import argparse
import dataclasses
import json
import os
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import keras  # noqa: E402  (after TF_CPP_MIN_LOG_LEVEL)

from benchmarks.multi30k import DATA, add_model_arguments, bleu_by_source_length, job_config  # noqa: E402
from keras_attn import evaluation, serving  # noqa: E402
from keras_attn.config import Seq2SeqConfig, TranslationConfig  # noqa: E402
from keras_attn.jobs import translation  # noqa: E402
from keras_attn.training.precision import describe_precision, resolve_mixed_precision  # noqa: E402


class EpochSnapshots(keras.callbacks.Callback):
    """Saves each epoch's weights and `{epoch, seconds, val_loss}` rows (`epochs.json`) in `folder`.

    `seconds`: wall time since training began, without the time spent saving.
    """

    def __init__(self, folder):
        super().__init__()
        self.folder = folder
        self.rows = []

    def on_train_begin(self, logs=None):
        os.makedirs(self.folder, exist_ok=True)
        self.started, self.excluded = time.time(), 0.0

    def on_epoch_end(self, epoch, logs=None):
        seconds = time.time() - self.started - self.excluded
        writing = time.time()
        self.model.save_weights(os.path.join(self.folder, f"epoch-{epoch + 1}.weights.h5"))
        self.rows.append(
            {"epoch": epoch + 1, "seconds": round(seconds, 1), "val_loss": float(logs["val_loss"])}
        )
        with open(os.path.join(self.folder, "epochs.json"), "w") as f:
            json.dump(self.rows, f, indent=1)
        self.excluded += time.time() - writing


class _Snapshots:
    """A job config whose runs also keep every epoch's weights and time in `snapshot_dir`."""

    def callbacks(self):
        return [*super().callbacks(), EpochSnapshots(self.snapshot_dir)]


@dataclasses.dataclass
class SnapshotConfig(_Snapshots, TranslationConfig):
    snapshot_dir: str = None


@dataclasses.dataclass
class Seq2SeqSnapshotConfig(_Snapshots, Seq2SeqConfig):
    snapshot_dir: str = None


def score_epochs(config, model, rows, corpora):
    """Scores, for each epoch, the task (`Seq2SeqLM`) chosen on val
    so far; returns the table rows.
    """
    translator = serving.Translator(model)
    scored = {}
    table = []
    for row in rows:
        so_far = rows[: row["epoch"]]
        chosen = min(so_far, key=lambda r: r["val_loss"])["epoch"]
        if chosen not in scored:
            model.load_weights(os.path.join(config.snapshot_dir, f"epoch-{chosen}.weights.h5"))
            scored[chosen] = {
                split: evaluation.bleu(
                    translation.translate_all(
                        translator, corpora[split].sources, config.beam_width
                    ),
                    corpora[split].targets,
                )["bleu_tok_lc"]
                for split in ("valid", "test")
            }
        table.append(
            dict(
                row,
                chosen_epoch=chosen,
                val_bleu=round(scored[chosen]["valid"], 2),
                test_bleu=round(scored[chosen]["test"], 2),
            )
        )
    return table


def main():
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    add_model_arguments(parser)
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--learning-rate", type=float, default=1e-3)
    parser.add_argument("--warmup-steps", type=int, default=800)
    parser.add_argument("--dropout", type=float, default=0.1)
    parser.add_argument(
        "--precision", choices=["auto", "float32", "mixed_bfloat16"], default="auto"
    )
    parser.add_argument(
        "--seed", type=int, default=0, help="seeds the initial weights, data order and dropout"
    )
    parser.add_argument("--bar", type=float, default=36.5, help="test2016 lc-BLEU to reach")
    parser.add_argument("--run-dir", required=True)
    parser.add_argument("--out", default=None, help="write the table as JSON here")
    args = parser.parse_args()
    if not os.path.isdir(DATA):
        sys.exit(f"Multi30k not found at {DATA}")

    mixed_precision = resolve_mixed_precision(args.precision)
    config = job_config(
        "de-en",
        args,
        transformer_config=SnapshotConfig,
        seq2seq_config=Seq2SeqSnapshotConfig,
        preset="small",
        epochs=args.epochs,
        batch_size=args.batch_size,
        max_sequence_length=64,
        learning_rate=args.learning_rate,
        warmup_steps=args.warmup_steps,
        dropout=args.dropout,
        mixed_precision=mixed_precision,
        seed=args.seed,
        run_dir=args.run_dir,
        verbose=2,
        export=False,
        snapshot_dir=os.path.join(args.run_dir, "epochs"),
    )
    print(describe_precision(mixed_precision))
    result = translation.run(config)
    with open(os.path.join(config.snapshot_dir, "epochs.json")) as f:
        rows = json.load(f)
    corpora = translation.load_corpora(config)
    table = score_epochs(config, result.model, rows, corpora)
    print("epoch  train s  val loss  chosen  val BLEU  test2016 BLEU")
    for row in table:
        print(
            f"{row['epoch']:5d}  {row['seconds']:7.0f}  {row['val_loss']:8.4f}  "
            f"{row['chosen_epoch']:6d}  {row['val_bleu']:8.2f}  {row['test_bleu']:13.2f}"
        )
    reached = next((row for row in table if row["test_bleu"] >= args.bar), None)
    if reached:
        print(
            f"test2016 lc-BLEU {reached['test_bleu']} >= {args.bar} after epoch "
            f"{reached['epoch']}, {reached['seconds']:.0f} s of training"
        )
    else:
        print(f"test2016 lc-BLEU never reached {args.bar}")
    corpus = corpora["test"]
    by_length = bleu_by_source_length(corpus.sources, result.metrics["hypotheses"], corpus.targets)
    print("the final model (chosen on val) by source length:", json.dumps(by_length))
    if args.out:
        with open(args.out, "w") as f:
            json.dump(
                {
                    "command": " ".join(sys.argv),
                    "epochs": table,
                    "bleu_by_source_length": by_length,
                    "final_test": {k: v for k, v in result.metrics.items() if k != "hypotheses"},
                },
                f,
                indent=1,
            )


if __name__ == "__main__":
    main()
