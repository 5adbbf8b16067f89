"""Backbones and tasks built from `keras_attn.layers`, with named presets."""

from keras_attn.models.bert import PRESETS as BERT_PRESETS
from keras_attn.models.bert import (
    BertBackbone,
    BertClassifier,
    BertMaskedLM,
    BertPretrainer,
)
from keras_attn.models.captioner import PRESETS as CAPTIONER_PRESETS
from keras_attn.models.captioner import CaptionerBackbone
from keras_attn.models.captioner_task import Captioner
from keras_attn.models.seq2seq import PRESETS as SEQ2SEQ_PRESETS
from keras_attn.models.seq2seq import Seq2SeqBackbone
from keras_attn.models.seq2seq_lm import Seq2SeqLM
from keras_attn.models.task import Task
from keras_attn.models.transformer import PRESETS as TRANSFORMER_PRESETS
from keras_attn.models.transformer import TransformerBackbone

__all__ = [
    "TRANSFORMER_PRESETS",
    "TransformerBackbone",
    "SEQ2SEQ_PRESETS",
    "Seq2SeqBackbone",
    "Task",
    "Seq2SeqLM",
    "BERT_PRESETS",
    "BertBackbone",
    "BertClassifier",
    "BertMaskedLM",
    "BertPretrainer",
    "CAPTIONER_PRESETS",
    "CaptionerBackbone",
    "Captioner",
]
