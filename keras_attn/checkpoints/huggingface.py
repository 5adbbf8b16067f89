"""A Hugging Face model folder read without torch: its `config.json` and its safetensors weights as NumPy arrays.

`save_pretrained` (and `huggingface-cli download`) write `config.json` and
either `model.safetensors` or shards listed by `model.safetensors.index.json`.
The weights are read with the `safetensors` package into float32 NumPy arrays.
"""

import json
import os

import numpy as np

from keras_attn.errors import UserError

CONFIG = "config.json"
WEIGHTS = "model.safetensors"
SHARDS = "model.safetensors.index.json"


def is_folder(path):
    """Whether `path` is a folder (a Hugging Face model folder, where a preset would be a name)."""
    return isinstance(path, (str, os.PathLike)) and os.path.isdir(path)


def read_config(folder, model_type):
    """`config.json` of `folder`, refused in one line unless its `model_type` is `model_type`."""
    if not os.path.isdir(folder):
        raise UserError(f"{folder}: no such folder")
    path = os.path.join(folder, CONFIG)
    try:
        with open(path, encoding="utf-8") as file:
            config = json.load(file)
    except (OSError, ValueError) as error:
        raise UserError(f"{path}: not a readable JSON file ({error})") from None
    if not isinstance(config, dict) or config.get("model_type") != model_type:
        found = config.get("model_type") if isinstance(config, dict) else None
        raise UserError(f"{path}: model_type {found!r}, not {model_type!r}")
    return config


def read_weights(folder):
    """`{name: float32 array}` of every weight in `folder`'s `model.safetensors` or its shards."""
    from safetensors import SafetensorError, safe_open

    index = os.path.join(folder, SHARDS)
    if os.path.isfile(index):
        with open(index, encoding="utf-8") as file:
            files = sorted(set(json.load(file)["weight_map"].values()))
    elif os.path.isfile(os.path.join(folder, WEIGHTS)):
        files = [WEIGHTS]
    else:
        raise UserError(f"{folder}: no {WEIGHTS} or {SHARDS} (only safetensors weights are read; "
                        "`save_pretrained(..., safe_serialization=True)` writes them)")
    weights = {}
    for name in files:
        path = os.path.join(folder, name)
        try:
            with safe_open(path, framework="np") as file:
                for key in file.keys():
                    weights[key] = np.asarray(file.get_tensor(key), np.float32)
        except (OSError, SafetensorError) as error:
            raise UserError(f"{path}: not a readable safetensors file ({error})") from None
    return weights


def assign(weights, values, origin):
    """Sets each of `weights` to `values[weight.path]`, refusing in one line a weight of the wrong shape."""
    for weight in weights:
        value = values[weight.path]
        if tuple(value.shape) != tuple(weight.shape):
            raise UserError(f"{origin}: {weight.path} has shape {tuple(value.shape)} in the checkpoint, the "
                            f"model's is {tuple(weight.shape)}")
        weight.assign(value)


class Weights(dict):
    """A checkpoint's weights by name; a name asked for and missing is refused in one line naming the folder."""

    def __init__(self, values, origin):
        super().__init__(values)
        self.origin = origin

    def __missing__(self, name):
        raise UserError(f"{self.origin}: no weight {name} in its checkpoint")
