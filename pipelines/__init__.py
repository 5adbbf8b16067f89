"""Input side of keras-attn: corpus readers, tokenizers, tf.data pipelines, generated corpora.

`text` reads and validates corpus files, `streaming` reads corpora too
large for memory (shards, as tf.data streams), `tokenizers` learns WordPiece
vocabularies and tokenizes inside the TensorFlow graph, `translation` turns
sentence pairs into padded batches for teacher forcing, `synthetic` generates
the built-in translation corpus. For BERT: `documents` reads raw-text
documents and splits sentences, `pretraining` makes NSP sentence pairs and
dynamic MLM masks in tf.data, `synthetic_documents` generates the built-in
document corpus, and `classification` reads labelled TSV files and packs
`[CLS] A [SEP] B [SEP]` rows. Nothing here imports `keras_attn`: models
know nothing about files, and pipelines nothing about models.
"""
