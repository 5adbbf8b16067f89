"""SavedModel export: strings in, strings out, tokenizers inside the graph.

An export is a plain TensorFlow SavedModel at
`<root>/<name>/<version>/` (the TensorFlow Serving layout). It loads in a
process that imports only `tensorflow` and `tensorflow_text`:

    import tensorflow as tf, tensorflow_text  # registers the tokenizer ops
    translator = tf.saved_model.load("saved_models/transformer/1")
    out = translator.signatures["translate"](
        text=tf.constant(["Ein Hund läuft."]), beam_width=tf.constant(4))
    out["translation"], out["score"], out["truncated"]

Each version also holds `assets.extra/keras_attn.json` (servers ignore
`assets.extra/`): the translator's fingerprint, so a rerun that changed
nothing does not export a duplicate, and where its run wrote its test split.
"""

import hashlib
import json
import os
import re
import shutil
import secrets
import socket

import numpy as np
import tensorflow as tf

from keras_attn import decoding
from keras_attn.special_tokens import PAD_ID

METADATA = os.path.join("assets.extra", "keras_attn.json")  # in a version folder; servers ignore it


class Translator(tf.Module):
    """A translation model with its tokenizers and search, ready to export.

    Signatures:
    - `translate(text: string[B], beam_width: int32[])` →
      `translation` string[B], `score` float32[B] (length-normalized
      log-probability), `truncated` bool[B] (the input was longer than the
      model accepts and was cut). Beam width 1 is greedy search; a width
      below 1 counts as 1, and one above `max_beam_width` (or the target
      vocabulary size, if smaller) as that cap.
    - `attention(text: string[B])` → `translation`, `source_tokens`
      string[B, S], `output_tokens` string[B, L] and `cross_attention`
      float32[B, L, layers, heads, S] of greedy decoding, for plotting.

    Every input gives one output: an empty batch gives empty outputs, and
    a text with no tokens (empty, blank or invisible characters only)
    translates to `""` with score 0.0 (log-probability 0: certain, which a
    decoded translation never scores), no output tokens and zero attention.

    Args:
        task: a `keras_attn.models.Seq2SeqLM` with its preprocessor (whose
            `max_length` caps sources and outputs), decoded through its stepper.
        length_penalty: GNMT length penalty α of beam search.
        max_beam_width: the widest beam a request gets (memory and time
            grow with it).
    """

    def __init__(self, task, length_penalty=0.6, max_beam_width=32):
        super().__init__(name="translator")
        if task.preprocessor is None:
            raise ValueError(f"{task.name}: a translation export needs the task's TranslationPreprocessor")
        self.model = task.backbone
        self.stepper = task.stepper
        self.preprocessor = preprocessor = task.preprocessor
        # Tracked here too: their vocabulary files are the SavedModel's assets.
        self.source_tokenizer = preprocessor.source_tokenizer
        self.target_tokenizer = preprocessor.target_tokenizer
        self.length_penalty = length_penalty
        self.max_beam_width = max_beam_width

    def encode(self, text):
        """Strings → `(source ids (B, S ≥ 1), truncated (B,))`."""
        return self.preprocessor.tokenize_source(text)

    def _decode_length(self, source):
        return decoding.max_decode_length(source, cap=self.preprocessor.max_length)

    @tf.function(
        input_signature=[
            tf.TensorSpec([None], tf.string, name="text"),
            tf.TensorSpec([], tf.int32, name="beam_width"),
        ]
    )
    def translate(self, text, beam_width):
        source, truncated = self.encode(text)
        empty = _no_tokens(source)
        cap = min(self.max_beam_width, self.target_tokenizer.vocabulary_size)
        result = decoding.beam_search(
            self.stepper,
            source,
            beam_width=tf.clip_by_value(beam_width, 1, cap),
            max_length=self._decode_length(source),
            length_penalty=self.length_penalty,
        )
        tokens = tf.where(empty[:, None], PAD_ID, result["tokens"])
        return {
            "translation": self.target_tokenizer.detokenize(tokens),
            "score": tf.where(empty, 0.0, result["scores"]),
            "truncated": truncated,
        }

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="text")])
    def attention(self, text):
        source, _ = self.encode(text)
        empty = _no_tokens(source)
        result = decoding.greedy_search(
            self.stepper,
            source,
            max_length=self._decode_length(source),
            return_attention=True,
        )
        tokens = tf.where(empty[:, None], PAD_ID, result["tokens"])
        attention = tf.cast(result["attention"], tf.float32)
        return {
            "translation": self.target_tokenizer.detokenize(tokens),
            "source_tokens": self.source_tokenizer.id_to_token(source),
            "output_tokens": self.target_tokenizer.id_to_token(tokens),
            "cross_attention": tf.where(empty[:, None, None, None, None], 0.0, attention),
        }

    def fingerprint(self):
        """SHA-256 of what decides the outputs: weights, vocabularies and settings.

        Two translators with the same fingerprint translate alike (with the
        same code), so an export whose fingerprint equals the newest
        version's need not be written again.
        """
        return fingerprint(
            [json.dumps([t.vocabulary, t.lowercase]) for t in (self.source_tokenizer, self.target_tokenizer)]
            + [f"{self.preprocessor.max_length} {self.length_penalty} {self.max_beam_width}"],
            self.model.weights,
        )

    def signatures(self):
        return {
            "serving_default": self.translate,
            "translate": self.translate,
            "attention": self.attention,
        }


