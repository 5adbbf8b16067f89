"""Versioned, atomic exports: `<root>/<name>/<version>/`, the TensorFlow Serving layout.

An export is a plain TensorFlow SavedModel written to a temporary folder
and renamed to the next version number, so a reader never sees half of one.
Each version also holds `assets.extra/keras_attn.json` (servers ignore
`assets.extra/`): the module's fingerprint, so a rerun that changed
nothing does not export a duplicate, and what its job adds (e.g. where its
run wrote its test split).
"""

import hashlib
import json
import os
import re
import secrets
import shutil
import socket

import numpy as np
import tensorflow as tf

METADATA = os.path.join("assets.extra", "keras_attn.json")  # in a version folder; servers ignore it


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


def versions_of(model_root):
    """The integer versions under `model_root` (`<root>/<name>`), in
    increasing order ([] when none).
    """
    entries = os.listdir(model_root) if os.path.isdir(model_root) else []
    return sorted(int(entry) for entry in entries if re.fullmatch(r"\d{1,18}", entry))


def next_version(model_root):
    """The next integer version under `model_root` (1 when there is none)."""
    return max(versions_of(model_root), default=0) + 1


_TEMPORARY = ".tmp-export-"  # then host, process id and a random part


CTRANSLATE2_MODEL = (
    "model.bin"  # what makes a folder a CTranslate2 model (`keras-attn export-ct2`'s OUT)
)


SAVED_MODEL = "saved_model.pb"  # what makes a folder a SavedModel (an export's version)


def is_saved_model_folder(path):
    """Whether `path` holds a SavedModel."""
    return os.path.isfile(os.path.join(path, SAVED_MODEL))


def is_ctranslate2_folder(path):
    """Whether `path` holds a CTranslate2 model rather than a SavedModel."""
    return os.path.isfile(os.path.join(path, CTRANSLATE2_MODEL))


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
            with the module's `fingerprint()` and `export_metadata()` when
            it has them.

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
        write_metadata(temporary, module, metadata)
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


def write_metadata(path, module, metadata):
    metadata = dict(metadata or {})
    if hasattr(module, "fingerprint"):
        metadata["fingerprint"] = module.fingerprint()
    # what the module says of itself (a Translator: its compiled search)
    if hasattr(module, "export_metadata"):
        metadata.update(module.export_metadata())
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
