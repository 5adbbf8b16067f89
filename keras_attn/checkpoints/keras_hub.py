"""keras-hub BERT preset folders (what `save_to_preset` writes) as our `BertBackbone`, with
keras-hub's outputs.

A preset folder holds `config.json` (the backbone's Keras config, registered
name `keras_hub>BertBackbone`), `model.weights.h5` (its weights, in Keras's
file layout: each layer by its class's name, numbered in the order the model
made them), `tokenizer.json` (`lowercase`, `strip_accents`) and
`assets/tokenizer/vocabulary.txt`. keras-hub's BERT computes GELU with its tanh
approximation and LayerNorm with epsilon 1e-12; its kernels already have our
shapes. The masked-LM head of a keras-hub task (`task.weights.h5`) is not read:
its activation and epsilon differ from the backbone's, where ours share them.

As for Hugging Face folders, every setting, shape and dtype is checked, from the
weights file's dataset headers, before the model is built.
"""

import os

from keras_attn.checkpoints import bert, files, huggingface
from keras_attn.checkpoints.tensors import Tensor, TensorHeaders
from keras_attn.errors import UserError
from keras_attn.layers.add_and_norm import BERT_LAYER_NORM_EPSILON

WEIGHTS, TOKENIZER = "model.weights.h5", "tokenizer.json"
VOCABULARY = os.path.join("assets", "tokenizer", "vocabulary.txt")
REGISTERED = "keras_hub>"  # how a keras-hub class's registered name begins
BACKBONE = f"{REGISTERED}BertBackbone"
# The most a dataset's data may be compressed in its file (Keras writes weights uncompressed).
MAX_COMPRESSION = 1000
SIZES = (
    "vocabulary_size",
    "num_layers",
    "num_heads",
    "hidden_dim",
    "intermediate_dim",
    "max_sequence_length",
    "num_segments",
)


def is_preset(folder):
    """Whether `folder` is a keras-hub preset folder: its `config.json` names a keras-hub class.

    Args:
        folder: str. The folder.

    Returns:
        A bool: whether its `config.json` is a JSON object whose `registered_name` starts with
            `keras_hub>`; False without the file.

    Raises:
        UserError: when `config.json` cannot be read as JSON (`files.read_json`).
    """
    path = os.path.join(folder, huggingface.CONFIG)
    if not os.path.isfile(path):
        return False
    config = files.read_json(path)
    return isinstance(config, dict) and str(config.get("registered_name", "")).startswith(
        REGISTERED
    )


class KerasWeights(TensorHeaders):
    """The variables of a Keras `.weights.h5` file, named `layer/index` (the layer's path in the
    file, the variable's index in it), known by their dataset headers.

    The headers are read now, no variable's data. `FLOATS` names the dtypes read (as float32).

    Args:
        path: str. The weights file (`model.weights.h5`), named in refusals; it is both the
            attribute `path` and the attribute `folder`.

    Raises:
        UserError: when the file is not a readable HDF5 file.
    """

    FLOATS = ("float16", "float32", "float64")

    def __init__(self, path):
        import h5py

        super().__init__(path)
        self.path = path
        try:
            with h5py.File(path, "r") as file:
                file.visititems(self._visit)
        except OSError as error:
            raise UserError(f"{path}: not a readable Keras weights file ({error})") from None

    def _visit(self, name, item):
        import h5py

        if not isinstance(item, h5py.Dataset):
            return
        # HDF5 lets a dataset's data live in other files, or be none at all (its fill value):
        # only data the file holds is read.
        if item.external or item.is_virtual:
            raise UserError(f"{self.path}: {name} keeps its data in other files")
        stored, size = item.id.get_storage_size(), item.size * item.dtype.itemsize
        if size and stored * MAX_COMPRESSION < size:
            raise UserError(
                f"{self.path}: {name} claims {size:,} bytes of data and the file holds {stored:,}"
            )
        if "/vars/" in name:
            layer, index = name.rsplit("/vars/", 1)
            ours = f"{layer.removeprefix('layers/')}/{index}"
            if ours in self.headers:
                raise UserError(f"{self.path}: {name} again (also {self.headers[ours].key})")
            self.headers[ours] = Tensor(self.path, name, str(item.dtype), tuple(item.shape))

    def load(self, tensor):
        """The data of `tensor`, read from the weights file.

        Args:
            tensor: Tensor. One of `headers`' values.

        Returns:
            An array of the variable's dtype and shape.
        """
        import h5py

        with h5py.File(tensor.path, "r") as file:
            return file[tensor.key][()]