def fingerprint(parts, weights):
    """SHA-256 of what decides a served module's outputs: the fingerprint of every export.

    Args:
        parts: strings (vocabularies as JSON, settings), hashed in order.
        weights: the variables, hashed with their paths, dtypes and shapes.
    """
    digest = hashlib.sha256()
    for part in parts:
        digest.update(part.encode())
    for weight in weights:
        value = np.asarray(weight.numpy())
        digest.update(f"{weight.path} {value.dtype} {value.shape}".encode())
        digest.update(value.tobytes())
    return digest.hexdigest()


def _no_tokens(source):
    """`(B,)` bool: the rows of `(B, S)` source ids that are all padding (no text)."""
    return tf.reduce_all(tf.equal(source, PAD_ID), axis=1)


def next_version(model_root):
    """The next integer version under `model_root` (1 when there is none)."""
    versions = [
        int(entry)
        for entry in (os.listdir(model_root) if os.path.isdir(model_root) else [])
        if re.fullmatch(r"\d+", entry)
    ]
    return max(versions, default=0) + 1


_TEMPORARY = ".tmp-export-"  # then host, process id and a random part


def export(module, root="saved_models", name="transformer", metadata=None):
    """Saves `module` as `<root>/<name>/<next version>/`, atomically.

    The SavedModel is written to a temporary folder beside the versions and
    renamed into place only when complete, so a crash never leaves a
    half-written version; the temporary folder of an export whose process
    died is removed by the next export on the same host.

    Args:
        module: a `Translator`, a `BertServer`, or any `tf.Module` with
            `signatures()`; one with `write_assets_extra(folder)` also
            writes its own files into the version's `assets.extra/`.
        root: the export root.
        name: the model's folder under `root`.
        metadata: a JSON-able dict kept in the version's `METADATA` file,
            with the module's `fingerprint()` when it has one.

    Returns:
        The path of the new version.
    """
    model_root = os.path.join(root, name)
    os.makedirs(model_root, exist_ok=True)
    _remove_abandoned_exports(model_root)
    # Not mkdtemp: its mode 0700 would stay on the version and hide it from a server's user.
    temporary = os.path.join(
        model_root, f"{_TEMPORARY}{socket.gethostname()}-{os.getpid()}-{secrets.token_hex(4)}"
    )
    os.makedirs(temporary)
    try:
        tf.saved_model.save(module, temporary, signatures=module.signatures())
        _write_metadata(temporary, module, metadata)
        while True:
            path = os.path.join(model_root, str(next_version(model_root)))
            try:
                os.rename(temporary, path)
                return path
            except OSError:
                if not os.path.isdir(path):  # not a race with another export
                    raise
    finally:
        if os.path.isdir(temporary):
            shutil.rmtree(temporary, ignore_errors=True)


def export_if_changed(module, root="saved_models", name="transformer", metadata=None, force=False):
    """`export`s `module` unless the newest version already holds it (or `force`).

    Returns:
        `(path, new)`: the new version and True, or the newest version,
        whose `fingerprint` equals `module.fingerprint()`, and False.
    """
    newest = None if force else newest_version(root, name)
    if newest and read_metadata(newest).get("fingerprint") == module.fingerprint():
        return newest, False
    return export(module, root, name, metadata), True


def newest_version(root, name):
    """The path of the highest version under `<root>/<name>/`, or None."""
    version = next_version(os.path.join(root, name)) - 1
    return os.path.join(root, name, str(version)) if version else None


def read_metadata(path):
    """The `METADATA` dict of the export at `path` (`{}` when it has none)."""
    try:
        with open(os.path.join(path, METADATA)) as file:
            return json.load(file)
    except (OSError, ValueError):
        return {}


def _write_metadata(path, module, metadata):
    metadata = dict(metadata or {})
    if hasattr(module, "fingerprint"):
        metadata["fingerprint"] = module.fingerprint()
    os.makedirs(os.path.dirname(os.path.join(path, METADATA)), exist_ok=True)
    if hasattr(module, "write_assets_extra"):  # e.g. BertServer: what fine-tuning rebuilds it from
        module.write_assets_extra(os.path.dirname(os.path.join(path, METADATA)))
    with open(os.path.join(path, METADATA), "w") as file:
        json.dump(metadata, file, indent=1)


def _remove_abandoned_exports(model_root):
    """Deletes the temporary folders of this host's exports whose process is gone."""
    pattern = re.compile(re.escape(_TEMPORARY + socket.gethostname()) + r"-(\d+)-[^-]+")
    for entry in os.listdir(model_root):
        match = pattern.fullmatch(entry)
        if match and not _process_exists(int(match.group(1))):
            shutil.rmtree(os.path.join(model_root, entry), ignore_errors=True)


def _process_exists(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True
