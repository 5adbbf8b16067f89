"""Hugging Face model folders read without torch: what a converter expects of their tensors, and
how each of our weights is made from them.

A PyTorch layer's weights become ours by the same rules in every model:

    torch Linear weight W (out, in)   → Dense kernel W.T
    query/key/value W (d, d), b (d,)  → kernel W.T as (d, heads, d/heads), bias as (heads, d/heads)
    attention output W (d, d)         → output_kernel W.T as (heads, d/heads, d)
    LayerNorm weight, bias            → gamma, beta
    Embedding weight (rows, d)        → embeddings, its rows in our vocabulary's order

A `Plan` records both sides from the settings alone, before any tensor is read: `expected` (each
tensor's name and shape, checked against the files' headers by `TensorFiles.check`) and `values`
(for each of our weight paths, how to make it), which `assign` follows one weight at a time.
"""

import os
import warnings

from keras_attn.checkpoints import files
from keras_attn.errors import UserError

CONFIG = "config.json"
# What a caller may set on a checkpoint's model; the rest is its architecture.
OWN_CHOICES = ("dropout", "dtype", "name", "trainable")


def is_folder(path):
    """Whether `path` is a folder (a checkpoint folder, where a preset would be a name).

    Args:
        path: str or os.PathLike. What was given as a preset; anything else is not a folder.

    Returns:
        A bool.
    """
    return isinstance(path, (str, os.PathLike)) and os.path.isdir(path)


def read_config(folder, model_type):
    """The `Settings` of `folder`'s `config.json`, refused in one line unless its `model_type` is
    `model_type`.

    Args:
        folder: str. The checkpoint folder.
        model_type: str. The `model_type` read, e.g. `"bert"`.

    Returns:
        The `files.Settings` of its `config.json`.

    Raises:
        UserError: when `config.json` cannot be read as a JSON object (`files.read_settings`), or
            its `model_type` is not `model_type`.
    """
    settings = files.read_settings(os.path.join(folder, CONFIG))
    settings.equal("model_type", model_type, f"not a {model_type} folder")
    return settings


def check_own_choices(kwargs, folder):
    """Refuses in one line an architecture argument given beside a checkpoint, which fixes it.

    Args:
        kwargs: dict. The arguments given beside the checkpoint; only `OWN_CHOICES` (`dropout`,
            `dtype`, `name`, `trainable`) may be among them.
        folder: str. The checkpoint folder, named in a refusal.

    Raises:
        UserError: when `kwargs` holds another argument (naming each).
    """
    fixed = sorted(set(kwargs) - set(OWN_CHOICES))
    if fixed:
        raise UserError(
            f"{folder}: {', '.join(fixed)}: set by its checkpoint; only {', '.join(OWN_CHOICES)} "
            "may be given with it"
        )


def warn_unread(origin, names, family):
    """Warns, in one line, of a checkpoint's tensors `names` that are no part of a `family` model
    and are not read.

    Nothing is warned when `names` is empty.

    Args:
        origin: str. The folder or file holding them, named in the warning.
        names: list of str. The tensors not read (`TensorHeaders.unexpected`).
        family: str. The model they are no part of, e.g. `"BERT"`.
    """
    if names:
        listed = ", ".join(files.shown(name, 60) for name in names[:10])
        more = f" and {len(names) - 10} more" if len(names) > 10 else ""
        warnings.warn(f"{origin}: not read, not part of a {family}: {listed}{more}", stacklevel=3)


