"""Multi30k quality run: train the Transformer job on real data, score test2016.

    python benchmarks/multi30k.py --direction de-en --epochs 20 [--mixed-precision]
    python benchmarks/multi30k.py --direction en-de --epochs 20 [--mixed-precision]

Trains on train (29,000 pairs), keeps the best weights on val (1,014 pairs;
all tuning happens here), and reports test2016 (1,000 pairs) BLEU two ways:
SacreBLEU on detokenized cased text and on lowercased text (tokenized
lowercased, how ../shared/data/REFERENCES.md's published numbers were made),
with the training wall time and the parameter count. The data is read from
../shared/data/multi30k (raw/), never copied into the project.
"""

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "shared", "data", "multi30k", "raw")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--direction", choices=["de-en", "en-de"], default="de-en")
    parser.add_argument("--preset", default="small")
    parser.add_argument("--epochs", type=int, default=20)
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--vocab-size", type=int, default=8000)
    parser.add_argument("--shared-vocab", action="store_true")
    parser.add_argument("--lowercase", action="store_true")
    parser.add_argument("--dropout", type=float, default=0.1)
    parser.add_argument("--schedule", choices=["cosine", "noam"], default="cosine")
    parser.add_argument("--learning-rate", type=float, default=1e-3)
    parser.add_argument("--warmup-steps", type=int, default=1000)
    parser.add_argument("--beam-width", type=int, default=4)
    parser.add_argument("--mixed-precision", action="store_true")
    parser.add_argument("--run-dir", default=None)
    parser.add_argument("--out", default=None, help="write the metrics as JSON here")
    args = parser.parse_args()
    if not os.path.isdir(DATA):
        sys.exit(f"Multi30k not found at {DATA}")

    from keras_attn.jobs import translation

    src, tgt = args.direction.split("-")
    path = lambda split, lang: os.path.join(DATA, f"{split}.{lang}.gz")  # noqa: E731
    config = translation.TranslationConfig(
        src=path("train", src), tgt=path("train", tgt),
        valid_src=path("val", src), valid_tgt=path("val", tgt),
        test_src=path("test_2016_flickr", src), test_tgt=path("test_2016_flickr", tgt),
        preset=args.preset, epochs=args.epochs, batch_size=args.batch_size,
        vocab_size=args.vocab_size, shared_vocab=args.shared_vocab, lowercase=args.lowercase,
        dropout=args.dropout, schedule=args.schedule, learning_rate=args.learning_rate,
        warmup_steps=args.warmup_steps, beam_width=args.beam_width,
        mixed_precision=args.mixed_precision, max_length=64,
        run_dir=args.run_dir or f"runs/multi30k-{args.direction}", export=False, verbose=2,
    )
    started = time.time()
    result = translation.run(config)
    metrics = {k: v for k, v in result.metrics.items() if k != "hypotheses"}
    metrics.update(
        direction=args.direction, wall_seconds=round(time.time() - started),
        epochs=args.epochs, best_val_loss=min(result.history.get("val_loss", [float("nan")])),
        command=" ".join(sys.argv),
    )
    print(json.dumps(metrics, indent=2))
    if args.out:
        with open(args.out, "w") as f:
            json.dump(metrics, f, indent=2)


if __name__ == "__main__":
    main()
