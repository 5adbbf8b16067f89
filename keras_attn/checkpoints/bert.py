"""Hugging Face BERT folders as our BERT models, with the reference's outputs.

A folder `save_pretrained` wrote for `BertModel`, `BertForPreTraining`,
`BertForMaskedLM` or `BertForSequenceClassification` (its `config.json`,
model_type `bert`, and safetensors weights, with or without the `bert.`
prefix) becomes a `BertBackbone` of the same architecture, and its heads
ours: the masked-LM head (transform, LayerNorm, output bias; the output
projection is the token table in both) and the next-sentence head.

Our special tokens have fixed ids (`pipelines.special_tokens.SPECIAL_TOKENS`,
0-6); a Hugging Face vocabulary has its own (`[CLS]` is 101 in BERT's). With the
folder's `vocab.txt`, the vocabulary is reordered to ours (`[BOS]` and `[EOS]`,
which BERT does not use, take two `[unused]` slots) and the token table's rows
and the masked LM's output bias with it; `tokenizer_config.json` says how text
is normalised (`do_lower_case`; `strip_accents`, by default as lowercasing).
LayerNorms named `gamma` and `beta` (older checkpoints) read as `weight` and `bias`.

Everything is checked before the model is built: each setting's type and range,
each size against the shape of the tensor it makes, the number of layers against
the layers the weights hold, the vocabulary's tokens against the token table.
"""

import dataclasses
import inspect
import os

from keras_attn.checkpoints import files, huggingface
from keras_attn.checkpoints.tensors import TensorFiles
from keras_attn.errors import UserError
from keras_attn.models.bert import BertBackbone, BertMaskedLM, BertPretrainer
from pipelines.special_tokens import SPECIAL_TOKENS

VOCABULARY = "vocab.txt"
TOKENIZER_CONFIG = "tokenizer_config.json"

# Hugging Face's `hidden_act` → ours (`layers.activations`): "gelu" is the exact, erf form in both.
HIDDEN_ACT = {
    "gelu": "gelu",
    "gelu_new": "gelu_tanh",
    "gelu_pytorch_tanh": "gelu_tanh",
    "gelu_fast": "gelu_tanh",
    "relu": "relu",
    "silu": "silu",
    "swish": "silu",
}
SIZES = (
    "vocab_size",
    "max_position_embeddings",
    "type_vocab_size",
    "hidden_size",
    "num_attention_heads",
    "intermediate_size",
)
# Tensors some checkpoints hold and we do not read: a buffer of position ids, and the masked LM's
# output projection and bias, which are the token table and `cls.predictions.bias` again.
KNOWN_EXTRAS = (r"embeddings\.position_ids", r"cls\.predictions\.decoder\.(weight|bias)")
# Our heads, by the tensor that tells a checkpoint has them, and how a refusal names them.
HEADS = {"mlm_head": "cls.predictions.bias", "nsp_head": "cls.seq_relationship.weight"}
HEAD_NAMES = {"mlm_head": "masked-LM head", "nsp_head": "next-sentence head"}


def backbone_arguments(settings):
    """The checked sizes of a BERT `config.json` and the `BertBackbone` arguments they make.

    The number of layers is not among them: it is counted in the weights (`read_checkpoint`).

    Args:
        settings: Settings. The folder's `config.json` (`files.Settings`).

    Returns:
        A tuple `(sizes, arguments)`: `{name: value}` of the settings in `SIZES`, and the
            `BertBackbone` arguments (`preset=None`, every size given).

    Raises:
        UserError: when a setting is missing or wrong: `hidden_act` not one of `HIDDEN_ACT`,
            `pad_token_id` other than 0, `position_embedding_type` other than `"absolute"`, a size
            not a whole number from 1 to 2**31 - 1, `hidden_size` not a multiple of
            `num_attention_heads`, `hidden_dropout_prob` not in [0, 1) or `layer_norm_eps` not in
            (0, 1).
    """
    activation = HIDDEN_ACT[settings.choice("hidden_act", HIDDEN_ACT)]
    settings.equal("pad_token_id", 0, "only BERT's padding id 0 is read", default=0)
    settings.equal(
        "position_embedding_type",
        "absolute",
        "only BERT's absolute positions are read",
        default="absolute",
    )
    sizes = {name: settings.whole(name) for name in SIZES}
    if sizes["hidden_size"] % sizes["num_attention_heads"]:
        raise UserError(
            f"{settings.origin}: hidden_size {sizes['hidden_size']} does not split into "
            f"num_attention_heads {sizes['num_attention_heads']} heads"
        )
    arguments = dict(
        vocabulary_size=sizes["vocab_size"],
        preset=None,
        max_sequence_length=sizes["max_position_embeddings"],
        num_segments=sizes["type_vocab_size"],
        dropout=settings.number("hidden_dropout_prob", at_least=0, below=1, default=0.1),
        hidden_dim=sizes["hidden_size"],
        num_heads=sizes["num_attention_heads"],
        intermediate_dim=sizes["intermediate_size"],
        activation=activation,
        layer_norm_epsilon=settings.number("layer_norm_eps", above=0, below=1),
    )
    return sizes, arguments


