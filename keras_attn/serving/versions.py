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
        parts: list of str. Vocabularies as JSON, settings, hashed in order.
        weights: list of `keras.Variable`. The variables, hashed with their paths, dtypes and
            shapes.

    Returns:
        A str: the SHA-256 hex digest.
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

    Args:
        model_root: str. A model's folder, `<root>/<name>`; it need not exist.

    Returns:
        A list of int: the names of its entries that are whole numbers (up to 18 digits).
    """
    entries = os.listdir(model_root) if os.path.isdir(model_root) else []
    return sorted(int(entry) for entry in entries if re.fullmatch(r"\d{1,18}", entry))


def next_version(model_root):
    """The next integer version under `model_root` (1 when there is none).

    Args:
        model_root: str. A model's folder, `<root>/<name>`.

    Returns:
        An int: one more than the highest version.
    """
    return max(versions_of(model_root), default=0) + 1


_TEMPORARY = ".tmp-export-"  # then host, process id and a random part


# What makes a folder a CTranslate2 model (`keras-attn export-ct2`'s OUT)
CTRANSLATE2_MODEL = "model.bin"


SAVED_MODEL = "saved_model.pb"  # what makes a folder a SavedModel (an export's version)


def is_saved_model_folder(path):
    """Whether `path` holds a SavedModel.

    Args:
        path: str. A folder.

    Returns:
        A bool: whether it holds `saved_model.pb`.
    """
    return os.path.isfile(os.path.join(path, SAVED_MODEL))


def is_ctranslate2_folder(path):
    """Whether `path` holds a CTranslate2 model rather than a SavedModel.

    Args:
        path: str. A folder.

    Returns:
        A bool: whether it holds `model.bin`.
    """
    return os.path.isfile(os.path.join(path, CTRANSLATE2_MODEL))


def export(module, root="saved_models", name="transformer", metadata=None):
    """Saves `module` as `<root>/<name>/<next version>/`, atomically.

    The SavedModel is written to a temporary folder beside the versions and
    renamed into place only when complete, so a crash never leaves a
    half-written version; the temporary folder of an export whose process
    died is removed by the next export on the same host.

    Args:
        module: `tf.Module`. A `Translator`, a `CaptionServer`, a `BertServer`, or any
            `tf.Module` with `signatures()`; one with `write_assets_extra(folder)` also
            writes its own files into the version's `assets.extra/`.
        root: str. The export root. Defaults to `"saved_models"`.
        name: str. The model's folder under `root`. Defaults to `"transformer"`.
        metadata: dict or `None`. A JSON-able dict kept in the version's `METADATA` file,
            with the module's `fingerprint()` and `export_metadata()` when
            it has them. Defaults to `None` (an empty one).

    Returns:
        A str: the path of the new version.
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

    Args:
        module: `tf.Module`. As for `export`, with a `fingerprint()`.
        root: str. The export root. Defaults to `"saved_models"`.
        name: str. The model's folder under `root`. Defaults to `"transformer"`.
        metadata: dict or `None`. As for `export`. Defaults to `None`.
        force: bool. Whether to export even when the newest version holds the same
            fingerprint. Defaults to `False`.

    Returns:
        `(path, new)`: the new version and True, or the newest version,
        whose `fingerprint` equals `module.fingerprint()`, and False.
    """
    newest = None if force else newest_version(root, name)
    if newest and read_metadata(newest).get("fingerprint") == module.fingerprint():
        return newest, False
    return export(module, root, name, metadata), True


def newest_version(root, name):
    """The path of the highest version under `<root>/<name>/`, or None.

    Args:
        root: str. The export root.
        name: str. The model's folder under `root`.

    Returns:
        A str, or `None` when the model has no version.
    """
    version = next_version(os.path.join(root, name)) - 1
    return os.path.join(root, name, str(version)) if version else None


def read_metadata(path):
    """The `METADATA` dict of the export at `path` (`{}` when it has none).

    Args:
        path: str. A version folder.

    Returns:
        A dict: what `export` kept; `{}` when the file is missing, unreadable or not JSON.
    """
    try:
        with open(os.path.join(path, METADATA)) as file:
            return json.load(file)
    except (OSError, ValueError):
        return {}


def write_metadata(path, module, metadata):
    """Writes a version's `METADATA` file, and the module's own files beside it.

    Args:
        path: str. The version folder (the temporary one, before it is renamed).
        module: `tf.Module`. The exported module; its `fingerprint()` and `export_metadata()`
            are added to `metadata` when it has them, and its `write_assets_extra(folder)`
            writes into `assets.extra/`.
        metadata: dict or `None`. What the job keeps in the file.
    """
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
