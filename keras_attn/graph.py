"""TensorFlow graphs of the package's functions, traced as written.

The package writes its loops and branches on tensors as TensorFlow ops
(`tf.while_loop`, `tf.cond`, `keras.ops`), so AutoGraph, which
`tf.function` runs by default to turn Python's `if` and `for` on tensors
into such ops, has nothing to turn; but it still parses and rewrites the
source of every function a traced one calls, in every job and every
export. `function` traces without it; Python control flow on a tensor then
fails at tracing, where it is written.

Example:

    >>> square = function(lambda x: x * x, input_signature=[tf.TensorSpec([], tf.float32)])
    >>> float(square(tf.constant(3.0)))
    9.0
"""

import functools

import tensorflow as tf

function = functools.partial(tf.function, autograph=False)
"""`tf.function` with `autograph=False`, as a decorator or called on a function.

Args:
    func: callable or `None`. The function to trace. Defaults to `None`, which gives a
        decorator.
    **kwargs: The other arguments of `tf.function`, such as `input_signature`,
        `jit_compile` and `reduce_retracing`.

Returns:
    The traced function (a `tf.types.experimental.PolymorphicFunction`), or a decorator when
    `func` is `None`.
"""
