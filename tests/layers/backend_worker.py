"""Runs layers saved by test_other_backends.py on another Keras backend (not a test module).

    KERAS_BACKEND=jax python backend_worker.py CASES.pkl OUT.npz

Each case holds a layer's serialized config, its weights, and the arguments
of one call; the worker rebuilds the layer, builds it with that call, sets
the weights, calls it again and writes the outputs, flattened, to OUT.npz,
with the one-line errors of the layers that need TensorFlow ("refused/...").
"""

import os
import pickle
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))

import keras  # noqa: E402
import numpy as np  # noqa: E402

import keras_attn.layers  # noqa: E402, F401  (registers the layers)


def main(cases_path, out_path):
    with open(cases_path, "rb") as f:
        cases = pickle.load(f)
    outputs = {"backend": np.array(keras.backend.backend())}
    for name, case in cases.items():
        layer = keras.saving.deserialize_keras_object(case["config"])
        layer(*case["args"], **case["kwargs"])  # builds it
        layer.set_weights(case["weights"])
        for index, value in enumerate(keras.tree.flatten(layer(*case["args"], **case["kwargs"]))):
            outputs[f"{name}/{index}"] = keras.ops.convert_to_numpy(value)
    refusals = {
        "RNNEncoder": lambda: keras_attn.layers.RNNEncoder(10, 8),
        "AttentionDecoder": lambda: keras_attn.layers.AttentionDecoder(10, 8),
        "CaptionDecoder": lambda: keras_attn.layers.CaptionDecoder(10, 8),
        "memory_efficient": lambda: keras_attn.layers.MultiHeadAttention(
            2, 4, memory_efficient=True
        ),
    }
    for name, make in refusals.items():
        try:
            make()
            outputs[f"refused/{name}"] = np.array("")
        except RuntimeError as error:
            outputs[f"refused/{name}"] = np.array(str(error))
    np.savez(out_path, **outputs)


if __name__ == "__main__":
    main(*sys.argv[1:])
