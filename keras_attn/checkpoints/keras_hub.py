"""keras-hub BERT preset folders (what `save_to_preset` writes) as our
`BertBackbone`, with keras-hub's outputs.

A preset folder holds `config.json` (the backbone's Keras config, registered
name `keras_hub>BertBackbone`), `model.weights.h5` (its weights, in Keras's
file layout: each layer by its class's name, numbered in the order the model
made them), `tokenizer.json` (`lowercase`, `strip_accents`) and
`assets/tokenizer/vocabulary.txt`. keras-hub's BERT computes GELU with its tanh
approximation and LayerNorm with epsilon 1e-12; its kernels already have our
shapes. The masked-LM head of a keras-hub task (`task.weights.h5`) is not read:
its activation and epsilon differ from the backbone's, where ours share them.
"""

import os

from keras_attn.checkpoints.huggingface import CONFIG, read_json
from keras_attn.errors import UserError

WEIGHTS, TOKENIZER = "model.weights.h5", "tokenizer.json"
VOCABULARY = os.path.join("assets", "tokenizer", "vocabulary.txt")
BACKBONE = "keras_hub>BertBackbone"


def is_preset(folder):
    """Whether `folder` is a keras-hub preset folder: its `config.json` names a keras-hub class."""
    path = os.path.join(folder, CONFIG)
    if not os.path.isfile(path):
        return False
    config = read_json(path)
    return isinstance(config, dict) and str(config.get("registered_name", "")).startswith(
        "keras_hub>"
    )


def read_weights(path):
    """`{layer path inside the file: [its variables in order]}` of a Keras `.weights.h5` file."""
    import h5py

    layers = {}
    try:
        with h5py.File(path, "r") as file:

            def visit(name, item):
                if isinstance(item, h5py.Dataset) and "/vars/" in name:
                    layer, index = name.rsplit("/vars/", 1)
                    layers.setdefault(layer.removeprefix("layers/"), {})[int(index)] = item[()]

            file.visititems(visit)
    except OSError as error:
        raise UserError(f"{path}: not a readable Keras weights file ({error})") from None
    return {layer: [found[i] for i in sorted(found)] for layer, found in layers.items()}


def _layer(layers, name, origin):
    if name not in layers:
        raise UserError(f"{origin}: no layer {name} in its weights")
    return layers[name]


def backbone_values(layers, num_layers, order, origin):
    """`{our weight path: value}` of a `BertBackbone` from the layers of keras-hub's
    `model.weights.h5` (the token table's rows in `order`)."""

    def take(name):
        return _layer(layers, name, origin)

    tokens = take("reversible_embedding")[0]
    values = {
        "embedding/token_embedding/embeddings": tokens if order is None else tokens[order],
        "embedding/segment_embedding/embeddings": take("embedding")[0],
        "embedding/position_embedding/embeddings": take("position_embedding")[0],
        "embedding/layer_norm/gamma": take("layer_normalization")[0],
        "embedding/layer_norm/beta": take("layer_normalization")[1],
        "pooler/kernel": take("dense")[0],
        "pooler/bias": take("dense")[1],
    }
    sublayers = {
        "_self_attention_layer_norm": "self_attention_norm/layer_norm",
        "_feedforward_intermediate_dense": "feed_forward/inner",
        "_feedforward_output_dense": "feed_forward/outer",
        "_feedforward_layer_norm": "feed_forward_norm/layer_norm",
    }
    for i in range(num_layers):
        theirs, block = "transformer_encoder" + (f"_{i}" if i else ""), f"encoder_block_{i}"
        for part in ("query", "key", "value", "output"):
            kernel, bias = take(f"{theirs}/_self_attention_layer/{part}_dense")
            values[f"{block}/self_attention/{part}_kernel"] = kernel
            values[f"{block}/self_attention/{part}_bias"] = bias
        for sublayer, ours in sublayers.items():
            first, second = take(f"{theirs}/{sublayer}")
            names = ("gamma", "beta") if ours.endswith("layer_norm") else ("kernel", "bias")
            values.update(
                {f"{block}/{ours}/{names[0]}": first, f"{block}/{ours}/{names[1]}": second}
            )
    return values


def read_bert(folder):
    """The `checkpoints.bert.Checkpoint` of a keras-hub BERT preset
    folder: the backbone, no heads.
    """
    from keras_attn.checkpoints.bert import Checkpoint, read_vocabulary

    config_path = os.path.join(folder, CONFIG)
    config = read_json(config_path)
    if config.get("registered_name") != BACKBONE:
        raise UserError(
            f"{config_path}: a keras-hub {config.get('registered_name', '?').split('>')[-1]}, not "
            "a BertBackbone"
        )
    settings = config["config"]
    arguments = dict(
        vocabulary_size=settings["vocabulary_size"],
        preset=None,
        max_sequence_length=settings["max_sequence_length"],
        num_segments=settings["num_segments"],
        dropout=settings.get("dropout", 0.1),
        num_layers=settings["num_layers"],
        hidden_dim=settings["hidden_dim"],
        num_heads=settings["num_heads"],
        intermediate_dim=settings["intermediate_dim"],
        activation="gelu_tanh",
        layer_norm_epsilon=1e-12,
    )
    vocabulary, order = read_vocabulary(os.path.join(folder, VOCABULARY))
    text = {}
    if os.path.isfile(os.path.join(folder, TOKENIZER)):
        text = read_json(os.path.join(folder, TOKENIZER)).get("config", {})
    weights = os.path.join(folder, WEIGHTS)
    if not os.path.isfile(weights):
        raise UserError(f"{folder}: no {WEIGHTS}")
    values = backbone_values(read_weights(weights), settings["num_layers"], order, weights)
    return Checkpoint(
        folder,
        arguments,
        values,
        (),
        vocabulary,
        bool(text.get("lowercase", False)),
        bool(text.get("strip_accents", False)),
    )