class Plan:
    """The tensors a converter expects and how each of our weights is made from them.

    Its attributes: `sizes` (a copy of the argument), `expected` (`{tensor name: shape}`, each
    dimension a number or a size's name), `values` (`{our weight path: function of the
    tensors → array}`) and `order` (our vocabulary's order: for each of our ids, the
    checkpoint's; None when the vocabulary keeps the checkpoint's order). Its methods fill
    `expected` and `values`; a converter sets `order`.

    Args:
        sizes: dict. `{setting name: value}`: the shapes in `expected` name these sizes, so a shape
            the weights disagree with is said with the settings that made it.
    """

    def __init__(self, sizes):
        self.sizes = dict(sizes)
        self.expected = {}  # {tensor name: shape, each dimension a number or a size's name}
        self.values = {}  # {our weight path: function of the `TensorFiles` → array}
        self.order = None  # our vocabulary's order: for each of our ids, the checkpoint's

    def dense(self, name, into, inputs, outputs):
        """The torch Linear `name` (`outputs` × `inputs`) as our Dense `into`.

        Its weight, transposed, is the kernel; its bias the bias.

        Args:
            name: str. The torch layer's name, e.g. `"pooler.dense"`.
            into: str. Our layer's path, e.g. `"pooler"`.
            inputs: int or str. Its input width: a number, or the name of a size in `sizes`.
            outputs: int or str. Its output width: a number, or the name of a size in `sizes`.
        """
        self.expected.update({f"{name}.weight": (outputs, inputs), f"{name}.bias": (outputs,)})
        self.values[f"{into}/kernel"] = lambda tensors: tensors.read(f"{name}.weight").T
        self.values[f"{into}/bias"] = lambda tensors: tensors.read(f"{name}.bias")

    def layer_norm(self, name, into, width):
        """The torch LayerNorm `name` as our LayerNormalization `into`.

        Its weight is the gamma, its bias the beta.

        Args:
            name: str. The torch layer's name, e.g. `"embeddings.LayerNorm"`.
            into: str. Our layer's path, e.g. `"embedding/layer_norm"`.
            width: int or str. Its width: a number, or the name of a size in `sizes`.
        """
        self.expected.update({f"{name}.weight": (width,), f"{name}.bias": (width,)})
        self.values[f"{into}/gamma"] = lambda tensors: tensors.read(f"{name}.weight")
        self.values[f"{into}/beta"] = lambda tensors: tensors.read(f"{name}.bias")

    def attention(self, names, into, width, heads):
        """Our `MultiHeadAttention` `into`, of the Linear layers `names` gives for "query", "key",
        "value" and "output" (each `width` × `width`, split into `heads`).

        The query, key and value kernels are the weights transposed, as `(width, heads,
        width / heads)`, their biases `(heads, width / heads)`; the output kernel is
        `(heads, width / heads, width)`.

        Args:
            names: dict. `{"query", "key", "value", "output"}` → the torch Linear's name.
            into: str. Our attention layer's path, e.g. `"encoder_block_0/self_attention"`.
            width: int or str. The model width: a number, or the name of a size in `sizes`.
            heads: int or str. The number of heads: a number, or the name of a size in `sizes`.
        """
        for part in ("query", "key", "value", "output"):
            self.expected.update(
                {f"{names[part]}.weight": (width, width), f"{names[part]}.bias": (width,)}
            )
        for part in ("query", "key", "value"):
            name = names[part]
            self.values[f"{into}/{part}_kernel"] = lambda tensors, name=name: _split_heads(
                tensors.read(f"{name}.weight").T, self.size(heads)
            )
            self.values[f"{into}/{part}_bias"] = lambda tensors, name=name: tensors.read(
                f"{name}.bias"
            ).reshape(self.size(heads), -1)
        name = names["output"]
        self.values[f"{into}/output_kernel"] = lambda tensors: tensors.read(
            f"{name}.weight"
        ).T.reshape(self.size(heads), -1, self.size(width))
        self.values[f"{into}/output_bias"] = lambda tensors: tensors.read(f"{name}.bias")

    def table(self, name, into, shape, fill=0.0):
        """The tensor `name` of `shape`, a row per token (a torch Embedding's, a logit bias), as our
        weight `into`, its rows in our vocabulary's order (`self.order`; a row the checkpoint lacks,
        None there, is `fill`).

        Args:
            name: str. The tensor's name, e.g. `"embeddings.word_embeddings.weight"`.
            into: str. Our weight's path, e.g. `"embedding/token_embedding/embeddings"`.
            shape: tuple. Its shape, each dimension a number or the name of a size in `sizes`;
                the first is the vocabulary.
            fill: float. The value of a row the checkpoint lacks. Defaults to 0.0.
        """
        self.expected[name] = shape
        self.values[into] = lambda tensors: self.in_our_order(tensors.read(name), fill)

    def tensor(self, name, into, shape, reshape=None):
        """The tensor `name` (of `shape`) as our weight `into`, reshaped to `reshape` if given.

        Args:
            name: str. The tensor's name.
            into: str. Our weight's path.
            shape: tuple. Its shape, each dimension a number or the name of a size in `sizes`.
            reshape: tuple of int. The shape of our weight. Defaults to None (the tensor's own).
        """
        self.expected[name] = shape
        self.values[into] = lambda tensors: (
            tensors.read(name) if reshape is None else tensors.read(name).reshape(reshape)
        )

    def size(self, dim):
        """A dimension's value: `dim` itself, or the size it names.

        Args:
            dim: int or str. A number, or the name of a size in `sizes`.

        Returns:
            An int.
        """
        return self.sizes[dim] if isinstance(dim, str) else dim

    def in_our_order(self, rows, fill=0.0):
        """`rows` (the checkpoint's, by its ids) by our ids, when the vocabulary was reordered.

        Args:
            rows: array of shape `(vocabulary, ...)`. The checkpoint's rows, by its ids.
            fill: float. The value of a row the checkpoint lacks (None in `order`). Defaults to
                0.0.

        Returns:
            `rows` itself when `order` is None; else an array of shape `(len(order), ...)`,
                row `i` the checkpoint's row `order[i]`.
        """
        if self.order is None:
            return rows
        lacking = [ours for ours, theirs in enumerate(self.order) if theirs is None]
        ordered = rows[[0 if theirs is None else theirs for theirs in self.order]]
        ordered[lacking] = fill
        return ordered


def _split_heads(kernel, heads):
    """A `(d, d)` kernel as `(d, heads, d / heads)`."""
    return kernel.reshape(kernel.shape[0], heads, -1)


def assign(weights, plan, tensors, origin):
    """Sets each of `weights` (a model's) from `plan`, reading one tensor at a time.

    The shapes were checked against the plan before the model was built; a weight the plan does
    not make, or makes in another shape, is refused in one line (a converter's mistake).

    Args:
        weights: list of keras.Variable. The weights to set: a model's, or a head's own.
        plan: Plan. How each is made.
        tensors: TensorHeaders. The checkpoint's tensors (`TensorFiles`, or keras-hub's
            `KerasWeights`), checked against `plan.expected`.
        origin: str. The checkpoint folder, named in a refusal.

    Raises:
        UserError: when the plan makes no value for a weight, or one of another shape, or a
            tensor read holds NaN or infinite values.
    """
    for weight in weights:
        if weight.path not in plan.values:
            raise UserError(f"{origin}: nothing in its checkpoint makes the model's {weight.path}")
        value = plan.values[weight.path](tensors)
        if tuple(value.shape) != tuple(weight.shape):
            raise UserError(
                f"{origin}: {weight.path} has shape {tuple(value.shape)} in the checkpoint, the "
                f"model's is {tuple(weight.shape)}"
            )
        weight.assign(value)
