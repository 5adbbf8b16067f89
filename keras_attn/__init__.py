"""keras-attn: attention models in TensorFlow/Keras, from tf.data to SavedModel serving.

Importing it registers the package's Keras classes (the layers; with TensorFlow as the backend, the
backbones and tasks too, whose loading registers the preprocessors), so that
`keras.saving.load_model` reads its `.keras` files, as importing keras-hub does for its own.
TensorFlow's start-up lines are held back while it loads, and its native log is quiet
(`TF_CPP_MIN_LOG_LEVEL=3`) unless that variable is set before the import.
"""

import os

__version__ = "0.2.0"

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

from keras_attn.quiet import stderr_held  # noqa: E402

with stderr_held():
    import keras

    from keras_attn import layers  # noqa: F401

    if keras.backend.backend() == "tensorflow":  # the models run on TensorFlow only
        from keras_attn import checkpoints, models  # noqa: F401  (checkpoints: `from_preset`)
