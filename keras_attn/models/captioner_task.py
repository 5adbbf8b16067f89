"""The captioning task: a `CaptionerBackbone` with compile defaults, `fit` and `generate`."""

import keras
import numpy as np
import tensorflow as tf

from keras_attn.layers.caption_decoder import attention_supervision, region_masks
from keras_attn.layers.replicas import sum_over_replicas
from keras_attn.models.captioner import PRESETS as CAPTIONER_PRESETS
from keras_attn.models.captioner import CaptionerBackbone
from keras_attn.models.seq2seq_lm import Seq2SeqLM
from pipelines.special_tokens import PAD_ID

# The longest caption `generate` writes without a preprocessor or a max_length.
DEFAULT_MAX_CAPTION = 32


@keras.saving.register_keras_serializable(package="keras_attn")
class Captioner(Seq2SeqLM):
    """Image captioning: `Seq2SeqLM`'s training and searches with an image as the source.

    Trains with plain `fit` on `({"image", "target_in"}, target_out)`
    batches; Keras adds the decoder's doubly stochastic regularizer (a
    layer loss) to the captions' cross-entropy. Batches whose targets are
    `{"target_out", "boxes"}` (`caption_dataset` with `word_boxes`) also
    supervise the attention: λ times `attention_supervision` with each
    word's `region_masks`, per real word of the global batch. `generate`
    captions images (uint8 or float pixels, through the preprocessor) with
    greedy or beam search, each compiled once (the image batch's size is a
    `None` axis of its input signature).

    Args:
        backbone: a `CaptionerBackbone`. The captioner to train and search with.
        preprocessor: a `pipelines.preprocessors.CaptionPreprocessor` or `None`. Needed to
            `generate` strings. Defaults to `None`.
        attention_supervision: float. λ of the attention's supervision, on batches that carry
            attention targets. Defaults to 1.0.
        **kwargs: Other arguments of `keras.Model`, such as `name` and `trainable`.

    Example:

        >>> model = Captioner(CaptionerBackbone(30, preset="tiny", image_size=32))
        >>> model.compile()
        >>> model.generate(np.zeros((2, 32, 32, 3), "float32"), max_length=5).shape
        (2, 5)
    """

    presets = CAPTIONER_PRESETS

    def __init__(self, backbone, preprocessor=None, attention_supervision=1.0, **kwargs):
        super().__init__(backbone, preprocessor, **{"name": "captioner", **kwargs})
        self.attention_supervision = attention_supervision
        self._arguments = {"attention_supervision": attention_supervision}

    def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, training=True):
        if not isinstance(y, dict):
            return super().compute_loss(x, y, y_pred, sample_weight, training)
        if not hasattr(self.backbone.decoder, "last_weights"):
            raise ValueError(
                'Words\' boxes need a captioner with attention, not `attention="none"`.'
            )
        loss = super().compute_loss(x, y["target_out"], y_pred, sample_weight, training)
        words = sum_over_replicas(tf.reduce_sum(tf.cast(y["target_out"] != PAD_ID, tf.float32)))
        masks = region_masks(
            y["boxes"], self.backbone.encoder.grid_shape, self.backbone.get_config()["image_size"]
        )
        supervision = attention_supervision(self.backbone.decoder.last_weights(), masks)
        return loss + tf.cast(
            self.attention_supervision * supervision / tf.maximum(words, 1.0), loss.dtype
        )

    def compute_metrics(self, x, y, y_pred, sample_weight=None):
        return super().compute_metrics(
            x, y["target_out"] if isinstance(y, dict) else y, y_pred, sample_weight
        )

    def source_spec(self):
        """What `generate`'s searches take as the source: the images.

        Returns:
            A `tf.TensorSpec` of shape `(None, image_size, image_size, 3)` and dtype float32.
        """
        size = self.backbone.get_config()["image_size"]
        return tf.TensorSpec([None, size, size, 3], tf.float32, name="image")

    @classmethod
    def make_backbone(cls, preset, preprocessor, **kwargs):
        """A new `CaptionerBackbone` of `preset`, sized by `preprocessor`'s vocabulary and
        images.

        Args:
            preset: str. A preset name of the captioner family (`keras_attn.presets`).
            preprocessor: a `pipelines.preprocessors.CaptionPreprocessor`. Its vocabulary and
                image size size the backbone.
            **kwargs: Backbone arguments, which win over the preset's.

        Returns:
            A `CaptionerBackbone`.
        """
        sizes = dict(
            vocabulary_size=preprocessor.tokenizer.vocabulary_size,
            image_size=preprocessor.image_size,
        )
        return CaptionerBackbone.from_preset(preset, **{**sizes, **kwargs})

    def _source(self, inputs):
        images = np.asarray(inputs)
        if self.preprocessor is not None:
            return self.preprocessor.images(images), True
        return tf.convert_to_tensor(images, tf.float32), False

    def _default_budget(self, source):
        return tf.fill(
            [tf.shape(source)[0]], tf.constant(self.longest_output or DEFAULT_MAX_CAPTION, tf.int32)
        )