def our_name(key):
    """A tensor's name without the `bert.` prefix, LayerNorm's `gamma` and `beta` as `weight` and
    `bias`.

    Args:
        key: str. The tensor's name in its file.

    Returns:
        A str: the name the converter asks for.
    """
    name = key.removeprefix("bert.")
    if ".LayerNorm." in name or name.startswith("LayerNorm."):
        name = name.replace(".gamma", ".weight").replace(".beta", ".bias")
    return name


def plan_of(sizes, layers, heads):
    """The `huggingface.Plan` of a `BertBackbone` of `sizes` and `layers`, with `heads`.

    Args:
        sizes: dict. The checked sizes of `backbone_arguments`.
        layers: int. The number of encoder layers.
        heads: tuple of str. The heads the checkpoint has, of `"mlm_head"` and `"nsp_head"`.

    Returns:
        A `huggingface.Plan`, its `order` not yet set.
    """
    plan = huggingface.Plan(sizes)
    width = "hidden_size"
    plan.table(
        "embeddings.word_embeddings.weight",
        "embedding/token_embedding/embeddings",
        ("vocab_size", width),
    )
    plan.tensor(
        "embeddings.token_type_embeddings.weight",
        "embedding/segment_embedding/embeddings",
        ("type_vocab_size", width),
    )
    plan.tensor(
        "embeddings.position_embeddings.weight",
        "embedding/position_embedding/embeddings",
        ("max_position_embeddings", width),
    )
    plan.layer_norm("embeddings.LayerNorm", "embedding/layer_norm", width)
    plan.dense("pooler.dense", "pooler", width, width)
    for layer in range(layers):
        theirs, ours = f"encoder.layer.{layer}", f"encoder_block_{layer}"
        names = {part: f"{theirs}.attention.self.{part}" for part in ("query", "key", "value")}
        plan.attention(
            {**names, "output": f"{theirs}.attention.output.dense"},
            f"{ours}/self_attention",
            width,
            "num_attention_heads",
        )
        plan.layer_norm(
            f"{theirs}.attention.output.LayerNorm", f"{ours}/self_attention_norm/layer_norm", width
        )
        inner = "intermediate_size"
        plan.dense(f"{theirs}.intermediate.dense", f"{ours}/feed_forward/inner", width, inner)
        plan.dense(f"{theirs}.output.dense", f"{ours}/feed_forward/outer", inner, width)
        plan.layer_norm(f"{theirs}.output.LayerNorm", f"{ours}/feed_forward_norm/layer_norm", width)
    if "mlm_head" in heads:  # its output projection is the token table
        plan.dense("cls.predictions.transform.dense", "mlm_head/transform", width, width)
        plan.layer_norm("cls.predictions.transform.LayerNorm", "mlm_head/layer_norm", width)
        plan.table("cls.predictions.bias", "mlm_head/output_bias", ("vocab_size",))
    if "nsp_head" in heads:  # label 0 is "B follows A" in both
        plan.dense("cls.seq_relationship", "nsp_head/projection", width, 2)
    return plan


def read_vocabulary(path, size):
    """Our order of the vocabulary file `path` (our special tokens first), and for each of our ids
    the checkpoint's.

    Its tokens must be valid UTF-8, each once, as many as the token table's `size` rows. Our
    `[BOS]` and `[EOS]`, which BERT does not use, take the first two `[unused` tokens when the file
    lacks them.

    Args:
        path: str. The vocabulary file, one token a line (`vocab.txt`).
        size: int. The rows of the token table.

    Returns:
        A tuple `(vocabulary, order)`: the list of tokens in our order and the list of the
            checkpoint's id of each of ours; `(None, None)` without the file.

    Raises:
        UserError: when the file cannot be read (`files.read_token_lines`: larger than
            `files.MAX_VOCABULARY_BYTES`, invalid UTF-8, a token twice), does not hold `size`
            tokens, or lacks one of our special tokens (with two `[unused` slots for `[BOS]`
            and `[EOS]`).
    """
    if not os.path.isfile(path):
        return None, None
    theirs = files.read_token_lines(path)
    if len(theirs) != size:
        raise UserError(f"{path}: {len(theirs)} tokens, where the token table has {size} rows")
    index = {token: i for i, token in enumerate(theirs)}
    spare = [i for i, token in enumerate(theirs) if token.startswith("[unused")][:2]
    stand_ins = {
        "[BOS]": spare[0] if spare else None,
        "[EOS]": spare[1] if len(spare) > 1 else None,
    }
    specials = [index.get(token, stand_ins.get(token)) for token in SPECIAL_TOKENS]
    if None in specials:
        missing = [token for token, i in zip(SPECIAL_TOKENS, specials) if i is None]
        raise UserError(
            f"{path}: no {', '.join(missing)} (BERT's special tokens, with two [unused] slots for "
            "[BOS] and [EOS])"
        )
    taken = set(specials)
    order = specials + [i for i in range(len(theirs)) if i not in taken]
    return list(SPECIAL_TOKENS) + [theirs[i] for i in order[len(SPECIAL_TOKENS) :]], order


