"""A checkpoint's safetensors weights: names, dtypes and shapes read from the headers first; a
tensor's data only when it is used, one tensor at a time, refused by name unless it is finite.

`save_pretrained` (and `hf download`) write either `model.safetensors` or shards listed by
`model.safetensors.index.json`. The `safetensors` package reads each file's header, and refuses a
header whose tensors the file does not hold, before any data is read.
"""

import os
import re
from typing import NamedTuple

import numpy as np

from keras_attn.checkpoints import files
from keras_attn.errors import UserError

WEIGHTS = "model.safetensors"
SHARDS = "model.safetensors.index.json"
FLOATS = ("F16", "BF16", "F32", "F64")  # the dtypes read (as float32); any other is refused


class Tensor(NamedTuple):
    """One tensor of a weights file, known by its header: where it is, its dtype and its shape.

    Each argument is also an attribute of the same name.

    Args:
        path: str. The file holding it.
        key: str. Its name in that file.
        dtype: str. The file's name of its dtype: safetensors' (`"F32"`, `"BF16"`, ...), or
            NumPy's for a Keras weights file (`"float32"`, ...).
        shape: tuple of int. Its shape.
    """

    path: str
    key: str
    dtype: str
    shape: tuple


class TensorHeaders:
    """Tensors known by their names, dtypes and shapes, each read only when asked (`read`).

    A subclass fills `headers` (`{name: Tensor}`) and reads one tensor's data in `load(tensor)`.
    `FLOATS` names the dtypes read (as float32); a tensor of any other is refused (`check`).
    Each argument is also an attribute of the same name.

    Args:
        folder: str. Where the tensors are (the checkpoint folder, or a weights file), named in
            refusals.
    """

    FLOATS = FLOATS

    def __init__(self, folder):
        self.folder = folder
        self.headers = {}

    def load(self, tensor):
        """The data of `tensor`, read from its file; each subclass says how.

        Args:
            tensor: Tensor. One of `headers`' values.

        Returns:
            An array of the tensor's dtype and shape.

        Raises:
            NotImplementedError: in this class.
        """
        raise NotImplementedError

    def __contains__(self, name):
        return name in self.headers

    def read(self, name):
        """The tensor `name` as a float32 array, refused in one line if not all finite.

        Its data is read now (`load`), and only its own.

        Args:
            name: str. One of `headers`' names.

        Returns:
            A float32 array of the tensor's shape.

        Raises:
            UserError: when the tensor holds NaN or infinite values.
        """
        tensor = self.headers[name]
        value = np.asarray(self.load(tensor), np.float32)
        if not np.isfinite(value).all():
            raise UserError(f"{tensor.path}: {tensor.key} holds NaN or infinite values")
        return value

    def check(self, expected, sizes, settings_path):
        """Refuses in one line any tensor of `expected` that is missing, of a dtype other than a
        float, or of another shape.

        Only the headers are compared: no tensor's data is read.

        Args:
            expected: dict. `{name: shape}`, each dimension a whole number or the name of a size
                in `sizes`.
            sizes: dict. `{setting name: value}` of the settings file `settings_path`.
            settings_path: str. The settings file the sizes come from, named when they disagree
                with the weights.

        Raises:
            UserError: when a tensor of `expected` is missing, is not of one of `FLOATS`, or has
                another shape (naming the settings that make the expected one).
        """
        for name, dims in expected.items():
            if name not in self.headers:
                raise UserError(
                    f"{self.folder}: no tensor {name} in its weights, which its {settings_path} "
                    "asks for"
                )
            tensor = self.headers[name]
            if tensor.dtype not in self.FLOATS:
                raise UserError(
                    f"{tensor.path}: {tensor.key} is {tensor.dtype}; weights are read as floats "
                    f"({', '.join(self.FLOATS)})"
                )
            shape = tuple(sizes[dim] if isinstance(dim, str) else dim for dim in dims)
            if tensor.shape != shape:
                named = sorted({dim for dim in dims if isinstance(dim, str)})
                said = " and ".join(f"{dim} {sizes[dim]}" for dim in named)
                raise UserError(
                    f"{tensor.path}: {tensor.key} has shape {tensor.shape}, where "
                    f"{settings_path}'s {said} make {shape}"
                )

    def layer_count(self, pattern, setting, settings, what):
        """The number of layers `pattern` finds in the tensor names, refused unless they are
        layers 0 to `settings`'s `setting` - 1.

        Checked before the expected names of each layer are made, so a setting of a million layers
        costs nothing.

        Args:
            pattern: str. A regex matched at the start of each tensor name, whose first group is
                the layer's index (0 where the group matches nothing).
            setting: str. The setting of the number of layers, e.g. `"num_hidden_layers"`.
            settings: Settings. The settings file that holds it (`files.Settings`).
            what: str. What a layer is called in a refusal, e.g. `"encoder layer"`.

        Returns:
            An int: the number of layers.

        Raises:
            UserError: when `setting` is missing or not a whole number from 1, or the layers the
                names hold are not numbered 0 to `setting` - 1.
        """
        numbers = {
            match[1] or "0" for match in map(re.compile(pattern).match, self.headers) if match
        }
        if any(len(number) > 9 for number in numbers):
            raise UserError(f"{self.folder}: a {what} numbered {max(numbers, key=len)[:12]}...")
        found = sorted(int(number) for number in numbers)
        count = settings.whole(setting)
        if found != list(range(count)):
            held = "none" if not found else f"{len(found)}, numbered {found[0]} to {found[-1]}"
            raise UserError(
                f"{settings.origin}: {setting} {count}, but the weights hold {what}s: {held}"
            )
        return count

    def unexpected(self, expected, ignored):
        """The tensor names neither `expected` nor matched by one of the regexes `ignored`.

        Args:
            expected: dict. The names read, as keys (a `Plan`'s `expected`).
            ignored: tuple of str. Regexes of names known not to be read, each matched against
                a whole name.

        Returns:
            A list of str: the other names, in the headers' order.
        """
        patterns = [re.compile(pattern) for pattern in ignored]
        return [
            name
            for name in self.headers
            if name not in expected and not any(p.fullmatch(name) for p in patterns)
        ]


