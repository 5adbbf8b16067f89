"""What `PretrainingMetrics` costs a BERT pretraining step (its second cross-entropy and argmax).

    python benchmarks/bert_metrics_cost.py

BERT-mini, sequence 128, 20 predictions, vocabulary 8,000, batch 32, float32: the runner's
`TrainingSteps` with and without the metric, on one fixed random batch, 15 steps at a time,
alternated three times in one process. Prints ms/step of each repeat and the medians.
"""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")


def main():
    import numpy as np
    import tensorflow as tf

    from keras_attn.models.bert import bert_backbone, bert_pretrainer
    from keras_attn.training import PretrainingLoss, PretrainingMetrics, adamw
    from keras_attn.training.steps import TrainingSteps

    from alternate import alternate  # benchmarks/alternate.py (this script's folder)

    batch, length, predictions, vocabulary = 32, 128, 20, 8000
    rng = np.random.default_rng(0)
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
    data = tf.data.Dataset.from_tensors((features, targets)).repeat()
    strategy = tf.distribute.get_strategy()
    runs = {}
    for name, metrics in (("with PretrainingMetrics", [PretrainingMetrics]), ("without", [])):
        model = bert_pretrainer(bert_backbone(vocabulary_size=vocabulary, preset="mini", max_sequence_length=length))
        model(features)
        optimizer = adamw(1e-4)
        optimizer.build(model.trainable_variables)
        steps = TrainingSteps(model, optimizer, PretrainingLoss(), [m() for m in metrics], strategy)
        iterator = iter(data)
        for _ in range(3):  # trace and warm up
            steps.train(iterator)
        runs[name] = (steps, iterator)
    times = alternate(
        {name: (lambda steps=steps, iterator=iterator: steps.train(iterator)["loss"])
         for name, (steps, iterator) in runs.items()},
        repeats=3, calls=15,
    )
    for name, values in times.items():
        print(f"{name}: {[round(v) for v in values]} ms/step, median {sorted(values)[1]:.0f}")
    print(f"load average: {os.getloadavg()}")


if __name__ == "__main__":
    main()
