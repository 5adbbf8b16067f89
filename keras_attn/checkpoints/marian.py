"""Hugging Face Marian folders (OPUS-MT translators) as our
Transformer, with the reference's outputs.

A folder `save_pretrained` wrote for a `MarianMTModel` (`config.json`, model_type
`marian`; safetensors weights; `source.spm`, `target.spm` and `vocab.json`)
becomes a `Seq2SeqLM` on a `TransformerBackbone` of the same architecture:
post-norm blocks, one embedding table for source, target and output (scaled by
√d), the sinusoids in Marian's layout (`position="sinusoidal_halves"`), its
feed-forward activation, and its `final_logits_bias` (`output_bias=True`).
Its tokenizers are `pipelines.marian_tokenizer.MarianTokenizer`s, so an
export translates with TensorFlow alone.

Our special tokens have fixed ids (`special_tokens.SPECIAL_TOKENS`, 0-6);
Marian's vocabulary has `</s>` at 0 and `<pad>` last, and starts decoding from
`<pad>`. The vocabulary is put in our order: [PAD] and [BOS] are `<pad>`'s row,
[UNK] `<unk>`'s and [EOS] `</s>`'s; [CLS], [SEP] and [MASK], which translation
never uses, get zero rows and a logit bias no search picks (`NEVER`); the
other pieces follow in the folder's order. Outputs are the reference's, in
that order.
"""

import dataclasses
import os

import numpy as np

from keras_attn.checkpoints import huggingface
from keras_attn.errors import UserError
from keras_attn.special_tokens import BOS_ID, EOS_ID, PAD_ID, SPECIAL_TOKENS, UNK_ID

VOCABULARY = "vocab.json"
SOURCE_MODEL, TARGET_MODEL = "source.spm", "target.spm"
NEVER = -1e9  # the logit bias of our special tokens that Marian lacks: never generated

# Hugging Face's `activation_function` → ours (`layers.activations`).
ACTIVATION = {
    "swish": "silu",
    "silu": "silu",
    "gelu": "gelu",
    "relu": "relu",
    "gelu_new": "gelu_tanh",
}


def backbone_arguments(config, vocabulary_size, origin):
    """`TransformerBackbone` arguments of a Hugging Face Marian `config.json`, for a vocabulary of
    `vocabulary_size` in our order; what we cannot build is refused in one line."""
    if config.get("activation_function") not in ACTIVATION:
        raise UserError(
            f"{origin}: activation_function {config.get('activation_function')!r} is not one of "
            f"{', '.join(ACTIVATION)}"
        )
    different = [
        f"{name} {config.get('encoder_' + name)} and {config.get('decoder_' + name)}"
        for name in ("attention_heads", "ffn_dim")
        if config.get("encoder_" + name) != config.get("decoder_" + name)
    ]
    if different:
        raise UserError(
            f"{origin}: encoder and decoder differ in {'; '.join(different)} (read only when equal)"
        )
    if not config.get("share_encoder_decoder_embeddings", True) or not config.get(
        "tie_word_embeddings", True
    ):
        raise UserError(
            f"{origin}: separate source and target embeddings (share_encoder_decoder_embeddings or "
            "tie_word_embeddings false) are not read, only Marian's shared table"
        )
    if not config.get("scale_embedding", False):
        raise UserError(
            f"{origin}: scale_embedding false; only Marian's embeddings scaled by √d_model are read"
        )
    if config.get("decoder_start_token_id") != config.get("pad_token_id"):
        raise UserError(
            f"{origin}: decoder_start_token_id {config.get('decoder_start_token_id')} is not the "
            f"pad_token_id {config.get('pad_token_id')} (Marian's)"
        )
    return dict(
        source_vocabulary_size=vocabulary_size,
        target_vocabulary_size=vocabulary_size,
        max_sequence_length=config["max_position_embeddings"],
        preset=None,
        num_layers=config["encoder_layers"],
        num_decoder_layers=config["decoder_layers"],
        hidden_dim=config["d_model"],
        num_heads=config["encoder_attention_heads"],
        intermediate_dim=config["encoder_ffn_dim"],
        dropout=config.get("dropout", 0.1),
        norm_first=False,
        share_embeddings=True,
        tie_output=True,
        activation=ACTIVATION[config["activation_function"]],
        position="sinusoidal_halves",
        output_bias=True,
    )


def read_vocabulary(folder, config):
    """`(vocabulary, order)`: the tokens in our order (`SPECIAL_TOKENS`, then the folder's other
    pieces), and for each of our ids the checkpoint's (None for a token it lacks)."""
    path = os.path.join(folder, VOCABULARY)
    theirs = huggingface.read_json(path)
    if len(theirs) != config["vocab_size"] or sorted(theirs.values()) != list(range(len(theirs))):
        raise UserError(
            f"{path}: {len(theirs)} pieces, not the vocab_size {config['vocab_size']} of its "
            "config with ids 0 to vocab_size - 1"
        )
    if "<unk>" not in theirs:
        raise UserError(f"{path}: no <unk>")
    ours = {
        PAD_ID: config["pad_token_id"],
        UNK_ID: theirs["<unk>"],
        BOS_ID: config["decoder_start_token_id"],
        EOS_ID: config["eos_token_id"],
    }
    order = [ours.get(i) for i in range(len(SPECIAL_TOKENS))]
    taken = set(ours.values())
    by_id = sorted(theirs, key=theirs.get)
    order += [i for i in range(len(by_id)) if i not in taken]
    return list(SPECIAL_TOKENS) + [by_id[i] for i in order[len(SPECIAL_TOKENS) :]], order


