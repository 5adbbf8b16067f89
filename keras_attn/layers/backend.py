"""The layers that need TensorFlow refuse other Keras backends in one line.

Every other layer of `keras_attn.layers` is written with `keras.ops` alone and
runs on any backend (tests/layers/test_other_backends.py runs them on JAX).
"""

import keras


def require_tensorflow(what, why):
    """Raises `RuntimeError` naming `what` and `why` unless Keras runs on TensorFlow."""
    backend = keras.backend.backend()
    if backend != "tensorflow":
        raise RuntimeError(f"{what} runs on the TensorFlow backend only ({why}); KERAS_BACKEND is {backend!r}.")
