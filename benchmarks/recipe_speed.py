"""How long a published training recipe takes here: one `Seq2SeqLM`
step on a batch of the recipe's size.

    python -m benchmarks.recipe_speed --precision float32 mixed_bfloat16

Builds the Transformer of the recipe (by default fairseq's transformer_tiny of
Wu et al. 2021's Multi30k en→de baseline: 4+4 layers, width 128, 4 heads,
feed-forward 256, dropout 0.3, all embeddings shared over a 10,000-piece
vocabulary), compiles it as the job does (`Seq2SeqLM.compile`: Adam, label
smoothing, the inverse-square-root schedule), and times `--steps` `fit` steps
on one random batch of `--batch` × `--length` ids a side (160 × 26: about the
recipe's 4,096 tokens an update) after 5 warm-up steps, for each precision in
turn. Prints ms a step, target tokens a second and what `--updates` updates
of that size would take.
"""

import argparse
import os
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")


def main():
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--precision", nargs="+", default=["float32", "mixed_bfloat16"])
    parser.add_argument("--num-layers", type=int, default=4)
    parser.add_argument("--hidden-dim", type=int, default=128)
    parser.add_argument("--num-heads", type=int, default=4)
    parser.add_argument("--intermediate-dim", type=int, default=256)
    parser.add_argument("--vocab-size", type=int, default=10000)
    parser.add_argument("--batch", type=int, default=160)
    parser.add_argument("--length", type=int, default=26)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--updates", type=int, default=8000)
    args = parser.parse_args()

    import keras
    import numpy as np
    import tensorflow as tf

    from keras_attn.models import Seq2SeqLM, TransformerBackbone

    rng = np.random.default_rng(0)
    ids = lambda: rng.integers(7, args.vocab_size, (args.batch, args.length)).astype("int32")  # noqa: E731
    batch = tf.data.Dataset.from_tensors(({"source": ids(), "target_in": ids()}, ids())).repeat()
    for precision in args.precision:
        keras.mixed_precision.set_global_policy(precision)
        backbone = TransformerBackbone(
            args.vocab_size,
            args.vocab_size,
            num_layers=args.num_layers,
            hidden_dim=args.hidden_dim,
            num_heads=args.num_heads,
            intermediate_dim=args.intermediate_dim,
            dropout=0.3,
            share_embeddings=True,
            max_sequence_length=128,
        )
        model = Seq2SeqLM(backbone)
        model.compile(learning_rate=5e-3, warmup_steps=2000)
        model.fit(batch, steps_per_epoch=5, epochs=1, verbose=0)
        started = time.perf_counter()
        model.fit(batch, steps_per_epoch=args.steps, epochs=1, verbose=0)
        seconds = (time.perf_counter() - started) / args.steps
        print(
            f"{precision}: {model.count_params():,} parameters, {1000 * seconds:.0f} ms a step of "
            f"{args.batch} x {args.length} ids a side, {args.batch * args.length / seconds:,.0f} "
            f"target tokens/s; {args.updates} updates: {args.updates * seconds / 60:.0f} min",
            flush=True,
        )


if __name__ == "__main__":
    main()
