"""Input side of keras-attn: corpus readers, tokenizers, tf.data pipelines, generated corpora.

`text` reads and validates corpus files, `tokenizers` learns WordPiece
vocabularies and tokenizes inside the TensorFlow graph, `translation` turns
sentence pairs into padded batches for teacher forcing, `synthetic` generates
the built-in translation corpus. Nothing here imports `keras_attn`: models
know nothing about files, and pipelines nothing about models.
"""
