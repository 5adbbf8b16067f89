"""Hugging Face BERT folders (and keras-hub's, `checkpoints.keras_hub`)
as our BERT models, with the reference's outputs.

A folder `save_pretrained` wrote for `BertModel`, `BertForPreTraining`,
`BertForMaskedLM` or `BertForSequenceClassification` (its `config.json`,
model_type `bert`, and safetensors weights, with or without the `bert.`
prefix) becomes a `BertBackbone` of the same architecture, and its heads
ours: the masked-LM head (transform, LayerNorm, output bias; the output
projection is the token table in both) and the next-sentence head.

Our special tokens have fixed ids (`special_tokens.SPECIAL_TOKENS`, 0-6); a
Hugging Face vocabulary has its own (`[CLS]` is 101 in BERT's). With the
folder's `vocab.txt`, the vocabulary is reordered to ours (`[BOS]` and `[EOS]`,
which BERT does not use, take two `[unused]` slots) and the token table's rows
and the masked LM's output bias with it; `tokenizer_config.json` says how text
is normalised (`do_lower_case`; `strip_accents`, by default as lowercasing).
LayerNorms named `gamma` and `beta` (older checkpoints) read as `weight` and `bias`.
"""

import dataclasses
import os

from keras_attn.checkpoints import huggingface
from keras_attn.errors import UserError
from keras_attn.special_tokens import SPECIAL_TOKENS

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


def backbone_arguments(config, origin):
    """`BertBackbone` arguments of a Hugging Face BERT `config.json`."""
    if config.get("hidden_act") not in HIDDEN_ACT:
        raise UserError(
            f"{origin}: hidden_act {config.get('hidden_act')!r} is not one of "
            f"{', '.join(HIDDEN_ACT)}"
        )
    if (
        config.get("pad_token_id", 0) != 0
        or config.get("position_embedding_type", "absolute") != "absolute"
    ):
        raise UserError(
            f"{origin}: pad_token_id {config.get('pad_token_id')} and position_embedding_type "
            f"{config.get('position_embedding_type')!r}: only 0 and 'absolute' (BERT's) are read"
        )
    sizes = huggingface.positive_whole_numbers(
        config,
        (
            "vocab_size",
            "max_position_embeddings",
            "type_vocab_size",
            "num_hidden_layers",
            "hidden_size",
            "num_attention_heads",
            "intermediate_size",
        ),
        origin,
    )
    epsilon = config.get("layer_norm_eps")
    if isinstance(epsilon, bool) or not isinstance(epsilon, (int, float)) or epsilon <= 0:
        raise UserError(f"{origin}: layer_norm_eps {epsilon!r}, where a positive number belongs")
    if sizes["hidden_size"] % sizes["num_attention_heads"]:
        raise UserError(
            f"{origin}: hidden_size {sizes['hidden_size']} does not split into num_attention_heads "
            f"{sizes['num_attention_heads']} heads"
        )
    return dict(
        vocabulary_size=sizes["vocab_size"],
        preset=None,
        max_sequence_length=sizes["max_position_embeddings"],
        num_segments=sizes["type_vocab_size"],
        dropout=config.get("hidden_dropout_prob", 0.1),
        num_layers=sizes["num_hidden_layers"],
        hidden_dim=sizes["hidden_size"],
        num_heads=sizes["num_attention_heads"],
        intermediate_dim=sizes["intermediate_size"],
        activation=HIDDEN_ACT[config["hidden_act"]],
        layer_norm_epsilon=epsilon,
    )


def read_vocabulary(path):
    """`(vocabulary, order)`: our order of the vocabulary file `path` (our special tokens first),
    and for each of our ids the checkpoint's; `(None, None)` without the file."""
    if not os.path.isfile(path):
        return None, None
    with open(path, encoding="utf-8") as file:
        theirs = [line.rstrip("\n") for line in file]
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


