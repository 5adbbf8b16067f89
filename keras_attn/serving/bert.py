"""BERT's serving module: fill-mask, encode and classify, with the tokenizer in the graph.

Exported with `keras_attn.serving.export` as `<root>/<name>/<version>/`, it
loads where only `tensorflow` and `tensorflow_text` are imported:

    import tensorflow as tf, tensorflow_text  # registers the tokenizer ops
    bert = tf.saved_model.load("saved_models/bert/1")
    out = bert.signatures["fill_mask"](text=tf.constant(["the [MASK] sat."]), top_k=tf.constant(5))
    out["tokens"], out["scores"], out["filled"]

Each version also holds, in `assets.extra/` (which servers ignore), the
backbone's settings and weights and the vocabulary: what
`keras_attn.checkpoints.pretrained_bert` reads to fine-tune it; and a classifier's
labels by id and whether it was fine-tuned on single texts or pairs
(`read_classifier`).
"""

import json
import os

import tensorflow as tf

from keras_attn import graph
from keras_attn.models.bert import MAX_TOP_K, BertClassifier, backbone_arguments, fill_masks
from keras_attn.serving.versions import fingerprint
from pipelines.special_tokens import PAD_ID

BACKBONE_SETTINGS = "bert_backbone.json"  # in assets.extra/
BACKBONE_WEIGHTS = "bert_backbone.weights.h5"
VOCABULARY = "vocab.txt"
# In assets.extra/ of a fine-tuned export: its labels, and pairs or not.
CLASSIFIER = "classifier.json"
_TEXT = tf.TensorSpec([None], tf.string, name="text")


