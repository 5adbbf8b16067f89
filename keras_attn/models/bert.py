"""BERT (Devlin et al. 2019): the backbone, the pretraining model and a classifier.

    token_ids, segment_ids ─► BertEmbedding ─► N × TransformerEncoderBlock
        (GELU, post-norm) ─► sequence_output ─► [CLS] ─► tanh dense ─► pooled_output

`bert_pretrainer` puts the masked-LM head (on the masked positions only,
output weights tied to the token embedding) and the next-sentence head on
a backbone; `bert_classifier` a dropout and a dense layer on its pooled
output. All are functional `keras.Model`s; token id 0 is padding, and its
Keras mask reaches every attention.
"""

import keras

from keras_attn.layers import (
    BertEmbedding,
    MaskedLMHead,
    NextSentenceHead,
    TransformerEncoderBlock,
)
from keras_attn.models.presets import PRESETS as _ALL_PRESETS
from keras_attn.models.presets import architecture

PRESETS = _ALL_PRESETS["bert"]


def bert_backbone(
    vocabulary_size,
    preset="tiny",
    max_sequence_length=512,
    num_segments=2,
    dropout=0.1,
    num_layers=None,
    hidden_dim=None,
    num_heads=None,
    intermediate_dim=None,
    norm_first=False,
    dtype=None,
    name="bert_backbone",
):
    """Builds BERT's encoder as a functional `keras.Model`.

    Args:
        vocabulary_size: token ids (30,522 in BERT's uncased vocabulary).
        preset: `"tiny"`, `"mini"`, `"small"`, `"medium"` or `"base"`
            (see `PRESETS`); `num_layers`, `hidden_dim` and `num_heads`
            given explicitly replace its values.
        max_sequence_length: learned positions (512 in BERT).
        num_segments: segment ids (2: sentence A and B).
        dropout: dropout of the embeddings, residuals and attention weights.
        num_layers: encoder blocks.
        hidden_dim: the model width.
        num_heads: attention heads.
        intermediate_dim: the feed-forward width; 4 × `hidden_dim` by default.
        norm_first: pre-norm blocks (Xiong et al. 2020) and a final
            LayerNorm, instead of BERT's post-norm.
        dtype: the layers' dtype policy, e.g. `"mixed_bfloat16"`.
        name: the model name.

    Returns:
        A `keras.Model` mapping `{"token_ids", "segment_ids"}` (int `(B, T)`)
        to `{"sequence_output": (B, T, d), "pooled_output": (B, d)}`. Its
        layers are `embedding`, `encoder_block_{i}` (then `final_norm` with
        `norm_first`) and `pooler`.

    Example:

    >>> backbone = bert_backbone(30522, preset="tiny")  # BERT-Tiny, L2/H128
    >>> backbone.count_params()
    4385920
    """
    settings = architecture(
        "bert", preset, PRESETS["tiny"], num_layers=num_layers, hidden_dim=hidden_dim, num_heads=num_heads,
    )
    hidden = settings["hidden_dim"]
    token_ids = keras.Input((None,), dtype="int32", name="token_ids")
    segment_ids = keras.Input((None,), dtype="int32", name="segment_ids")
    embedding = BertEmbedding(
        vocabulary_size, max_sequence_length, num_segments, hidden,
        dropout=dropout, name="embedding", dtype=dtype,
    )
    x = embedding(token_ids, segment_ids)  # its Keras mask: token_ids != 0
    for index in range(settings["num_layers"]):
        x = TransformerEncoderBlock(
            settings["num_heads"], intermediate_dim or 4 * hidden, dropout=dropout,
            activation="gelu", attention_dropout=dropout, layer_norm_epsilon=1e-12, norm_first=norm_first,
            kernel_initializer=keras.initializers.TruncatedNormal(stddev=0.02),  # BERT's initializer_range
            name=f"encoder_block_{index}", dtype=dtype,
        )(x)
    if norm_first:
        x = keras.layers.LayerNormalization(epsilon=1e-12, name="final_norm", dtype=dtype)(x)
    first = x[:, 0, :]  # the [CLS] state
    pooled = keras.layers.Dense(
        hidden, activation="tanh", kernel_initializer=keras.initializers.TruncatedNormal(stddev=0.02),
        name="pooler", dtype=dtype,
    )(first)
    return keras.Model(
        {"token_ids": token_ids, "segment_ids": segment_ids},
        {"sequence_output": x, "pooled_output": pooled},
        name=name,
    )