def load_preprocessor(checkpoint, max_length):
    """The `BertPreprocessor` of a checkpoint's vocabulary and text
    settings, or None without a vocabulary.
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


def text_settings(folder):
    """`(lowercase, strip_accents)` of the folder's `tokenizer_config.json`, with Hugging Face's
    defaults (accents stripped when lowercasing, unless it says otherwise)."""
    settings = {}
    path = os.path.join(folder, TOKENIZER_CONFIG)
    if os.path.isfile(path):
        settings = huggingface.read_json(path)
        if not isinstance(settings, dict):
            raise UserError(f"{path}: not a JSON object of settings")
    lowercase = settings.get("do_lower_case", True)
    return lowercase, lowercase if settings.get("strip_accents") is None else bool(
        settings["strip_accents"]
    )


def read_weights(folder):
    """The folder's weights by their names without the `bert.` prefix,
    LayerNorm's as `weight` and `bias`.
    """
    weights = {}
    for name, value in huggingface.read_weights(folder).items():
        name = name.removeprefix("bert.")
        if ".LayerNorm." in name or name.startswith("LayerNorm."):
            name = name.replace(".gamma", ".weight").replace(".beta", ".bias")
        weights[name] = value
    return huggingface.Weights(weights, folder)


def backbone_values(weights, heads, order=None):
    """`{our weight path: value}` of a `BertBackbone` with `heads` attention heads (the token
    table's rows in `order`, `read_vocabulary`'s)."""
    tokens = weights["embeddings.word_embeddings.weight"]
    values = {
        "embedding/token_embedding/embeddings": tokens if order is None else tokens[order],
        "embedding/segment_embedding/embeddings": weights[
            "embeddings.token_type_embeddings.weight"
        ],
        "embedding/position_embedding/embeddings": weights["embeddings.position_embeddings.weight"],
        **huggingface.layer_norm(weights, "embeddings.LayerNorm", "embedding/layer_norm"),
        **huggingface.dense(weights, "pooler.dense", "pooler"),
    }
    layer = 0
    while f"encoder.layer.{layer}.attention.self.query.weight" in weights:
        source, block = f"encoder.layer.{layer}", f"encoder_block_{layer}"
        names = {part: f"{source}.attention.self.{part}" for part in ("query", "key", "value")}
        values.update(
            huggingface.attention(
                weights,
                {**names, "output": f"{source}.attention.output.dense"},
                f"{block}/self_attention",
                heads,
            )
        )
        values.update(
            huggingface.layer_norm(
                weights,
                f"{source}.attention.output.LayerNorm",
                f"{block}/self_attention_norm/layer_norm",
            )
        )
        values.update(
            huggingface.dense(
                weights, f"{source}.intermediate.dense", f"{block}/feed_forward/inner"
            )
        )
        values.update(
            huggingface.dense(weights, f"{source}.output.dense", f"{block}/feed_forward/outer")
        )
        values.update(
            huggingface.layer_norm(
                weights, f"{source}.output.LayerNorm", f"{block}/feed_forward_norm/layer_norm"
            )
        )
        layer += 1
    return values


def masked_lm_values(weights, order=None):
    """Our `mlm_head`'s weights (its output projection is the token
    table, set with the backbone's).
    """
    bias = weights["cls.predictions.bias"]
    return {
        **huggingface.dense(weights, "cls.predictions.transform.dense", "mlm_head/transform"),
        **huggingface.layer_norm(
            weights, "cls.predictions.transform.LayerNorm", "mlm_head/layer_norm"
        ),
        "mlm_head/output_bias": bias if order is None else bias[order],
    }


def next_sentence_values(weights):
    """Our `nsp_head`'s weights: label 0 is "B follows A" in both."""
    return huggingface.dense(weights, "cls.seq_relationship", "nsp_head/projection")


@dataclasses.dataclass
class Checkpoint:
    """A BERT checkpoint, read once: the `BertBackbone` arguments of its architecture, its weights
    as ours (by weight path: the backbone's and those of the heads it has), its vocabulary in our
    order (None without one) and how its text is normalised."""

    folder: str
    arguments: dict
    values: dict
    heads: tuple
    vocabulary: list
    lowercase: bool
    strip_accents: bool