def _in_our_order(rows, order):
    """`rows` (the checkpoint's, by its ids) by our ids; zeros for tokens it lacks."""
    return np.stack([rows[i] if i is not None else np.zeros_like(rows[0]) for i in order])


def backbone_values(weights, config, order):
    """`{our weight path: value}` of the `TransformerBackbone` of `backbone_arguments(config)`."""
    heads = config["encoder_attention_heads"]
    table = (
        weights["model.shared.weight"]
        if "model.shared.weight" in weights
        else weights["model.encoder.embed_tokens.weight"]
    )
    bias = weights["final_logits_bias"].reshape(-1)
    values = {
        "source_embedding/token_embedding/embeddings": _in_our_order(table, order),
        "output_bias/bias": np.array(
            [bias[i] if i is not None else NEVER for i in order], np.float32
        ),
    }
    for stack, count in (
        ("encoder", config["encoder_layers"]),
        ("decoder", config["decoder_layers"]),
    ):
        for layer in range(count):
            source, block = f"model.{stack}.layers.{layer}", f"{stack}_block_{layer}"
            attentions = {"self_attn": "self_attention"}
            if stack == "decoder":
                attentions["encoder_attn"] = "cross_attention"
            for theirs, ours in attentions.items():
                names = {
                    "query": "q_proj",
                    "key": "k_proj",
                    "value": "v_proj",
                    "output": "out_proj",
                }
                values.update(
                    huggingface.attention(
                        weights,
                        {part: f"{source}.{theirs}.{name}" for part, name in names.items()},
                        f"{block}/{ours}",
                        heads,
                    )
                )
                values.update(
                    huggingface.layer_norm(
                        weights, f"{source}.{theirs}_layer_norm", f"{block}/{ours}_norm/layer_norm"
                    )
                )
            values.update(
                huggingface.dense(weights, f"{source}.fc1", f"{block}/feed_forward/inner")
            )
            values.update(
                huggingface.dense(weights, f"{source}.fc2", f"{block}/feed_forward/outer")
            )
            values.update(
                huggingface.layer_norm(
                    weights, f"{source}.final_layer_norm", f"{block}/feed_forward_norm/layer_norm"
                )
            )
    return values


@dataclasses.dataclass
class Checkpoint:
    """A Hugging Face Marian folder, read once: its `config.json`,
    weights and vocabulary in our order.
    """

    folder: str
    config: dict
    weights: huggingface.Weights
    vocabulary: list
    order: list


def read_checkpoint(folder):
    """The `Checkpoint` of `folder`, each file read once."""
    config = huggingface.read_config(folder, "marian")
    weights = huggingface.Weights(huggingface.read_weights(folder), folder)
    return Checkpoint(folder, config, weights, *read_vocabulary(folder, config))


def load_backbone(folder, **kwargs):
    """A `TransformerBackbone` with the weights of the Hugging Face
    Marian folder `folder` (`kwargs` win over its
    config: `dropout`, `dtype`, `name`)."""
    return _backbone(read_checkpoint(folder), **kwargs)


def _backbone(checkpoint, **kwargs):
    from keras_attn.models.transformer import TransformerBackbone

    arguments = backbone_arguments(
        checkpoint.config,
        len(checkpoint.vocabulary),
        os.path.join(checkpoint.folder, huggingface.CONFIG),
    )
    backbone = TransformerBackbone(**{**arguments, **kwargs})
    huggingface.assign(
        backbone.weights,
        backbone_values(checkpoint.weights, checkpoint.config, checkpoint.order),
        checkpoint.folder,
    )
    return backbone


def load_preprocessor(checkpoint, max_length):
    """The `TranslationPreprocessor` of the folder's SentencePiece
    models and vocabulary (sources end with [EOS]).
    """
    from pipelines.marian_tokenizer import MarianTokenizer
    from pipelines.preprocessors import TranslationPreprocessor

    models = {}
    for name in (SOURCE_MODEL, TARGET_MODEL):
        path = os.path.join(checkpoint.folder, name)
        try:
            with open(path, "rb") as file:
                models[name] = file.read()
        except OSError as error:
            raise UserError(
                f"{path}: not readable ({error.strerror}); a Marian folder has its SentencePiece "
                "models"
            ) from None
    return TranslationPreprocessor(
        MarianTokenizer(models[SOURCE_MODEL], checkpoint.vocabulary),
        MarianTokenizer(models[TARGET_MODEL], checkpoint.vocabulary),
        max_length=max_length,
        source_eos=True,
    )


def load_task(folder, preprocessor=None, **kwargs):
    """A `Seq2SeqLM` on the folder's backbone, with, unless one is given, the preprocessor of its
    tokenizers (`load_preprocessor`)."""
    from keras_attn.models.seq2seq_lm import Seq2SeqLM

    checkpoint = read_checkpoint(folder)
    backbone = _backbone(checkpoint, **kwargs)
    if preprocessor is None:
        preprocessor = load_preprocessor(checkpoint, backbone.get_config()["max_sequence_length"])
    return Seq2SeqLM(backbone, preprocessor=preprocessor)
