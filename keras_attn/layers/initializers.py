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
    """BERT's initializer.

    Returns:
        A new `keras.initializers.TruncatedNormal` of standard deviation
        `INITIALIZER_RANGE` (0.02).
    """
    return keras.initializers.TruncatedNormal(stddev=INITIALIZER_RANGE)


def clone_initializer(initializer, salt):
    """A fresh copy of `initializer` for one weight.

    Unseeded initializers are rebuilt from their config, so the copy draws a
    new seed from Keras's global random state (reproducible under
    `keras.utils.set_random_seed`). An initializer with an integer seed gets
    a seed derived from its own and `salt` (the weight's name), so the same
    config builds the same model and its weights still differ.

    Args:
        initializer: str, dict or keras.initializers.Initializer. The initializer to
            copy: an instance, or a name or config accepted by `keras.initializers.get`.
        salt: str. Tells this weight from the layer's others (the weight's name).

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
    """The `kernel_initializer` argument of a sublayer: a clone of `initializer`, or none.

    A composite layer whose `kernel_initializer` is None leaves each
    sublayer its own default (and its random draws as they were).

    Args:
        initializer: keras.initializers.Initializer or None. The composite layer's
            `kernel_initializer`.
        salt: str. Tells the sublayer's kernel from the others (its name), as in
            `clone_initializer`.

    Returns:
        dict. `{"kernel_initializer": clone_initializer(initializer, salt)}`, or `{}`
        when `initializer` is None.
    """
    if initializer is None:
        return {}
    return {"kernel_initializer": clone_initializer(initializer, salt)}
