"""The captioning SavedModel of a `Captioner`: encoded image bytes in,
the caption and where it looked out.

It loads in a process that imports only `tensorflow` and `tensorflow_text`:

    import tensorflow as tf, tensorflow_text  # registers the tokenizer ops
    captioner = tf.saved_model.load("saved_models/captioner/1")
    out = captioner.signatures["caption"](
        image=tf.constant([open("photo.png", "rb").read()]), beam_width=tf.constant(1))
    out["caption"], out["score"], out["readable"], out["attention"]

Exported with `keras_attn.serving.export` (versions and their metadata).
"""

import json

import tensorflow as tf

from keras_attn import decoding, graph
from keras_attn.decoding import MAX_BEAM_WIDTH
from keras_attn.serving.versions import fingerprint
from pipelines.images import decode_images
from pipelines.special_tokens import BOS_ID, PAD_ID


class CaptionServer(tf.Module):
    """A captioner with its image decoding, tokenizer and search, ready to export.

    Signature `caption(image: string[B], beam_width: int32[])` (also
    `serving_default`): each image is the bytes of a PNG, JPEG, GIF or BMP
    file (`pipelines.images`: grayscale read as RGB, alpha dropped, the
    first frame of an animation, resized to the model's square) →

    - `caption` string[B] and `score` float32[B], its length-normalized
      log-probability; beam width 1 is greedy search, and widths are
      clipped to [1, `max_beam_width`] and to the vocabulary's size;
    - `output_tokens` string[B, T], the caption's tokens ending in [EOS]
      (then "[PAD]"), and `attention` float32[B, T, rows, columns]: the
      weight of each grid cell while the model wrote each token (zeros
      for [PAD], and everywhere for a model without attention);
    - `readable` bool[B]: False for bytes that are no image of those
      formats, cut short or corrupt, or of more than
      `pipelines.images.MAX_PIXELS` pixels; such a row gets the caption
      `""`, score 0.0, no tokens and zero attention, and the other rows
      of the batch are captioned as usual.

    Args:
        task: `keras_attn.models.Captioner`. The captioner, with its `CaptionPreprocessor`.
        length_penalty: float. GNMT length penalty α of beam search. Defaults to 0.6
            (`decoding.LENGTH_PENALTY`).
        max_beam_width: int. The widest beam a request gets. Defaults to 32
            (`decoding.MAX_BEAM_WIDTH`).

    Raises:
        ValueError: when `task` has no preprocessor.
    """

    def __init__(self, task, length_penalty=decoding.LENGTH_PENALTY, max_beam_width=MAX_BEAM_WIDTH):
        super().__init__(name="captioner")
        if task.preprocessor is None:
            raise ValueError(
                f"{task.name}: a captioning export needs the task's CaptionPreprocessor"
            )
        self.model = task.backbone
        self.stepper = task.stepper
        self.preprocessor = task.preprocessor
        # tracked here too: its vocabulary file is an asset
        self.tokenizer = task.preprocessor.tokenizer
        self.length_penalty = length_penalty
        self.max_beam_width = max_beam_width

    @graph.function(
        input_signature=[
            tf.TensorSpec([None], tf.string, name="image"),
            tf.TensorSpec([], tf.int32, name="beam_width"),
        ]
    )
    def caption(self, image, beam_width):
        """The captions of a batch of encoded images (the signature the class describes).

        Args:
            image: string tensor of shape `(B,)`. The bytes of each image file.
            beam_width: int32 scalar tensor. The beam width, clipped to [1, `max_beam_width`]
                and to the vocabulary's size; 1 is greedy search.

        Returns:
            A dict of `caption`, `score`, `readable`, `output_tokens` and `attention` tensors,
            each with a row per image.
        """
        pixels, readable = decode_images(image, self.preprocessor.image_size)
        # An empty batch skips the model (a convolution over no images fails on CPU).
        return tf.cond(
            tf.size(image) > 0, lambda: self._caption(pixels, readable, beam_width), self._nothing
        )

    def _caption(self, pixels, readable, beam_width):
        images = self.preprocessor.images(pixels)
        rows = tf.shape(images)[0]
        cap = min(self.max_beam_width, self.tokenizer.vocabulary_size)
        result = decoding.beam_search(
            self.stepper,
            images,
            tf.fill([rows], self.preprocessor.max_length),
            tf.clip_by_value(beam_width, 1, cap),
            length_penalty=self.length_penalty,
        )
        tokens = tf.where(readable[:, None], result["tokens"], PAD_ID)
        target_in = tf.concat([tf.fill([rows, 1], BOS_ID), tokens[:, :-1]], axis=1)
        weights = (
            self.model.attention_weights(images, target_in)
            * tf.cast(tokens != PAD_ID, tf.float32)[..., None]
        )
        return {
            "caption": self.preprocessor.detokenize(tokens),
            "score": tf.where(readable, result["scores"], 0.0),
            "readable": readable,
            "output_tokens": self.tokenizer.id_to_token(tokens),
            "attention": tf.reshape(
                weights, [rows, tf.shape(tokens)[1], *self.model.encoder.grid_shape]
            ),
        }

    def _nothing(self):
        return {
            "caption": tf.zeros([0], tf.string),
            "score": tf.zeros([0]),
            "readable": tf.zeros([0], tf.bool),
            "output_tokens": tf.zeros([0, 0], tf.string),
            "attention": tf.zeros([0, 0, *self.model.encoder.grid_shape]),
        }

    def fingerprint(self):
        """SHA-256 of what decides the outputs: weights, vocabulary
        and settings (as `Translator.fingerprint`).

        Returns:
            A str: the hex digest (`keras_attn.serving.versions.fingerprint`).
        """
        settings = [
            self.preprocessor.image_size,
            self.preprocessor.max_length,
            self.length_penalty,
            self.max_beam_width,
        ]
        return fingerprint(
            [json.dumps([self.tokenizer.vocabulary, self.tokenizer.lowercase, settings])],
            self.model.weights,
        )

    def signatures(self):
        """The signatures to export, by name (`export` saves them).

        Returns:
            A dict: `caption`, also as `serving_default`.
        """
        return {"serving_default": self.caption, "caption": self.caption}
