"""Multi30k quality run: train a translation job on real data, score test2016.

    python -m benchmarks.multi30k --direction de-en --epochs 20 [--mixed-precision]
    python -m benchmarks.multi30k --direction en-de --epochs 20 [--mixed-precision]
    python -m benchmarks.multi30k --model seq2seq --attention bahdanau --epochs 6 ...

Trains on train (29,000 pairs), keeps the best weights on val (1,014 pairs;
all tuning happens here), and reports test2016 (1,000 pairs) BLEU two ways:
SacreBLEU on detokenized cased text and on lowercased text (tokenized
lowercased: close to the published numbers' scoring, not the same; see
benchmarks/REFERENCES.md and benchmarks/published_scoring.py),
with the training wall time and the parameter count, and the lowercased
BLEU of the sentences in each source-length bucket (1-10, 11-20, 21-30, 31+
words), where attention's advantage should grow. The data is read from
../shared/data/multi30k (raw/), never copied into the project.

`--tokenized` trains and tests on the Moses-tokenized, lowercased,
normalized text (tok/*.lc.norm.tok.*) and adds BLEU on that text as
tokenized (`evaluation.tokenized_bleu`: multi-bleu.perl's, fairseq's), how
the published Transformer-tiny en→de figure (41.02) was scored:

    python -m benchmarks.multi30k --direction en-de --tokenized --subword bpe --shared-vocab \
        --vocab-size 10000 \
        --num-layers 4 --hidden-dim 128 --num-heads 4 --intermediate-dim 256 --dropout 0.3 \
        --schedule inverse_sqrt --learning-rate 5e-3 --warmup-steps 2000 --batch-tokens 4096 \
        --epochs 50 --average-epochs 10 --beam-width 5 --mixed-precision
"""

import argparse
import json
import os
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

from keras_attn import cli  # noqa: E402
from keras_attn.cli import TRAIN_JOBS  # noqa: E402
from keras_attn.config import SCHEDULES, SUBWORDS, Seq2SeqConfig, TranslationConfig  # noqa: E402

MULTI30K = os.path.join(
    os.path.dirname(os.path.abspath(__file__)), "..", "..", "shared", "data", "multi30k"
)
DATA = os.path.join(MULTI30K, "raw")
# Moses-tokenized, lowercased, normalized: <split>.lc.norm.tok.<lang>.gz
TOKENIZED = os.path.join(MULTI30K, "tok")
BUCKETS = ((1, 10), (11, 20), (21, 30), (31, None))


def bleu_by_source_length(sources, hypotheses, references):
    """Lowercased BLEU of the test sentences in each source-length bucket (words)."""
    from keras_attn import evaluation

    scores = {}
    for low, high in BUCKETS:
        rows = [i for i, s in enumerate(sources) if low <= len(s.split()) <= (high or 10**9)]
        name = f"{low}-{high}" if high else f"{low}+"
        if rows:
            bleu = evaluation.bleu([hypotheses[i] for i in rows], [references[i] for i in rows])
            scores[name] = {"sentences": len(rows), "bleu_tok_lc": round(bleu["bleu_tok_lc"], 2)}
    return scores


SEQ2SEQ_FLAGS = ("attention", "cell", "score", "bidirectional", "scheduled_sampling")


def add_model_arguments(parser):
    """`--model` and the Seq2Seq model's flags, made by the CLI from `Seq2SeqConfig`'s fields."""
    parser.add_argument("--model", choices=list(TRAIN_JOBS), default="transformer")
    cli.add_config_flags(parser, Seq2SeqConfig, only=SEQ2SEQ_FLAGS)


def job_config(
    direction,
    model_args=None,
    transformer_config=None,
    seq2seq_config=None,
    tokenized=False,
    **settings,
):
    """The job's config for Multi30k `direction` (train, val, test2016).

    `model_args`: the flags of `add_model_arguments`, parsed (`None`: the
    Transformer). `transformer_config` / `seq2seq_config`: config classes to
    use instead of the jobs' own (e.g. subclasses that add callbacks).
    `tokenized`: the Moses-tokenized files instead of the raw ones.
    """
    src, tgt = direction.split("-")
    folder, infix = (TOKENIZED, ".lc.norm.tok") if tokenized else (DATA, "")
    path = lambda split, lang: os.path.join(folder, f"{split}{infix}.{lang}.gz")  # noqa: E731
    data = dict(
        src=path("train", src),
        tgt=path("train", tgt),
        valid_src=path("val", src),
        valid_tgt=path("val", tgt),
        test_src=path("test_2016_flickr", src),
        test_tgt=path("test_2016_flickr", tgt),
    )
    if model_args is not None and model_args.model == "seq2seq":
        model = {
            flag: getattr(model_args, flag) for flag in SEQ2SEQ_FLAGS if hasattr(model_args, flag)
        }
        return (seq2seq_config or Seq2SeqConfig)(**model, **data, **settings)
    return (transformer_config or TranslationConfig)(**data, **settings)


