"""Keras layers of the attention family.

One concept per module: `attention` (Bahdanau and Luong alignment attention),
`multi_head_attention` (scaled dot-product and multi-head attention),
`blockwise_attention` (the memory-efficient path of long sequences),
`position` (sinusoidal and learned positions), `embedding` (token + position,
BERT's input embedding), `masked_lm_head` and `next_sentence_head` (BERT's
pretraining heads), `add_and_norm`, `feed_forward` (and `activations`, its
choices by name), `transformer`
(encoder and decoder blocks), `rnn_encoder` and `rnn_decoder` (the RNN
encoder and attentional decoder of Seq2Seq), `image_encoder` and
`caption_decoder` (Show, Attend and Tell's grid of image features and its
attending LSTM), `masking` (padding and
causal masks) and `initializers` (one initializer copy per weight).
"""

from keras_attn.layers.add_and_norm import LAYER_NORM_EPSILON, AddAndNorm
from keras_attn.layers.attention import AdditiveAttention, DotProductAttention
from keras_attn.layers.caption_decoder import CaptionDecoder
from keras_attn.layers.embedding import BertEmbedding, TokenAndPositionEmbedding
from keras_attn.layers.feed_forward import FeedForward
from keras_attn.layers.image_encoder import ImageGridEncoder
from keras_attn.layers.masked_lm_head import MaskedLMHead
from keras_attn.layers.multi_head_attention import (
    MultiHeadAttention,
    scaled_dot_product_attention,
)
from keras_attn.layers.next_sentence_head import NextSentenceHead
from keras_attn.layers.output_bias import OutputBias
from keras_attn.layers.position import PositionEmbedding, SinusoidalPositionEncoding
from keras_attn.layers.rnn_decoder import AttentionDecoder
from keras_attn.layers.rnn_encoder import RNNEncoder
from keras_attn.layers.transformer import (
    TransformerDecoderBlock,
    TransformerEncoderBlock,
)

__all__ = [
    "AddAndNorm",
    "LAYER_NORM_EPSILON",
    "AdditiveAttention",
    "DotProductAttention",
    "CaptionDecoder",
    "BertEmbedding",
    "TokenAndPositionEmbedding",
    "FeedForward",
    "ImageGridEncoder",
    "MaskedLMHead",
    "NextSentenceHead",
    "OutputBias",
    "MultiHeadAttention",
    "scaled_dot_product_attention",
    "PositionEmbedding",
    "SinusoidalPositionEncoding",
    "AttentionDecoder",
    "RNNEncoder",
    "TransformerDecoderBlock",
    "TransformerEncoderBlock",
]
