"""keras-attn: attention models in TensorFlow/Keras, from tf.data to SavedModel serving."""

__version__ = "0.1.0"