HEADS = {"mlm_head": "masked-LM head", "nsp_head": "next-sentence head"}


def read_checkpoint(folder):
    """The `Checkpoint` of `folder`, a Hugging Face BERT folder or a
    keras-hub preset folder, each file read once."""
    from keras_attn.checkpoints import keras_hub

    if keras_hub.is_preset(folder):
        return keras_hub.read_bert(folder)
    config = huggingface.read_config(folder, "bert")
    # its settings checked first
    arguments = backbone_arguments(config, os.path.join(folder, huggingface.CONFIG))
    weights = read_weights(folder)
    vocabulary, order = read_vocabulary(os.path.join(folder, VOCABULARY))
    values = backbone_values(weights, arguments["num_heads"], order)
    heads = []
    if "cls.predictions.bias" in weights:
        values.update(masked_lm_values(weights, order))
        heads.append("mlm_head")
    if "cls.seq_relationship.weight" in weights:
        values.update(next_sentence_values(weights))
        heads.append("nsp_head")
    return Checkpoint(folder, arguments, values, tuple(heads), vocabulary, *text_settings(folder))


def load_backbone(folder, **kwargs):
    """A `BertBackbone` with the weights of the Hugging Face BERT folder `folder` (`kwargs` win over
    its config: `dropout`, `dtype`, `name`)."""
    return _backbone(read_checkpoint(folder), **kwargs)


def _backbone(checkpoint, **kwargs):
    from keras_attn.models.bert import BertBackbone

    backbone = BertBackbone(**{**checkpoint.arguments, **kwargs})
    huggingface.assign(backbone.weights, checkpoint.values, checkpoint.folder)
    return backbone


def load_task(task_class, folder, preprocessor=None, **kwargs):
    """A BERT task (`BertPretrainer`, `BertMaskedLM`, `BertClassifier`) on the folder's backbone,
    with the heads the checkpoint has and, unless one is given, the preprocessor of its vocabulary
    (`load_preprocessor`); a head the task needs and the checkpoint lacks is refused in one line (a
    classifier's output layer is new)."""
    return _task(task_class, read_checkpoint(folder), preprocessor, **kwargs)


def _task(task_class, checkpoint, preprocessor=None, **kwargs):
    import inspect

    own = inspect.signature(task_class.__init__).parameters
    task_arguments = {key: kwargs.pop(key) for key in list(kwargs) if key in own}
    backbone = _backbone(checkpoint, **kwargs)
    if preprocessor is None:
        preprocessor = load_preprocessor(checkpoint, backbone.get_config()["max_sequence_length"])
    task = task_class(backbone, preprocessor=preprocessor, **task_arguments)
    for head in HEADS:
        if hasattr(task, head):
            if head not in checkpoint.heads:
                raise UserError(
                    f"{checkpoint.folder}: no {HEADS[head]} in its checkpoint, which "
                    f"{task_class.__name__} needs"
                )
            # not the token table
            owned = [w for w in getattr(task, head).weights if w.path.startswith(f"{head}/")]
            huggingface.assign(owned, checkpoint.values, checkpoint.folder)
    return task


def pretrained_task(folder):
    """The folder's task with every head its checkpoint has: `BertPretrainer`
    (masked LM and next sentence) or `BertMaskedLM`; a checkpoint without a
    masked-LM head (a bare `BertModel`) is refused in one line."""
    from keras_attn.models.bert import BertMaskedLM, BertPretrainer

    checkpoint = read_checkpoint(folder)
    if "mlm_head" not in checkpoint.heads:
        raise UserError(
            f"{folder}: no masked-LM head in its weights; a bare encoder loads with "
            "BertBackbone.from_preset(folder)"
        )
    if checkpoint.vocabulary is None:
        raise UserError(f"{folder}: no {VOCABULARY}, which an export needs to read text")
    return _task(BertPretrainer if "nsp_head" in checkpoint.heads else BertMaskedLM, checkpoint)
