"""What the training metrics cost a step: BERT's `PretrainingMetrics`, the translators' token metrics.

    python -m benchmarks.metrics_cost                       # BERT-mini pretraining
    python -m benchmarks.metrics_cost --model seq2seq       # Bahdanau, bidirectional, mixed_bfloat16
    python -m benchmarks.metrics_cost --model transformer --precision float32
    python -m benchmarks.metrics_cost --predictions 20 39 52 --precision mixed_bfloat16   # BERT's mask rates

The runner's `TrainingSteps` with and without the metrics, on one fixed
random batch, 15 steps at a time, alternated three times in one process;
prints ms/step of each repeat and the medians.

- `bert`: BERT-mini, sequence 128, 20 predictions, vocabulary 8,000,
  batch 32, with and without `PretrainingMetrics`.
- `seq2seq` / `transformer`: preset "small" (the Seq2Seq model Bahdanau
  with a bidirectional encoder), batch 64, source and target 24 tokens,
  vocabularies 8,000, with the translation job's `MaskedTokenAccuracy`
  and `MaskedPerplexity`, without them, and with the metrics as they were
  computed before (`keras.ops.argmax`, and the fused cross-entropy, which
  also computes a gradient, for the perplexity).
- `--predictions N ...`: instead, the BERT step (with its metrics) at each
  number of masked positions per pair (20, 39, 52: `--mask-rate` 0.15,
  0.3, 0.4 of 128 tokens), what a higher mask rate costs.
"""

import argparse
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")


def bert_case(rng, predictions=20):
    import numpy as np

    from keras_attn.models.bert import BertBackbone, BertPretrainer
    from keras_attn.training import adamw

    class WithoutMetrics(BertPretrainer):
        def compute_metrics(self, x, y, y_pred, sample_weight=None):
            return {}

    batch, length, vocabulary = 32, 128, 8000
    features = {
        "token_ids": rng.integers(5, vocabulary, (batch, length)).astype("int32"),
        "segment_ids": np.zeros((batch, length), "int32"),
        "mask_positions": np.sort(rng.integers(1, length, (batch, predictions))).astype("int32"),
    }
    targets = {
        "mlm_labels": rng.integers(5, vocabulary, (batch, predictions)).astype("int32"),
        "mlm_weights": np.ones((batch, predictions), "float32"),
        "nsp_labels": rng.integers(0, 2, (batch,)).astype("int32"),
    }

    def build(task):
        backbone = BertBackbone(vocabulary_size=vocabulary, preset="mini", max_sequence_length=length)
        model = task(backbone)
        model.compile(optimizer=adamw(1e-4))  # the task's loss, and its PretrainingMetrics unless left out
        return model

    builds = {"with PretrainingMetrics": lambda: build(BertPretrainer), "without": lambda: build(WithoutMetrics)}
    return (features, targets), builds


def translation_case(rng, model_name):
    import keras

    from keras_attn.models import Seq2SeqBackbone, TransformerBackbone
    from keras_attn.training import MaskedPerplexity, MaskedSparseCrossEntropy, MaskedTokenAccuracy
    from keras_attn.training.losses import token_cross_entropy
    from keras_attn.training.optimizers import transformer_adam

    class KerasArgmaxAccuracy(MaskedTokenAccuracy):
        def token_values(self, targets, logits):
            predicted = keras.ops.cast(keras.ops.argmax(logits, axis=-1), "int32")
            return keras.ops.cast(keras.ops.equal(predicted, targets), "float32")

    class FusedCrossEntropyPerplexity(MaskedPerplexity):
        def token_values(self, targets, logits):
            return token_cross_entropy(targets, logits)

    batch, length, vocabulary = 64, 24, 8000
    source = rng.integers(4, vocabulary, (batch, length)).astype("int32")
    target = rng.integers(4, vocabulary, (batch, length + 1)).astype("int32")
    inputs = {"source": source, "target_in": target[:, :-1]}

    def build(metrics):
        if model_name == "transformer":
            model = TransformerBackbone(vocabulary, vocabulary, max_sequence_length=64, preset="small", dropout=0.1)
        else:
            model = Seq2SeqBackbone(vocabulary, vocabulary, preset="small", attention="bahdanau",
                            bidirectional=True, dropout=0.2)
        model.compile(transformer_adam(1e-3), MaskedSparseCrossEntropy(0.1), metrics=metrics or None)
        return model

    builds = {
        "with the token metrics": lambda: build([MaskedTokenAccuracy(), MaskedPerplexity()]),
        "without": lambda: build([]),
        "with them as before": lambda: build([KerasArgmaxAccuracy(), FusedCrossEntropyPerplexity()]),
    }
    return (inputs, target[:, 1:]), builds


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", choices=["bert", "seq2seq", "transformer"], default="bert")
    parser.add_argument("--precision", choices=["float32", "mixed_bfloat16"], default=None,
                        help="default: float32 for bert, mixed_bfloat16 for the translators")
    parser.add_argument("--predictions", type=int, nargs="+",
                        help="bert: time the step at these numbers of masked positions instead")
    args = parser.parse_args()
    if args.predictions and args.model != "bert":
        parser.error("--predictions is for --model bert")

    import keras
    import numpy as np
    import tensorflow as tf

    from keras_attn.training.steps import TrainingSteps, build_metrics

    from benchmarks.alternate import alternate  # benchmarks/alternate.py (this script's folder)

    precision = args.precision or ("float32" if args.model == "bert" else "mixed_bfloat16")
    keras.mixed_precision.set_global_policy(precision)
    rng = np.random.default_rng(0)
    if args.predictions:  # one case per prediction count, each with the metrics
        cases = {}
        for count in args.predictions:
            batch, builds = bert_case(rng, count)
            cases[f"{count} predictions"] = (batch, builds["with PretrainingMetrics"])
    else:
        batch, builds = bert_case(rng) if args.model == "bert" else translation_case(rng, args.model)
        cases = {name: (batch, build) for name, build in builds.items()}
    strategy = tf.distribute.get_strategy()
    runs = {}
    for name, (batch, build) in cases.items():
        data = tf.data.Dataset.from_tensors(batch).repeat()
        keras.utils.set_random_seed(0)
        model = build()
        model(batch[0])
        model.optimizer.build(model.trainable_variables)
        build_metrics(model, next(iter(data)))
        steps = TrainingSteps(model, strategy)
        iterator = iter(data)
        for _ in range(3):  # trace and warm up
            steps.train(iterator)
        runs[name] = (steps, iterator)
    times = alternate(
        {name: (lambda steps=steps, iterator=iterator: steps.train(iterator)["loss"])
         for name, (steps, iterator) in runs.items()},
        repeats=3, calls=15,
    )
    print(f"{args.model}, {precision}")
    for name, values in times.items():
        print(f"{name}: {[round(v) for v in values]} ms/step, median {sorted(values)[1]:.0f}")
    print(f"load average: {os.getloadavg()}")


if __name__ == "__main__":
    main()