def token_embedding(backbone):
    """The backbone's token `keras.layers.Embedding` (its table is the MLM output projection)."""
    return backbone.get_layer("embedding").token_embedding


def bert_pretrainer(backbone, name="bert_pretrainer"):
    """BERT's pretraining model: masked LM and next-sentence prediction on `backbone`.

    Args:
        backbone: a `bert_backbone` model.
        name: the model name.

    Returns:
        A `keras.Model` mapping `{"token_ids", "segment_ids",
        "mask_positions"}` (int `(B, T)`, `(B, T)`, `(B, P)`) to
        `{"mlm": (B, P, V) logits at the masked positions, "nsp": (B, 2)
        logits}`. Its heads are the layers `mlm_head` (whose output weights
        are `token_embedding(backbone).embeddings` itself) and `nsp_head`.

    Example:

    >>> model = bert_pretrainer(bert_backbone(1000, preset="tiny"))
    >>> out = model({"token_ids": np.array([[4, 9, 6, 5]]), "segment_ids": np.zeros((1, 4)),
    ...              "mask_positions": np.array([[2]])})
    >>> out["mlm"].shape, out["nsp"].shape
    (TensorShape([1, 1, 1000]), TensorShape([1, 2]))
    """
    inputs = {
        "token_ids": keras.Input((None,), dtype="int32", name="token_ids"),
        "segment_ids": keras.Input((None,), dtype="int32", name="segment_ids"),
        "mask_positions": keras.Input((None,), dtype="int32", name="mask_positions"),
    }
    encoded = backbone({"token_ids": inputs["token_ids"], "segment_ids": inputs["segment_ids"]})
    dtype = backbone.get_layer("embedding").dtype_policy
    embedding = token_embedding(backbone)
    mlm = MaskedLMHead(embedding.input_dim, embedding, name="mlm_head", dtype=dtype)(
        encoded["sequence_output"], inputs["mask_positions"]
    )
    nsp = NextSentenceHead(name="nsp_head", dtype=dtype)(encoded["pooled_output"])
    return keras.Model(inputs, {"mlm": mlm, "nsp": nsp}, name=name)


def bert_classifier(backbone, num_classes, dropout=0.1, name="bert_classifier"):
    """A sentence (or sentence-pair) classifier on BERT's pooled output (section 4.1).

    Args:
        backbone: a `bert_backbone` model, pretrained or not.
        num_classes: the labels.
        dropout: dropout before the output layer.
        name: the model name.

    Returns:
        A `keras.Model` mapping `{"token_ids", "segment_ids"}` to `(B,
        num_classes)` logits.

    Example:

    >>> model = bert_classifier(bert_backbone(1000), num_classes=2)
    >>> model({"token_ids": np.array([[4, 9, 5]]), "segment_ids": np.zeros((1, 3))}).shape
    TensorShape([1, 2])
    """
    inputs = {
        "token_ids": keras.Input((None,), dtype="int32", name="token_ids"),
        "segment_ids": keras.Input((None,), dtype="int32", name="segment_ids"),
    }
    dtype = backbone.get_layer("embedding").dtype_policy
    pooled = backbone(inputs)["pooled_output"]
    pooled = keras.layers.Dropout(dropout, dtype=dtype)(pooled)
    logits = keras.layers.Dense(
        num_classes, kernel_initializer=keras.initializers.TruncatedNormal(stddev=0.02),
        name="classifier", dtype=dtype,
    )(pooled)
    return keras.Model(inputs, logits, name=name)
