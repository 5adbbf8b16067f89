"""Forward + backward time of the cross-entropy over a vocabulary, fused op against log-sum-exp.

    python -m benchmarks.cross_entropy
    python -m benchmarks.cross_entropy --threads 1     # also PyTorch's, when torch is installed

Both cases also time `token_cross_entropy` as the losses now run it (the
log-sum-exp form as one XLA cluster, compiled once per shape before timing)
and, with torch importable, `torch.nn.functional.cross_entropy` (with
`label_smoothing`: the anchors' loss) on the same logits.

Below `XLA_FROM_VOCABULARY` logits a row the losses (`keras_attn/training/losses.py`)
use TensorFlow's fused ops, `sparse_softmax_cross_entropy_with_logits`
(ε = 0) and `softmax_cross_entropy_with_logits` against a dense smoothed
target, which larger vocabularies used before (BERT's masked LM and the
translation models, ε = 0.1). The log-sum-exp form writes the same loss as
log Σ exp(l − m) + m − l[y] (smoothed: minus (1 − ε)·l[y] + ε·mean(l)),
with the gradient left to autodiff. Two shapes:
BERT-mini's masked positions (32 × 20 rows, 8,000 logits) and a Transformer
batch (1,600 target tokens, 8,000 logits). float32, one `tf.function` each,
alternated three times in this process, 30 calls each; prints ms per call
and checks that each pair agrees.
"""

import argparse
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from benchmarks.alternate import alternate  # noqa: E402  (benchmarks/alternate.py, this script's folder)
from keras_attn.training.losses import token_cross_entropy  # noqa: E402

VOCABULARY = 8000


def log_sum_exp(logits):
    shift = tf.stop_gradient(tf.reduce_max(logits, -1, keepdims=True))
    return tf.math.log(tf.reduce_sum(tf.exp(logits - shift), -1)) + shift[:, 0]


def forms(labels, epsilon):
    def ours(logits):
        return token_cross_entropy(labels[None], logits[None], epsilon)

    if not epsilon:
        return {
            "fused sparse op": lambda l: tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=l),
            "log-sum-exp": lambda l: log_sum_exp(l) - tf.gather(l, labels, batch_dims=1),
            "ours (XLA)": ours,
        }
    uniform = epsilon / VOCABULARY

    def fused(logits):
        target = tf.one_hot(labels, VOCABULARY, on_value=1 - epsilon + uniform, off_value=uniform)
        return tf.nn.softmax_cross_entropy_with_logits(labels=target, logits=logits)

    def explicit(logits):
        return (log_sum_exp(logits) - (1 - epsilon) * tf.gather(logits, labels, batch_dims=1)
                - epsilon * tf.reduce_mean(logits, -1))

    return {"fused dense op": fused, "log-sum-exp": explicit, "ours (XLA)": ours}


def torch_step(logits, labels, epsilon):
    """PyTorch's cross-entropy, forward and backward, on a copy of `logits`; None without torch."""
    try:
        import torch
    except ImportError:
        return None
    values = torch.tensor(logits.numpy(), requires_grad=True)
    targets = torch.tensor(labels.numpy(), dtype=torch.long)

    def step():
        values.grad = None
        loss = torch.nn.functional.cross_entropy(values, targets, label_smoothing=epsilon, reduction="sum")
        loss.backward()
        return tf.constant(0.0)

    return step


def step_function(loss, logits):
    @tf.function
    def step():
        with tf.GradientTape() as tape:
            value = tf.reduce_sum(loss(logits))
        return value, tape.gradient(value, logits)

    return step


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=0, help="intra-op threads of each framework (0: default)")
    args = parser.parse_args()
    if args.threads:
        tf.config.threading.set_intra_op_parallelism_threads(args.threads)
        tf.config.threading.set_inter_op_parallelism_threads(1)
    rng = np.random.default_rng(0)
    for name, rows, epsilon in (("BERT masked LM (640 rows)", 640, 0.0),
                                ("Transformer target (1,600 rows, eps 0.1)", 1600, 0.1)):
        logits = tf.Variable(rng.normal(size=(rows, VOCABULARY)).astype("float32"))
        labels = tf.constant(rng.integers(0, VOCABULARY, rows), tf.int32)
        steps = {form: step_function(loss, logits) for form, loss in forms(labels, epsilon).items()}
        (a, grad_a), *others = (step() for step in steps.values())
        for form, (b, grad_b) in zip(list(steps)[1:], others):
            print(f"{name}: {form} differs from the first by {abs(float(a - b)) / float(a):.1e} in the loss "
                  f"(relative), {float(tf.reduce_max(tf.abs(grad_a - grad_b))):.1e} in the gradient")
        torch = torch_step(logits, labels, epsilon)
        if torch is not None:
            import torch as torch_module

            torch_module.set_num_threads(args.threads or os.cpu_count())
            steps["PyTorch"] = torch
        times = alternate(steps, repeats=3, calls=30, warmup=1)
        for form, values in times.items():
            print(f"  {form:<18} {' '.join(f'{v:6.2f}' for v in values)} ms, median {sorted(values)[1]:.2f}")
    print(f"load average {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
