"""Serving: the SavedModels of the tasks and their versioned export.

`Translator` (a `Seq2SeqLM`: translate, attention), `CaptionServer` (a
`Captioner`: caption, from encoded image bytes) and `BertServer` (a BERT
task: fill-mask, encode, classify) are `tf.Module`s whose signatures take
and give strings; `export` / `export_if_changed` write them as
`<root>/<name>/<version>/`.
"""

from keras_attn.serving.bert import BertServer, read_classifier
from keras_attn.serving.captioner import CaptionServer
from keras_attn.serving.translator import Translator
from keras_attn.serving.versions import export, export_if_changed, newest_version, read_metadata

__all__ = [
    "BertServer",
    "read_classifier",
    "CaptionServer",
    "Translator",
    "export",
    "export_if_changed",
    "newest_version",
    "read_metadata",
]
