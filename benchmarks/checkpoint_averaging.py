"""Checkpoint averaging: the mean of the last epochs' weights, chosen on val, scored on test2016.

    python -m benchmarks.checkpoint_averaging --run-dir runs/ttq-14-1e3 --epochs 14

Vaswani et al. (2017, 6.1) averaged the last 5 checkpoints of the base
model. This reads the per-epoch weights a `time_to_quality.py` run kept
(`<run-dir>/epochs/epoch-N.weights.h5`, the settings of its run folder),
and for every window of `k` consecutive epochs ending at epoch `e` computes
the validation loss of the averaged weights (the job's label-smoothed loss)
and, for the best few windows by that loss, validation BLEU. The window
with the best validation BLEU is then scored once on test2016, beside the
single epoch the job itself would export (lowest validation loss).
Nothing is chosen on test2016.
"""

import argparse
import json
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import keras  # noqa: E402
from benchmarks.multi30k import job_config  # noqa: E402
from benchmarks.attention_maps import load_weights_of_any_age  # noqa: E402

from keras_attn import evaluation, serving  # noqa: E402
from keras_attn.jobs import translation  # noqa: E402
from keras_attn.training.averaging import mean_weights  # noqa: E402
from keras_attn.training.precision import resolve_mixed_precision  # noqa: E402
from pipelines import translation as pipelines  # noqa: E402
from pipelines.preprocessors import TranslationPreprocessor  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--run-dir", required=True, help="a time_to_quality.py run folder")
    parser.add_argument("--epochs", type=int, required=True, help="the run's epochs")
    parser.add_argument("--windows", type=int, nargs="+", default=[2, 3, 4, 5, 6], help="k values")
    parser.add_argument("--bleu-candidates", type=int, default=4,
                        help="windows with the lowest val loss whose val BLEU is computed")
    parser.add_argument("--out", default=None)
    args = parser.parse_args()

    config = job_config(
        "de-en",
        preset="small", max_sequence_length=64, dropout=0.1, run_dir=args.run_dir, export=False,
        mixed_precision=resolve_mixed_precision("auto"),
    )
    if config.mixed_precision:
        keras.mixed_precision.set_global_policy("mixed_bfloat16")
    corpora = translation.load_corpora(config)
    source_tokenizer, target_tokenizer = translation.build_tokenizers(config, corpora["train"])
    model = translation.build_task(config, TranslationPreprocessor(source_tokenizer, target_tokenizer, 64), 0.1)
    model.compile(label_smoothing=0.1)  # the job's loss
    valid = pipelines.translation_dataset(
        corpora["valid"].sources, corpora["valid"].targets, source_tokenizer, target_tokenizer,
        batch_size=64, max_length=64, shuffle=False,
    )
    translator = serving.Translator(model)

    snapshots = []
    for epoch in range(1, args.epochs + 1):
        load_weights_of_any_age(model, os.path.join(args.run_dir, "epochs", f"epoch-{epoch}.weights.h5"))
        snapshots.append([w.copy() for w in model.get_weights()])

    def use(first, last):
        """Loads the mean of epochs first..last (1-based, inclusive)."""
        model.set_weights(mean_weights(snapshots[first - 1:last]))

    def bleu(split):
        hypotheses = translation.translate_all(translator, corpora[split].sources, 4)
        return round(evaluation.bleu(hypotheses, corpora[split].targets)["bleu_tok_lc"], 2)

    rows = []
    for k in [1] + args.windows:
        for last in range(k, args.epochs + 1):
            use(last - k + 1, last)
            rows.append({"k": k, "last": last, "val_loss": round(model.evaluate(valid, verbose=0, return_dict=True)["loss"], 4)})
            print(rows[-1], flush=True)
    single = min((r for r in rows if r["k"] == 1), key=lambda r: r["val_loss"])
    averaged = sorted((r for r in rows if r["k"] > 1), key=lambda r: r["val_loss"])[: args.bleu_candidates]
    for row in [single] + averaged:
        use(row["last"] - row["k"] + 1, row["last"])
        row["val_bleu"] = bleu("valid")
        print(row, flush=True)
    chosen = max(averaged, key=lambda r: r["val_bleu"])
    for row in (single, chosen):
        use(row["last"] - row["k"] + 1, row["last"])
        row["test_bleu"] = bleu("test")
    print(f"single best epoch (val loss): {single}")
    print(f"averaged, chosen on val BLEU: {chosen}")
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"command": " ".join(sys.argv), "rows": rows, "single": single, "chosen": chosen}, f, indent=1)


if __name__ == "__main__":
    main()
