"""A Hugging Face model folder read without torch: its `config.json`
and its safetensors weights as NumPy arrays.

`save_pretrained` (and `hf download`) write `config.json` and
either `model.safetensors` or shards listed by `model.safetensors.index.json`.
The weights are read with the `safetensors` package into float32 NumPy arrays,
and become ours by the same rules in every model:

    torch Linear weight W (out, in)   → Dense kernel W.T
    query/key/value W (d, d), b (d,)  → kernel W.T as (d, heads, d/heads), bias as (heads, d/heads)
    attention output W (d, d)         → output_kernel W.T as (heads, d/heads, d)
    LayerNorm weight, bias            → gamma, beta
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


def names_checkpoint(preset, presets):
    """Whether `from_preset(preset)` reads a checkpoint folder: `preset` is a folder and not one of
    `presets` (a preset's name wins over a folder of that name)."""
    return preset not in presets and is_folder(preset)


def read_json(path):
    """The JSON file `path`, refused in one line if it cannot be read."""
    try:
        with open(path, encoding="utf-8") as file:
            return json.load(file)
    except (OSError, ValueError) as error:
        raise UserError(f"{path}: not a readable JSON file ({error})") from None


def read_config(folder, model_type):
    """`config.json` of `folder`, refused in one line unless its
    `model_type` is `model_type` (any, with None).
    """
    if not os.path.isdir(folder):
        raise UserError(f"{folder}: no such folder")
    path = os.path.join(folder, CONFIG)
    config = read_json(path)
    if not isinstance(config, dict):
        raise UserError(f"{path}: not a JSON object of settings")
    if model_type not in (None, config.get("model_type")):
        raise UserError(f"{path}: model_type {config.get('model_type')!r}, not {model_type!r}")
    return config


def positive_whole_numbers(config, names, origin):
    """`{name: config[name]}`, refused in one line where a setting is
    missing or not a positive whole number.
    """
    for name in names:
        if name not in config:
            raise UserError(f"{origin}: no {name}")
        value = config[name]
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise UserError(f"{origin}: {name} {value!r}, where a positive whole number belongs")
    return {name: config[name] for name in names}


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
        raise UserError(
            f"{folder}: no {WEIGHTS} or {SHARDS} (only safetensors weights are read; "
            "`save_pretrained(..., safe_serialization=True)` writes them)"
        )
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


def model_type(folder):
    """The `model_type` of `folder`'s `config.json`."""
    return read_config(folder, None).get("model_type")


def dense(weights, name, into):
    """`{into/kernel, into/bias}` of the torch Linear `name`."""
    return {f"{into}/kernel": weights[f"{name}.weight"].T, f"{into}/bias": weights[f"{name}.bias"]}


def layer_norm(weights, name, into):
    """`{into/gamma, into/beta}` of the LayerNorm `name`."""
    return {f"{into}/gamma": weights[f"{name}.weight"], f"{into}/beta": weights[f"{name}.bias"]}


def attention(weights, names, into, heads):
    """Our `MultiHeadAttention` `into`'s weights, of the Linear layers `names` gives for "query",
    "key", "value" and "output"."""
    values = {}
    for part in ("query", "key", "value"):
        kernel = weights[f"{names[part]}.weight"].T
        values[f"{into}/{part}_kernel"] = kernel.reshape(kernel.shape[0], heads, -1)
        values[f"{into}/{part}_bias"] = weights[f"{names[part]}.bias"].reshape(heads, -1)
    output = weights[f"{names['output']}.weight"].T
    values[f"{into}/output_kernel"] = output.reshape(heads, -1, output.shape[1])
    values[f"{into}/output_bias"] = weights[f"{names['output']}.bias"]
    return values


def assign(weights, values, origin):
    """Sets each of `weights` to `values[weight.path]`, refusing in
    one line a weight of the wrong shape.
    """
    for weight in weights:
        value = values[weight.path]
        if tuple(value.shape) != tuple(weight.shape):
            raise UserError(
                f"{origin}: {weight.path} has shape {tuple(value.shape)} in the checkpoint, the "
                f"model's is {tuple(weight.shape)}"
            )
        weight.assign(value)


class Weights(dict):
    """A checkpoint's weights by name; a name asked for and missing is
    refused in one line naming the folder.
    """

    def __init__(self, values, origin):
        super().__init__(values)
        self.origin = origin

    def __missing__(self, name):
        raise UserError(f"{self.origin}: no weight {name} in its checkpoint")