def text_settings(folder):
    """How the folder's `tokenizer_config.json` normalises text, with Hugging Face's defaults.

    `do_lower_case` is true unless it says otherwise, and accents are stripped when lowercasing
    unless `strip_accents` says otherwise (null, as missing).

    Args:
        folder: str. The checkpoint folder.

    Returns:
        A tuple of two bools `(lowercase, strip_accents)`; `(True, True)` without the file.

    Raises:
        UserError: when the file cannot be read as a JSON object (`files.read_settings`), or its
            `do_lower_case` or `strip_accents` is not a JSON boolean.
    """
    path = os.path.join(folder, TOKENIZER_CONFIG)
    if not os.path.isfile(path):
        return True, True
    settings = files.read_settings(path)
    lowercase = settings.boolean("do_lower_case", default=True)
    if settings.values.get("strip_accents") is None:
        return lowercase, lowercase
    return lowercase, settings.boolean("strip_accents")


@dataclasses.dataclass
class Checkpoint:
    """A BERT checkpoint, checked: the `BertBackbone` arguments of its architecture, the `Plan` of
    its weights (the backbone's and those of the heads it has), their files, its vocabulary in our
    order (None without one) and how its text is normalised.

    Each argument is also an attribute of the same name.

    Args:
        folder: str. The checkpoint folder.
        arguments: dict. The `BertBackbone` arguments of its architecture.
        plan: huggingface.Plan. How each weight is made from its tensors.
        tensors: TensorHeaders. Its weights: `TensorFiles`, or keras-hub's weights file
            (`keras_attn.checkpoints.keras_hub.KerasWeights`).
        heads: tuple of str. The heads it has, of `"mlm_head"` and `"nsp_head"`.
        vocabulary: list of str. Its tokens in our order; None without a vocabulary file.
        lowercase: bool. Whether its tokenizer lowercases text.
        strip_accents: bool. Whether its tokenizer strips accents.
    """

    folder: str
    arguments: dict
    plan: huggingface.Plan
    tensors: object
    heads: tuple
    vocabulary: list
    lowercase: bool
    strip_accents: bool


def read_checkpoint(folder):
    """The `Checkpoint` of the Hugging Face BERT folder `folder`, every file checked, no tensor
    read yet.

    Tensors the model does not use are not read; those `KNOWN_EXTRAS` does not list are named in a
    warning.

    Args:
        folder: str. The Hugging Face BERT folder (`config.json`, safetensors weights, and
            optionally `vocab.txt` and `tokenizer_config.json`).

    Returns:
        A `Checkpoint`.

    Raises:
        UserError: when a file is missing or unreadable, a setting is wrong
            (`backbone_arguments`), the weights hold other layers than `num_hidden_layers` or
            tensors of another dtype or shape than the settings make, or the vocabulary does not
            fit the token table (`read_vocabulary`).
    """
    settings = huggingface.read_config(folder, "bert")
    sizes, arguments = backbone_arguments(settings)
    tensors = TensorFiles(folder, rename=our_name)
    arguments["num_layers"] = tensors.layer_count(
        r"encoder\.layer\.(\d+)\.", "num_hidden_layers", settings, "encoder layer"
    )
    heads = tuple(head for head, marker in HEADS.items() if marker in tensors)
    plan = plan_of(sizes, arguments["num_layers"], heads)
    tensors.check(plan.expected, sizes, settings.origin)
    huggingface.warn_unread(folder, tensors.unexpected(plan.expected, KNOWN_EXTRAS), "BERT")
    vocabulary, plan.order = read_vocabulary(os.path.join(folder, VOCABULARY), sizes["vocab_size"])
    return Checkpoint(folder, arguments, plan, tensors, heads, vocabulary, *text_settings(folder))