class TensorFiles(TensorHeaders):
    """The tensors of a folder's safetensors files, known by their headers.

    The files are `model.safetensors.index.json`'s shards when the folder has it, else
    `model.safetensors`; each must lie in the folder (`files.inside`). Their headers are read
    now, no tensor's data.

    Args:
        folder: str. The checkpoint folder.
        rename: callable. Each tensor's name in the file → the name the converter asks for (e.g.
            without a `bert.` prefix). Defaults to None: the name itself.

    Raises:
        UserError: when there is no weights file, a file is missing or not a readable
            safetensors file, the shard index is larger than `files.MAX_VOCABULARY_BYTES`, is not
            JSON or has no `weight_map` of file names, a file named lies outside the folder, or
            two tensors have the same name (after `rename`).
    """

    def __init__(self, folder, rename=None):
        super().__init__(folder)
        index = os.path.join(folder, SHARDS)
        if os.path.isfile(index):
            names, listed_in = self._shards(index), index
        elif os.path.isfile(os.path.join(folder, WEIGHTS)):
            names, listed_in = [WEIGHTS], folder
        else:
            raise UserError(
                f"{folder}: no {WEIGHTS} or {SHARDS} (only safetensors weights are read; "
                "`save_pretrained(..., safe_serialization=True)` writes them)"
            )
        for name in names:
            self._read_header(files.inside(folder, name, listed_in), rename or (lambda key: key))

    @staticmethod
    def _shards(path):
        index = files.read_json(path, files.MAX_VOCABULARY_BYTES)
        weight_map = index.get("weight_map") if isinstance(index, dict) else None
        if (
            not isinstance(weight_map, dict)
            or not weight_map
            or not all(isinstance(name, str) for name in weight_map.values())
        ):
            raise UserError(f"{path}: no weight_map of tensor names and the files holding them")
        return sorted(set(weight_map.values()))

    def _read_header(self, path, rename):
        from safetensors import SafetensorError, safe_open

        if not os.path.isfile(path):
            raise UserError(f"{path}: no such file")
        try:
            with safe_open(path, framework="np") as file:
                for key in file.keys():
                    part = file.get_slice(key)
                    name = rename(key)
                    if name in self.headers:
                        raise UserError(
                            f"{path}: {key} again (also {self.headers[name].key} in "
                            f"{self.headers[name].path})"
                        )
                    self.headers[name] = Tensor(
                        path, key, part.get_dtype(), tuple(part.get_shape())
                    )
        except (OSError, SafetensorError) as error:
            raise UserError(f"{path}: not a readable safetensors file ({error})") from None

    def load(self, tensor):
        """The data of `tensor`, read from its safetensors file.

        Args:
            tensor: Tensor. One of `headers`' values.

        Returns:
            An array of the tensor's shape.
        """
        from safetensors import safe_open

        with safe_open(tensor.path, framework="np") as file:
            return file.get_tensor(tensor.key)
