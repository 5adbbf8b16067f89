"""What differs between Keras backends: the layers that need TensorFlow refuse others in one line.

Every other layer of `keras_attn.layers` is written with `keras.ops` alone and
runs on any backend (tests/layers/test_other_backends.py runs them on JAX);
`optimization_barrier_under_xla` acts only when TensorFlow compiles with XLA.
"""

import keras


def require_tensorflow(what, why):
    """Refuses, naming `what` and `why`, unless Keras runs on TensorFlow.

    Args:
        what: str. What needs TensorFlow, named in the error.
        why: str. Why it needs TensorFlow, named in the error.

    Raises:
        RuntimeError: if Keras's backend is not TensorFlow.
    """
    backend = keras.backend.backend()
    if backend != "tensorflow":
        raise RuntimeError(
            f"{what} runs on the TensorFlow backend only ({why}); KERAS_BACKEND is {backend!r}."
        )


def optimization_barrier_under_xla(kernel):
    """`kernel` behind an XLA optimization barrier when XLA compiles the graph.

    XLA on CPU fuses the reshape that makes a projection kernel 2-D into a
    product whose output has one row (a decoding step of one sentence) and
    then emits that product as a naive loop over the kernel, several times
    slower than its matrix-vector code. The barrier keeps the reshaped kernel a plain
    operand, so XLA calls its matrix-vector code. It applies only inside a
    TensorFlow function compiled by XLA (`jit_compile=True`); TensorFlow's
    graphs and eager ops, and other Keras backends, get `kernel` as is.
    Gradients pass through it unchanged (a training step under XLA).

    Args:
        kernel: tensor. A projection kernel, already reshaped to 2-D.

    Returns:
        A tensor: `kernel` behind the barrier under XLA, elsewhere `kernel` unchanged.
    """
    if keras.backend.backend() != "tensorflow":
        return kernel
    import tensorflow as tf
    from tensorflow.compiler.tf2xla.python import xla
    from tensorflow.python.ops import control_flow_util

    if not control_flow_util.GraphOrParentsInXlaContext(tf.compat.v1.get_default_graph()):
        return kernel

    @tf.custom_gradient
    def barrier(kernel):
        return xla.optimization_barrier(kernel), lambda upstream: upstream

    return barrier(kernel)
