"""Training throughput of the Transformer job, and the input pipeline beside it.

    python -m benchmarks.training                 # Multi30k if ../shared/data has it
    python -m benchmarks.training --steps 60 --jit
    python -m benchmarks.training --model seq2seq --attention bahdanau luong none
    python -m benchmarks.training --model seq2seq --bidirectional --batch-size 32   # the RNN's Multi30k recipe
    python -m benchmarks.training --batch-tokens 8192 --precision float32 mixed_bfloat16 float32 mixed_bfloat16

In one process, on Multi30k de→en train (or the built-in corpus when the
shared data is missing), batch 64, max_length 64, preset "small" (3+3
layers, width 256, 8 heads, FFN 512, the Multi30k literature's model):
- training steps/s and tokens/s (source + target, padding excluded) with
  `model.fit` in float32 and in `mixed_bfloat16` (and with XLA on request),
  with the job's optimizer (`transformer_adam`: `FusedAdam`, clipnorm 1)
  or, with `--optimizer keras fused`, also Keras's Adam to compare,
  and the resulting time per Multi30k epoch (the brief's anchor: a keras-hub
  Transformer of this size, padded to 40 tokens, float32, takes about 6
  minutes per epoch on this machine); with `--model seq2seq`, the RNN
  Seq2Seq preset "small" (2 × 256 LSTM; `--bidirectional` encoder) with each
  `--attention` instead (`--batch-size` for another batch than 64);
- the input pipeline alone (cached epochs, drained without Python work per
  batch) in batches/s, and its ratio to the training step rate (goal ≥ 20).
"""

import argparse
import itertools
import os
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import keras  # noqa: E402
import numpy as np  # noqa: E402

from keras_attn.models import Seq2SeqBackbone, TransformerBackbone  # noqa: E402
from keras_attn.training import MaskedSparseCrossEntropy, TransformerSchedule, transformer_adam  # noqa: E402
from pipelines import synthetic, text, tokenizers, translation  # noqa: E402

MULTI30K = Path(__file__).resolve().parents[2] / "shared" / "data" / "multi30k" / "raw"
BATCH, MAX_LENGTH = 64, 64


def corpus():
    if (MULTI30K / "train.de.gz").exists():
        return "Multi30k de-en", text.read_parallel(MULTI30K / "train.de.gz", MULTI30K / "train.en.gz")
    return "built-in corpus", synthetic.translation_corpus()["train"]


def dataset(pairs, source_tokenizer, target_tokenizer, batch_size=BATCH, batch_tokens=None, repeat=True):
    return translation.translation_dataset(
        pairs.sources, pairs.targets, source_tokenizer, target_tokenizer,
        batch_size=batch_size, max_length=MAX_LENGTH, repeat=repeat, batch_tokens=batch_tokens,
    )


def pipeline_batches_per_second(data, batches=400):
    data.take(batches).reduce(0, lambda count, _: count + 1)  # fill the cache
    start = time.perf_counter()
    data.take(batches).reduce(0, lambda count, _: count + 1)
    return batches / (time.perf_counter() - start)


def tokens_per_batch(data, batches=200):
    counts = [
        int(np.count_nonzero(inputs["source"]) + np.count_nonzero(target))
        for inputs, target in data.take(batches)
    ]
    return float(np.mean(counts))


def build_model(vocab_sizes, kind, attention, bidirectional=False):
    if kind == "seq2seq":
        return Seq2SeqBackbone(*vocab_sizes, preset="small", attention=attention, bidirectional=bidirectional, dropout=0.1)
    return TransformerBackbone(*vocab_sizes, max_sequence_length=MAX_LENGTH, preset="small", dropout=0.1)


class StepClock(keras.callbacks.Callback):
    """Wall time from the end of a `fit` call's first step to the end of its last."""

    def on_train_batch_end(self, batch, logs=None):
        self.last = time.perf_counter()
        if batch == 0:
            self.first = self.last


