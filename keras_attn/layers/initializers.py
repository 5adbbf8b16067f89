"""One initializer instance per weight.

A Keras 3 random initializer fixes its seed when it is constructed, so one
instance drawn for several weights gives them the same values (and weights of
other shapes the same first values). Every layer here that makes several
weights from one user-given initializer draws each through
`clone_initializer(initializer, salt)`.
"""

import zlib

import keras

INITIALIZER_RANGE = 0.02  # BERT's `initializer_range`: the standard deviation of its weights


def bert_initializer():
    """BERT's initializer: a new `TruncatedNormal(stddev=INITIALIZER_RANGE)`."""
    return keras.initializers.TruncatedNormal(stddev=INITIALIZER_RANGE)


def clone_initializer(initializer, salt):
    """A fresh copy of `initializer` for one weight.

    Unseeded initializers are rebuilt from their config, so the copy draws a
    new seed from Keras's global random state (reproducible under
    `keras.utils.set_random_seed`). An initializer with an integer seed gets
    a seed derived from its own and `salt` (the weight's name), so the same
    config builds the same model and its weights still differ.

    Args:
        initializer: a `keras.initializers.Initializer`, or a name or config
            accepted by `keras.initializers.get`.
        salt: a string that tells this weight from the layer's others.

    Returns:
        A new `keras.initializers.Initializer`.

    Example:

        >>> seeded = keras.initializers.GlorotUniform(seed=7)
        >>> query = clone_initializer(seeded, "query_kernel")
        >>> key = clone_initializer(seeded, "key_kernel")
        >>> bool((query((4, 4)) == key((4, 4))).numpy().all())
        False
    """
    initializer = keras.initializers.get(initializer)
    config = initializer.get_config()
    seed = config.get("seed")
    if isinstance(seed, int) and not isinstance(seed, bool):
        config["seed"] = (seed + zlib.crc32(salt.encode())) % (2**31 - 1)
    return type(initializer).from_config(config)


def kernel_initializer_argument(initializer, salt):
    """`{"kernel_initializer": a clone of it}` for a sublayer, or `{}` when `initializer` is None.

    A composite layer whose `kernel_initializer` is None leaves each
    sublayer its own default (and its random draws as they were).
    """
    if initializer is None:
        return {}
    return {"kernel_initializer": clone_initializer(initializer, salt)}
