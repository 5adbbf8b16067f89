"""The exports under a model root, found and loaded as TensorFlow Serving finds them.

A model root holds `<name>/<version>/saved_model.pb` (what
`keras_attn.serving.export` writes), or a CTranslate2 model
(`<name>/<version>/model.bin`, what `keras-attn export-ct2` writes: served by
`CTranslate2Servable`, the SavedModel's `translate` signature over that
engine, so a user picks the engine per version). `ModelStore.refresh` finds the
versions that appeared since it last looked and loads them; a server
calls it every few seconds, as TensorFlow Serving polls its base path. A
version that fails to load is kept with its error (its state `END`), and
the others serve on. Only what a scan found can be served: a request
names a model and a version, never a path, and a folder whose real path
leaves the root (a symbolic link out) is not served.

Example:

    >>> store = ModelStore("saved_models")
    >>> store.refresh()  # doctest: +SKIP
    >>> store.find("transformer").loaded.signatures["translate"]  # doctest: +SKIP
"""

import dataclasses
import os
import re
import threading

from keras_attn.serving.versions import is_ctranslate2_folder, is_saved_model_folder, versions_of

# TensorFlow Serving's version states (ModelVersionStatus.State).
LOADING, AVAILABLE, END = "LOADING", "AVAILABLE", "END"
# A model's folder under the root, as the store reads it: a name that is never `..` or a path.
MODEL_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")


class NotFound(LookupError):
    """No such model or version, or not loaded (yet, or at all): the message says which."""


@dataclasses.dataclass
class Version:
    """One `<root>/<name>/<version>/` folder: its state and, once
    `AVAILABLE`, its loaded servable.

    Attributes:
        name: str. The model's name, its folder under the root.
        number: int. The version number, its folder under the model's.
        path: str. The version's folder.
        state: str. One of `"LOADING"`, `"AVAILABLE"`, `"END"` (failed to load), as TensorFlow
            Serving names them. Defaults to `"LOADING"`.
        error: str. Why it failed to load, in one line; `""` otherwise. Defaults to `""`.
        loaded: object. What `load` gave once `AVAILABLE`: a loaded SavedModel or a
            `CTranslate2Servable`, each with `signatures`. Defaults to `None`.
    """

    name: str
    number: int
    path: str
    state: str = LOADING
    error: str = ""
    loaded: object = None


def load_version(path, concurrent_calls=1):
    """A version's servable: `tf.saved_model.load` (with the tokenizer ops of tensorflow-text
    registered), or a CTranslate2 folder's `CTranslate2Servable`.

    Args:
        path: str. The version's folder.
        concurrent_calls: int. The calls of a CTranslate2 model that may run at once, which
            share the process's cores. Defaults to 1.

    Returns:
        The loaded SavedModel or the `CTranslate2Servable`; either has `signatures`.
    """
    if is_ctranslate2_folder(path):
        from keras_attn.serving.ctranslate2_translator import (
            CTranslate2Servable,
            load_ctranslate2,
            threads_per_call,
        )

        return CTranslate2Servable(
            load_ctranslate2(path, threads=threads_per_call(concurrent_calls))
        )
    import tensorflow as tf
    import tensorflow_text  # noqa: F401  (registers the ops the exports' tokenizers use)

    return tf.saved_model.load(path)


class ModelStore:
    """Every version of every model under `root`; thread-safe.

    Args:
        root: str. The model root (`saved_models/` by default in the CLI).
        load: callable. `path -> loaded model`; any exception it raises marks that
            version `END` with the exception's first line. Defaults to `load_version`.
    """

    def __init__(self, root, load=load_version):
        self.root = os.path.realpath(root)
        self._load = load
        self._versions = {}  # name -> {number: Version}
        self.skipped = set()  # folders under the root that are no model's name
        self._lock = threading.Lock()

    def refresh(self):
        """Finds the versions that appeared under the root since the last call and loads them.

        Returns:
            A list of `Version`: those found this time, loaded or failed.
        """
        found = [version for version in self._scan() if self._claim(version)]
        for version in found:
            try:
                loaded, state, error = self._load(version.path), AVAILABLE, ""
            except Exception as failure:  # noqa: BLE001  (any failure to load is that version's state)
                loaded, state, error = (
                    None,
                    END,
                    (str(failure).strip().splitlines() or [type(failure).__name__])[0],
                )
            with self._lock:
                version.loaded, version.state, version.error = loaded, state, error
        return found

    def names(self):
        """The model names found so far, sorted.

        Returns:
            A list of str.
        """
        with self._lock:
            return sorted(self._versions)

    def versions(self, name):
        """The `Version`s of `name`, oldest first.

        Args:
            name: str. The model's name.

        Returns:
            A list of `Version`, in every state.

        Raises:
            NotFound: when no model of that name was found.
        """
        with self._lock:
            if name not in self._versions:
                raise NotFound(f"Could not find any versions of model {name}")
            return [self._versions[name][number] for number in sorted(self._versions[name])]

    def find(self, name, version=None):
        """The `AVAILABLE` version `version` of `name` (the highest available one when `None`).

        Args:
            name: str. The model's name.
            version: int or `None`. The version number. Defaults to `None`: the highest
                available one.

        Returns:
            A `Version`, `AVAILABLE`.

        Raises:
            NotFound: when there is no such available version, said as TensorFlow Serving
                says it ("Servable not found for request: Latest(name)"), or why that version
                is not served (still loading, or failed to load).
        """
        with self._lock:
            versions = self._versions.get(name, {})
            if version is None:
                available = [v for number, v in sorted(versions.items()) if v.state == AVAILABLE]
                if available:
                    return available[-1]
                raise NotFound(f"Servable not found for request: Latest({name})")
            found = versions.get(version)
        if found is None:
            raise NotFound(f"Servable not found for request: Specific({name}, {version})")
        if found.state == LOADING:
            raise NotFound(
                f"Servable not found for request: Specific({name}, {version}) (still loading)"
            )
        if found.state == END:
            raise NotFound(
                f"Servable not found for request: Specific({name}, {version}) "
                f"(it failed to load: {found.error})"
            )
        return found

    def _scan(self):
        try:
            names = sorted(os.listdir(self.root))
        except OSError:
            return []
        for name in names:
            model_root = os.path.join(self.root, name)
            if not MODEL_NAME.fullmatch(name):
                if os.path.isdir(model_root) and not name.startswith("."):  # hidden: not said
                    self.skipped.add(name)
                continue
            if not self._inside_root(model_root):
                continue
            for number in versions_of(model_root):
                path = os.path.join(model_root, str(number))
                servable = is_saved_model_folder(path) or is_ctranslate2_folder(path)
                if servable and self._inside_root(path):
                    yield Version(name, number, path)

    def _inside_root(self, path):
        real = os.path.realpath(path)
        return os.path.commonpath([self.root, real]) == self.root and real != self.root

    def _claim(self, version):
        """Records `version` as `LOADING` unless it is known already; whether it was new."""
        with self._lock:
            known = self._versions.setdefault(version.name, {})
            if version.number in known:
                return False
            known[version.number] = version
            return True