def training_steps_per_second(data, model, optimizer, jit, steps):
    """Steps/s of `fit` after warm-up, timed between steps.

    Not around the `fit` call: each call starts a new iterator over the
    pipeline, which took up to 8.5 s outside any step while the pipeline
    ran with tf.data's autotuning (dropping an iterator then waited for its
    thread: RESULTS.md, "Epoch starts"; the pipelines run without it since).
    """
    model.compile(
        optimizer=transformer_adam(TransformerSchedule(256, 4000), fused=optimizer == "fused"),
        loss=MaskedSparseCrossEntropy(0.1),
        jit_compile=jit,
    )
    model.fit(data, steps_per_epoch=10, epochs=1, verbose=0, shuffle=False)  # trace, warm up
    clock = StepClock()
    model.fit(data, steps_per_epoch=steps + 1, epochs=1, verbose=0, shuffle=False, callbacks=[clock])
    return steps / (clock.last - clock.first)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--jit", action="store_true", help="also measure jit_compile=True")
    parser.add_argument("--model", choices=["transformer", "seq2seq"], default="transformer")
    parser.add_argument("--attention", nargs="+", default=["bahdanau"],
                        help="seq2seq only: the attention types to measure")
    parser.add_argument("--bidirectional", action="store_true", help="seq2seq only: a bidirectional encoder")
    parser.add_argument("--batch-size", type=int, default=None,
                        help=f"pairs per batch (default {BATCH}; with --batch-tokens the most a batch holds: as many as fit)")
    parser.add_argument("--batch-tokens", type=int, help="batches of up to this many ids (the job's --batch-tokens)")
    parser.add_argument("--precision", nargs="+", default=["float32", "mixed_bfloat16"])
    parser.add_argument("--optimizer", nargs="+", choices=["fused", "keras"], default=["fused"],
                        help="the job's FusedAdam, or keras.optimizers.Adam (same arguments)")
    args = parser.parse_args()

    name, pairs = corpus()
    source_tokenizer = tokenizers.WordPieceTokenizer(tokenizers.learn_wordpiece_vocabulary(pairs.sources, 8000))
    target_tokenizer = tokenizers.WordPieceTokenizer(tokenizers.learn_wordpiece_vocabulary(pairs.targets, 8000))
    batch_size = args.batch_size or (translation.most_pairs(args.batch_tokens) if args.batch_tokens else BATCH)
    data = dataset(pairs, source_tokenizer, target_tokenizer, batch_size, args.batch_tokens)
    vocab_sizes = (source_tokenizer.vocabulary_size, target_tokenizer.vocabulary_size)
    one_pass = dataset(pairs, source_tokenizer, target_tokenizer, batch_size, args.batch_tokens, repeat=False)
    batches_per_epoch = int(one_pass.reduce(0, lambda count, _: count + 1))
    tokens = tokens_per_batch(data)
    pipeline_rate = pipeline_batches_per_second(data)
    size = f"up to {args.batch_tokens} ids" if args.batch_tokens else f"{batch_size} pairs"
    print(f"{name}: {len(pairs)} pairs, {batches_per_epoch} batches of {size} per epoch, "
          f"{tokens:.0f} real tokens per batch")
    print(f"input pipeline alone: {pipeline_rate:.0f} batches/s")
    print(f"{'model':<20} {'precision':<16} {'optimizer':<10} {'xla':<5} {'steps/s':>8} {'tokens/s':>9} "
          f"{'epoch':>8} {'pipeline/train':>15}")
    cases = itertools.product(
        args.attention if args.model == "seq2seq" else ["-"],
        args.precision,
        args.optimizer,
        (False, True) if args.jit else (False,),
    )
    for attention, precision, optimizer, jit in cases:
        keras.mixed_precision.set_global_policy(precision)
        keras.utils.set_random_seed(0)
        model = build_model(vocab_sizes, args.model, attention, args.bidirectional)
        rate = training_steps_per_second(data, model, optimizer, jit, args.steps)
        keras.mixed_precision.set_global_policy("float32")
        label = args.model if args.model == "transformer" else f"seq2seq {attention}"
        print(f"{label:<20} {precision:<16} {optimizer:<10} {str(jit):<5} {rate:8.2f} {rate * tokens:9.0f} "
              f"{batches_per_epoch / rate / 60:7.1f}m {pipeline_rate / rate:14.0f}x", flush=True)


if __name__ == "__main__":
    main()