class BertServer(tf.Module):
    """A BERT task with its preprocessor (tokenizer in the graph), ready to export.

    Signatures (every one takes a batch of strings; any string gives a
    result: invalid UTF-8, unseen characters, empty or blank text included,
    and an empty batch gives empty outputs):

    - `fill_mask(text: string[B], top_k: int32[])` (with an MLM head):
      each `[MASK]` in the text (any case) is predicted. `tokens`
      string[B, M, K] and `scores` float32[B, M, K] (probabilities) are the
      top `K` tokens of each of the first `M` masks (`M` the most masks of
      a row in the batch, at most `max_predictions`; shorter rows are
      padded with `""` and 0); `filled` string[B], the text with each mask
      replaced by its best token; `num_masks` int32[B], the masks in the
      text (a text without `[MASK]` has 0 and comes back unchanged but
      tokenized); `truncated` bool[B], the text was cut to `max_length`
      tokens (masks after the cut are not predicted). `K` is `top_k`
      clipped to [1, `max_top_k`], and to the words of the vocabulary
      (its tokens but the special ones), which are never predicted.
    - `encode(text)`, `encode_pair(text_a, text_b)`: `pooled_output`
      float32[B, d], `sequence_output` float32[B, T, d] (zeros at padding),
      `token_ids` int32[B, T], `truncated` bool[B].
    - `attention(text)`: `tokens` string[B, T] (`[PAD]` after each text's end; `[MASK]` read as in
      `fill_mask`) and `self_attention` float32[B, layers, heads, T, T], each layer's attention
      weights (rows: queries), for the explorer.
    - `classify(text)`, `classify_pair(text_a, text_b)` (with a
      classifier): `label` string[B], `label_id` int32[B], `probabilities`
      float32[B, C], `truncated` bool[B] (the text was cut to `max_length` tokens).

    Args:
        task: `keras_attn.models.Task`. A BERT task with its `BertPreprocessor`:
            `BertPretrainer` or `BertMaskedLM` (`fill_mask`, `encode`), `BertClassifier`
            (`classify`, `encode`); the preprocessor's `max_length` is the
            longest input row.
        label_names: list of str or `None`. A classifier's labels, by id. Defaults to `None`
            (no labels).
        pairs: bool. Whether the classifier was fine-tuned on text pairs (else on single
            texts). Defaults to `False`.
        max_predictions: int. The most masks predicted per text. Defaults to 20.
        max_top_k: int. The most candidates `fill_mask` gives per mask. Defaults to 50
            (`MAX_TOP_K`).

    Raises:
        ValueError: when `task` has no preprocessor.
    """

    def __init__(
        self, task, label_names=None, pairs=False, max_predictions=20, max_top_k=MAX_TOP_K
    ):
        super().__init__(name="bert")
        if task.preprocessor is None:
            raise ValueError(f"{task.name}: a BERT export needs the task's BertPreprocessor")
        self.backbone = task.backbone
        self.preprocessor = task.preprocessor
        self.tokenizer = task.preprocessor.tokenizer  # tracked here too: its vocabulary is an asset
        self.max_predictions = max_predictions
        self.max_top_k = max_top_k
        self.mlm_head = getattr(task, "mlm_head", None)
        self.classifier = task if isinstance(task, BertClassifier) else None
        self.label_names = list(label_names or [])
        self.pairs = pairs
        ids = tf.TensorSpec([None, None], tf.int32)
        # The model is traced once, and every signature calls that graph.
        self._run_backbone = graph.function(self._backbone_outputs, input_signature=[ids, ids])
        self.encode = graph.function(self._encode, input_signature=[_TEXT])
        self.attention = graph.function(self._attention, input_signature=[_TEXT])
        self.encode_pair = graph.function(self._encode_pair, input_signature=_pair_signature())
        if self.mlm_head is not None:
            self.fill_mask = graph.function(
                self._fill_mask, input_signature=[_TEXT, tf.TensorSpec([], tf.int32, name="top_k")]
            )
        if self.classifier is not None:
            self._labels = tf.constant(self.label_names, tf.string)
            self._run_classifier = graph.function(self._probabilities, input_signature=[ids, ids])
            self.classify = graph.function(self._classify, input_signature=[_TEXT])
            self.classify_pair = graph.function(
                self._classify_pair, input_signature=_pair_signature()
            )

    def _backbone_outputs(self, token_ids, segment_ids):
        outputs = self.backbone(
            {"token_ids": token_ids, "segment_ids": segment_ids}, training=False
        )
        padding = tf.cast(tf.not_equal(token_ids, PAD_ID), tf.float32)[..., None]
        return {
            "pooled_output": tf.cast(outputs["pooled_output"], tf.float32),
            "sequence_output": tf.cast(outputs["sequence_output"], tf.float32) * padding,
        }

    def _encode(self, text):
        token_ids, segment_ids, truncated = self.preprocessor.pack(text)
        return {
            **self._run_backbone(token_ids, segment_ids),
            "token_ids": token_ids,
            "truncated": truncated,
        }

    def _attention(self, text):
        # a [MASK] is one token, as fill_mask reads it
        token_ids, segment_ids, _, _ = self.preprocessor.pack_with_masks(text)
        _, weights = self.backbone.call_with_attention(token_ids, segment_ids)
        return {
            "tokens": self.tokenizer.id_to_token(token_ids),
            "self_attention": tf.cast(weights, tf.float32),
        }

    def _encode_pair(self, text_a, text_b):
        token_ids, segment_ids, truncated = self.preprocessor.pack(text_a, text_b)
        return {
            **self._run_backbone(token_ids, segment_ids),
            "token_ids": token_ids,
            "truncated": truncated,
        }

    def _probabilities(self, token_ids, segment_ids):
        logits = self.classifier(
            {"token_ids": token_ids, "segment_ids": segment_ids}, training=False
        )
        probabilities = tf.nn.softmax(tf.cast(logits, tf.float32))
        label_id = tf.argmax(probabilities, axis=-1, output_type=tf.int32)
        return {
            "label": tf.gather(self._labels, label_id),
            "label_id": label_id,
            "probabilities": probabilities,
        }

    def _classify(self, text):
        token_ids, segment_ids, truncated = self.preprocessor.pack(text)
        return {**self._run_classifier(token_ids, segment_ids), "truncated": truncated}

    def _classify_pair(self, text_a, text_b):
        token_ids, segment_ids, truncated = self.preprocessor.pack(text_a, text_b)
        return {**self._run_classifier(token_ids, segment_ids), "truncated": truncated}

    def _fill_mask(self, text, top_k):
        def encode(token_ids, segment_ids):
            return self._run_backbone(token_ids, segment_ids)["sequence_output"]

        return fill_masks(
            self.preprocessor,
            encode,
            self.mlm_head,
            text,
            top_k,
            self.max_predictions,
            self.max_top_k,
        )

    def fingerprint(self):
        """SHA-256 of what decides the outputs: weights, vocabulary, labels and settings.

        Returns:
            A str: the hex digest (`keras_attn.serving.versions.fingerprint`).
        """
        weights = [*self.backbone.weights]
        for extra in (self.mlm_head, self.classifier):
            weights += [
                w
                for w in (extra.weights if extra is not None else [])
                if all(w is not b for b in weights)
            ]
        return fingerprint(
            [
                json.dumps(
                    [
                        self.tokenizer.vocabulary,
                        self.tokenizer.lowercase,
                        self.tokenizer.strip_accents,
                        self.label_names,
                    ]
                ),
                f"{self.preprocessor.max_length} {self.max_predictions} {self.max_top_k}",
            ],
            weights,
        )

    def signatures(self):
        """The signatures to export, by name (`export` saves them).

        Returns:
            A dict of the signatures the task has (see the class docstring), `serving_default`
            among them: `fill_mask` with an MLM head, else `classify` with a classifier, else
            `encode`.
        """
        signatures = {
            "encode": self.encode,
            "encode_pair": self.encode_pair,
            "attention": self.attention,
        }
        if self.mlm_head is not None:
            signatures.update(fill_mask=self.fill_mask, serving_default=self.fill_mask)
        if self.classifier is not None:
            signatures.update(
                classify=self.classify,
                classify_pair=self.classify_pair,
                serving_default=self.classify,
            )
        signatures.setdefault("serving_default", self.encode)
        return signatures

    def write_assets_extra(self, folder):
        """Writes the backbone's settings, weights and vocabulary
        into `folder` (for fine-tuning), and a classifier's labels and pairs.

        Args:
            folder: str. The existing folder to write into (a version's `assets.extra/`).
        """
        settings = {
            **backbone_arguments(self.backbone.get_config()),
            "lowercase": self.tokenizer.lowercase,
            "strip_accents": self.tokenizer.strip_accents,
            "max_length": self.preprocessor.max_length,
        }
        with open(os.path.join(folder, BACKBONE_SETTINGS), "w") as file:
            json.dump(settings, file, indent=1)
        self.backbone.save_weights(os.path.join(folder, BACKBONE_WEIGHTS))
        with open(os.path.join(folder, VOCABULARY), "w", encoding="utf-8") as file:
            file.write("".join(token + "\n" for token in self.tokenizer.vocabulary))
        if self.classifier is not None:
            with open(os.path.join(folder, CLASSIFIER), "w", encoding="utf-8") as file:
                json.dump({"labels": self.label_names, "pairs": self.pairs}, file, indent=1)


def read_classifier(model_dir):
    """`{"labels": [names by id], "pairs": bool}` of a fine-tuned
    export; `{}` for an export without them.

    Args:
        model_dir: str. The export's version folder.

    Returns:
        A dict: the classifier's labels and whether it takes pairs, or `{}` when the folder has
        no readable classifier file.
    """
    try:
        with open(os.path.join(model_dir, "assets.extra", CLASSIFIER)) as file:
            return json.load(file)
    except (OSError, ValueError):
        return {}


def _pair_signature():
    return [
        tf.TensorSpec([None], tf.string, name="text_a"),
        tf.TensorSpec([None], tf.string, name="text_b"),
    ]