def plan_of(sizes, layers):
    """The `huggingface.Plan` of a `BertBackbone` from the variables of keras-hub's
    `model.weights.h5` (the token table's rows in our vocabulary's order).

    Args:
        sizes: dict. The checked sizes of the preset's `config.json` (`SIZES`), and `head_dim`.
        layers: int. The number of encoder layers.

    Returns:
        A `huggingface.Plan`, its `order` not yet set.
    """
    plan = huggingface.Plan(sizes)
    width, inner = "hidden_dim", "intermediate_dim"
    plan.table(
        "reversible_embedding/0",
        "embedding/token_embedding/embeddings",
        ("vocabulary_size", width),
    )
    tensors = {
        "embedding/0": ("embedding/segment_embedding/embeddings", ("num_segments", width)),
        "position_embedding/0": (
            "embedding/position_embedding/embeddings",
            ("max_sequence_length", width),
        ),
        "layer_normalization/0": ("embedding/layer_norm/gamma", (width,)),
        "layer_normalization/1": ("embedding/layer_norm/beta", (width,)),
        "dense/0": ("pooler/kernel", (width, width)),
        "dense/1": ("pooler/bias", (width,)),
    }
    head = "head_dim"
    for layer in range(layers):
        theirs, ours = (
            "transformer_encoder" + (f"_{layer}" if layer else ""),
            f"encoder_block_{layer}",
        )
        attention = f"{theirs}/_self_attention_layer"
        for part in ("query", "key", "value"):
            tensors[f"{attention}/{part}_dense/0"] = (
                f"{ours}/self_attention/{part}_kernel",
                (width, "num_heads", head),
            )
            tensors[f"{attention}/{part}_dense/1"] = (
                f"{ours}/self_attention/{part}_bias",
                ("num_heads", head),
            )
        tensors[f"{attention}/output_dense/0"] = (
            f"{ours}/self_attention/output_kernel",
            ("num_heads", head, width),
        )
        tensors[f"{attention}/output_dense/1"] = (f"{ours}/self_attention/output_bias", (width,))
        for sublayer, our_sublayer, shapes in (
            ("_self_attention_layer_norm", "self_attention_norm/layer_norm", [(width,), (width,)]),
            ("_feedforward_intermediate_dense", "feed_forward/inner", [(width, inner), (inner,)]),
            ("_feedforward_output_dense", "feed_forward/outer", [(inner, width), (width,)]),
            ("_feedforward_layer_norm", "feed_forward_norm/layer_norm", [(width,), (width,)]),
        ):
            names = ("gamma", "beta") if our_sublayer.endswith("layer_norm") else ("kernel", "bias")
            for index, (name, shape) in enumerate(zip(names, shapes)):
                tensors[f"{theirs}/{sublayer}/{index}"] = (f"{ours}/{our_sublayer}/{name}", shape)
    for theirs, (ours, shape) in tensors.items():
        plan.tensor(theirs, ours, shape)
    return plan


def read_bert(folder):
    """The `checkpoints.bert.Checkpoint` of a keras-hub BERT preset folder, every file checked:
    the backbone, no heads.

    Its activation is `"gelu_tanh"` and its LayerNorm epsilon 1e-12, keras-hub's. Without
    `tokenizer.json`, text is neither lowercased nor stripped of accents; without its
    vocabulary file, the checkpoint has no vocabulary.

    Args:
        folder: str. The preset folder (`config.json`, `model.weights.h5`, and optionally
            `tokenizer.json` and `assets/tokenizer/vocabulary.txt`).

    Returns:
        A `keras_attn.checkpoints.bert.Checkpoint`, no tensor read yet.

    Raises:
        UserError: when a file is missing or unreadable, `config.json`'s `registered_name` is not
            `keras_hub>BertBackbone` or it has no `config` object, a size is not a whole number
            from 1 to 2**31 - 1, `hidden_dim` is not a multiple of `num_heads`, `dropout` is not
            in [0, 1), the weights hold other layers than `num_layers` or variables of another
            dtype or shape than the sizes make, the vocabulary does not fit the token table
            (`bert.read_vocabulary`), or `tokenizer.json`'s `lowercase` or `strip_accents` is not
            a JSON boolean.
    """
    config_path = os.path.join(folder, huggingface.CONFIG)
    config = files.read_settings(config_path)
    config.equal("registered_name", BACKBONE, "only keras-hub's BertBackbone presets are read")
    nested = config.values.get("config")
    if not isinstance(nested, dict):
        raise UserError(f"{config_path}: no config object of the backbone's arguments")
    settings = files.Settings(nested, config_path)
    sizes = {name: settings.whole(name) for name in SIZES}
    if sizes["hidden_dim"] % sizes["num_heads"]:
        raise UserError(
            f"{config_path}: hidden_dim {sizes['hidden_dim']} does not split into num_heads "
            f"{sizes['num_heads']} heads"
        )
    sizes["head_dim"] = sizes["hidden_dim"] // sizes["num_heads"]
    # keras-hub's BertBackbone names its arguments as ours does; the layers are counted below.
    arguments = {name: sizes[name] for name in SIZES if name != "num_layers"}
    arguments.update(
        preset=None,
        dropout=settings.number("dropout", at_least=0, below=1, default=0.1),
        activation="gelu_tanh",
        layer_norm_epsilon=BERT_LAYER_NORM_EPSILON,
    )
    weights_path = os.path.join(folder, WEIGHTS)
    if not os.path.isfile(weights_path):
        raise UserError(f"{folder}: no {WEIGHTS}")
    tensors = KerasWeights(files.inside(folder, WEIGHTS, folder))
    arguments["num_layers"] = tensors.layer_count(
        r"transformer_encoder(?:_(\d+))?/", "num_layers", settings, "encoder layer"
    )
    plan = plan_of(sizes, arguments["num_layers"])
    tensors.check(plan.expected, sizes, config_path)
    huggingface.warn_unread(weights_path, tensors.unexpected(plan.expected, ()), "BERT")
    vocabulary, plan.order = bert.read_vocabulary(
        os.path.join(folder, VOCABULARY), sizes["vocabulary_size"]
    )
    lowercase = strip_accents = False
    if os.path.isfile(os.path.join(folder, TOKENIZER)):
        text = files.read_settings(os.path.join(folder, TOKENIZER)).values.get("config", {})
        text = files.Settings(
            text if isinstance(text, dict) else {}, os.path.join(folder, TOKENIZER)
        )
        lowercase = text.boolean("lowercase", default=False)
        strip_accents = text.boolean("strip_accents", default=False)
    return bert.Checkpoint(
        folder, arguments, plan, tensors, (), vocabulary, lowercase, strip_accents
    )
