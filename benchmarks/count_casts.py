"""Where the `Cast` ops of a mixed_bfloat16 Transformer training step come from.

    python -m benchmarks.count_casts

Traces one training step (forward, loss and gradients; preset small, batch
64, 17 tokens each side) under `mixed_bfloat16` and counts the graph's casts
by what they cast: a weight as it is read, or anything else (gradients,
activations, indices), with their dtypes. The question it answers: would one
bfloat16 copy of each weight per step save casts (only if a weight is read,
and cast, more than once)?
"""

import collections
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import keras  # noqa: E402
import tensorflow as tf  # noqa: E402

from keras_attn.models import TransformerBackbone  # noqa: E402
from keras_attn.training import MaskedSparseCrossEntropy  # noqa: E402


def main():
    keras.mixed_precision.set_global_policy("mixed_bfloat16")
    model = TransformerBackbone(8000, 8000, max_sequence_length=64, preset="small", dropout=0.1)
    loss = MaskedSparseCrossEntropy(0.1)
    inputs = {"source": tf.ones((64, 17), tf.int32), "target_in": tf.ones((64, 17), tf.int32)}
    targets = tf.ones((64, 17), tf.int32)

    @tf.function
    def gradients(inputs, targets):
        with tf.GradientTape() as tape:
            value = loss(targets, model(inputs, training=True))
        return tape.gradient(value, model.trainable_variables)

    graph = gradients.get_concrete_function(inputs, targets).graph
    casts = [op for op in graph.get_operations() if op.type == "Cast"]
    kinds = collections.Counter(
        ("weight read" if op.inputs[0].op.type == "ReadVariableOp" else "other",
         f"{op.inputs[0].dtype.name} -> {op.outputs[0].dtype.name}")
        for op in casts
    )
    print(f"{len(model.trainable_variables)} weights, {len(casts)} casts in the traced step")
    for (kind, dtypes), count in kinds.most_common():
        print(f"  {count:4d}  {kind:<12} {dtypes}")


if __name__ == "__main__":
    main()