def load_preprocessor(checkpoint, max_length):
    """The `BertPreprocessor` of a checkpoint's vocabulary and text settings, or None without a
    vocabulary.

    Args:
        checkpoint: Checkpoint. The checked checkpoint.
        max_length: int. The preprocessor's `max_length`.

    Returns:
        A `pipelines.preprocessors.BertPreprocessor` on a `WordPieceTokenizer` of the
            vocabulary, or None.
    """
    from pipelines.preprocessors import BertPreprocessor
    from pipelines.tokenizers import WordPieceTokenizer

    if checkpoint.vocabulary is None:
        return None
    return BertPreprocessor(
        WordPieceTokenizer(
            checkpoint.vocabulary,
            lowercase=checkpoint.lowercase,
            strip_accents=checkpoint.strip_accents,
        ),
        max_length,
    )


def build_backbone(checkpoint, **kwargs):
    """A `BertBackbone` of the checkpoint, with its weights.

    Args:
        checkpoint: Checkpoint. The checked checkpoint.
        **kwargs: Only `huggingface.OWN_CHOICES`: `dropout`, `dtype`, `name`, `trainable` of the
            backbone; they win over the checkpoint's.

    Returns:
        A `BertBackbone`.

    Raises:
        UserError: when `kwargs` holds another argument, or a tensor read holds NaN or infinite
            values.
    """
    huggingface.check_own_choices(kwargs, checkpoint.folder)
    backbone = BertBackbone(**{**checkpoint.arguments, **kwargs})
    huggingface.assign(backbone.weights, checkpoint.plan, checkpoint.tensors, checkpoint.folder)
    return backbone


def build_task(task_class, checkpoint, preprocessor=None, **kwargs):
    """A BERT task on the checkpoint's backbone, with the heads it has and its preprocessor.

    A head the task needs and the checkpoint lacks is refused in one line (a classifier's output
    layer is new).

    Args:
        task_class: type. `BertPretrainer`, `BertMaskedLM` or `BertClassifier`.
        checkpoint: Checkpoint. The checked checkpoint.
        preprocessor: BertPreprocessor. The task's preprocessor. Defaults to None: the
            preprocessor of the checkpoint's vocabulary (`load_preprocessor`), None without one.
        **kwargs: The task's own arguments (those its constructor names, e.g. `num_classes`,
            and a `BertClassifier`'s `dropout`); the rest go to `build_backbone`.

    Returns:
        An instance of `task_class`.

    Raises:
        UserError: when the task needs a head the checkpoint lacks, or as `build_backbone`.
    """
    own = inspect.signature(task_class.__init__).parameters
    task_arguments = {key: kwargs.pop(key) for key in list(kwargs) if key in own}
    backbone = build_backbone(checkpoint, **kwargs)
    if preprocessor is None:
        preprocessor = load_preprocessor(checkpoint, backbone.get_config()["max_sequence_length"])
    task = task_class(backbone, preprocessor=preprocessor, **task_arguments)
    for head in HEADS:
        if hasattr(task, head):
            if head not in checkpoint.heads:
                raise UserError(
                    f"{checkpoint.folder}: no {HEAD_NAMES[head]} in its checkpoint, which "
                    f"{task_class.__name__} needs"
                )
            # its own weights, not the token table
            owned = [w for w in getattr(task, head).weights if w.path.startswith(f"{head}/")]
            huggingface.assign(owned, checkpoint.plan, checkpoint.tensors, checkpoint.folder)
    return task


def pretrained_task(checkpoint):
    """The checkpoint's task with every head it has: `BertPretrainer` (masked LM and next
    sentence) or `BertMaskedLM`.

    Args:
        checkpoint: Checkpoint. The checked checkpoint.

    Returns:
        A `BertPretrainer` when the checkpoint has a next-sentence head, else a `BertMaskedLM`,
            with the preprocessor of its vocabulary.

    Raises:
        UserError: when the checkpoint has no masked-LM head (a bare `BertModel`) or no
            vocabulary, which an export needs to read text.
    """
    if "mlm_head" not in checkpoint.heads:
        raise UserError(
            f"{checkpoint.folder}: no masked-LM head in its weights; a bare encoder loads with "
            "BertBackbone.from_preset(folder)"
        )
    if checkpoint.vocabulary is None:
        raise UserError(f"{checkpoint.folder}: no {VOCABULARY}, which an export needs to read text")
    task_class = BertPretrainer if "nsp_head" in checkpoint.heads else BertMaskedLM
    return build_task(task_class, checkpoint)