def _architecture(args):
    """The architecture flags given, refused in one line where the
    model has no such part (the RNN's heads).
    """
    given = {
        name: getattr(args, name)
        for name in TranslationConfig.ARCHITECTURE
        if getattr(args, name) is not None
    }
    own = Seq2SeqConfig.ARCHITECTURE if args.model == "seq2seq" else TranslationConfig.ARCHITECTURE
    if args.model == "seq2seq" and args.separate_embeddings:
        given["separate_embeddings"] = True  # refused below: the RNN has a table per side already
    for name in set(given) - set(own):
        sys.exit(f"--{name.replace('_', '-')}: for --model transformer only")
    return given


def main():
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--direction", choices=["de-en", "en-de"], default="de-en")
    add_model_arguments(parser)
    parser.add_argument("--preset", default="small")
    parser.add_argument("--epochs", type=int, default=20)
    parser.add_argument(
        "--batch-size",
        type=int,
        default=None,
        help="pairs a batch (default: 128; with --batch-tokens, as many as the budget holds)",
    )
    parser.add_argument("--vocab-size", type=int, default=8000)
    parser.add_argument("--shared-vocab", action="store_true")
    parser.add_argument(
        "--separate-embeddings",
        action="store_true",
        help="with --shared-vocab: the encoder's embedding its own",
    )
    parser.add_argument("--lowercase", action="store_true")
    parser.add_argument("--dropout", type=float, default=0.1)
    parser.add_argument("--schedule", choices=SCHEDULES, default="cosine")
    parser.add_argument("--learning-rate", type=float, default=1e-3)
    parser.add_argument("--warmup-steps", type=int, default=1000)
    parser.add_argument("--beam-width", type=int, default=4)
    parser.add_argument("--mixed-precision", action="store_true")
    parser.add_argument(
        "--max-updates",
        type=int,
        default=None,
        help="the run's length in updates instead of --epochs",
    )
    parser.add_argument(
        "--average-last",
        type=int,
        default=1,
        help="the model is the mean of the weights at the last N backups by update",
    )
    parser.add_argument("--backup-every", type=int, default=500, help="updates between backups")
    parser.add_argument(
        "--average-epochs",
        type=int,
        default=1,
        help="checkpoint averaging: also validate the mean of the last K epochs' weights",
    )
    parser.add_argument(
        "--tokenized",
        action="store_true",
        help="the Moses-tokenized lowercased text (tok/), scored as tokenized too",
    )
    parser.add_argument("--subword", choices=SUBWORDS, default="wordpiece")
    parser.add_argument("--batch-tokens", type=int, default=None)
    for name in TranslationConfig.ARCHITECTURE:
        parser.add_argument("--" + name.replace("_", "-"), type=int, default=None)
    parser.add_argument("--run-dir", default=None)
    parser.add_argument("--out", default=None, help="write the metrics as JSON here")
    parser.add_argument(
        "--export-root",
        default=None,
        help="also export the model as a SavedModel under DIR/<transformer|seq2seq>/<version>",
    )
    args = parser.parse_args()
    if not os.path.isdir(DATA):
        sys.exit(f"Multi30k not found at {DATA}")

    from keras_attn.jobs import translation
    from keras_attn.training.runner import read_history
    from pipelines import text

    config = job_config(
        args.direction,
        args,
        tokenized=args.tokenized,
        subword=args.subword,
        batch_tokens=args.batch_tokens,
        **_architecture(args),
        preset=args.preset,
        epochs=args.epochs,
        batch_size=args.batch_size or (None if args.batch_tokens else 128),
        vocabulary_size=args.vocab_size,
        shared_vocab=args.shared_vocab,
        separate_embeddings=args.separate_embeddings,
        lowercase=args.lowercase,
        dropout=args.dropout,
        schedule=args.schedule,
        learning_rate=args.learning_rate,
        warmup_steps=args.warmup_steps,
        beam_width=args.beam_width,
        mixed_precision=args.mixed_precision,
        max_sequence_length=64,
        average_epochs=args.average_epochs,
        max_updates=args.max_updates,
        average_last=args.average_last,
        backup_every=args.backup_every,
        run_dir=args.run_dir or f"runs/multi30k-{args.direction}-{args.model}",
        verbose=2,
        export=args.export_root is not None,
        export_root=args.export_root or "saved_models",
    )
    started = time.time()
    result = translation.run(config)
    metrics = {k: v for k, v in result.metrics.items() if k != "hypotheses"}
    test = text.read_parallel(config.test_src, config.test_tgt)
    if args.tokenized:
        from keras_attn.evaluation import tokenized_bleu

        metrics.update(tokenized_bleu(result.metrics["hypotheses"], test.targets))
    metrics["bleu_by_source_length"] = bleu_by_source_length(
        test.sources, result.metrics["hypotheses"], test.targets
    )
    history = read_history(config.run_dir)
    metrics.update(
        direction=args.direction,
        wall_seconds=round(time.time() - started),
        epochs=args.epochs,
        best_val_loss=min(
            history.get("val_loss", [float("nan")]) + history.get("val_loss_averaged", [])
        ),
        command=" ".join(sys.argv),
    )
    print(json.dumps(metrics, indent=2))
    if args.out:
        with open(args.out, "w") as f:
            json.dump(metrics, f, indent=2)


if __name__ == "__main__":
    main()
