"""The optimizer alone: Keras's Adam against FusedAdam on the Transformer's weight shapes.

    python -m benchmarks.optimizer

One `apply` of `transformer_adam` (β2 0.98, ε 1e-9) on 127 weights shaped
like the small Transformer's (8.36M parameters), with and without
`clipnorm=1.0`, inside a `tf.function`; milliseconds per call, the cases
interleaved (`alternate.py`), median of the rounds. The fused update is
checked against Keras's on the same gradients first.
"""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from benchmarks.alternate import alternate  # noqa: E402
from keras_attn.training import transformer_adam  # noqa: E402

SHAPES = [(8000, 256)] + [(256, 256)] * 48 + [(256, 1024), (1024, 256)] * 6 + [(256,)] * 60 + [(1024,)] * 6


def case(fused, clipnorm, start, gradients):
    weights = [keras.Variable(value) for value in start]
    optimizer = transformer_adam(1e-3, clipnorm=clipnorm, fused=fused)
    optimizer.build(weights)

    @tf.function
    def step():
        optimizer.apply(gradients, weights)
        return optimizer.iterations

    return weights, step


def main():
    rng = np.random.default_rng(0)
    start = [rng.standard_normal(shape).astype("float32") for shape in SHAPES]
    gradients = [tf.constant(rng.standard_normal(shape).astype("float32")) for shape in SHAPES]
    print(f"{len(SHAPES)} weights, {sum(int(np.prod(s)) for s in SHAPES):,} parameters")
    cases = {}
    for clipnorm in (1.0, None):
        results = []
        for fused in (False, True):
            weights, step = case(fused, clipnorm, start, gradients)
            step(), step()
            results.append([w.numpy() for w in weights])
            cases[f"{'FusedAdam' if fused else 'keras Adam'}, clipnorm {clipnorm}"] = step
        difference = max(float(np.max(np.abs(a - b))) for a, b in zip(*results))
        print(f"clipnorm {clipnorm}: largest weight difference after 2 steps {difference:.1e}")
    times = alternate(cases, repeats=3, calls=20)
    for name, values in times.items():
        print(f"{name:<28} {sorted(values)[1]:7.1f} ms   (rounds: {', '.join(f'{v:.1f}' for v in values)})")


if __name__ == "__main__":
    main()
