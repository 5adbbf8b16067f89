"""Hugging Face Marian folders (OPUS-MT translators) as our Transformer, with the reference's
outputs.

A folder `save_pretrained` wrote for a `MarianMTModel` (`config.json`, model_type
`marian`; safetensors weights; `source.spm`, `target.spm` and `vocab.json`)
becomes a `Seq2SeqLM` on a `TransformerBackbone` of the same architecture:
post-norm blocks, one embedding table for source, target and output (scaled by
√d), the sinusoids in Marian's layout (`position="sinusoidal_halves"`), its
feed-forward activation, and its `final_logits_bias` (`output_bias=True`).
Its tokenizers are `pipelines.marian_tokenizer.MarianTokenizer`s, so an
export translates with TensorFlow alone.

Our special tokens have fixed ids (`pipelines.special_tokens.SPECIAL_TOKENS`, 0-6);
Marian's vocabulary has `</s>` at 0 and `<pad>` last, and starts decoding from
`<pad>`. The vocabulary is put in our order: [PAD] and [BOS] are `<pad>`'s row,
[UNK] `<unk>`'s and [EOS] `</s>`'s; [CLS], [SEP] and [MASK], which translation
never uses, get zero rows and a logit bias no search picks (`NEVER`); the
other pieces follow in the folder's order. Outputs are the reference's, in
that order.

Everything is checked before the model is built: each setting, each size against
the shape of the tensor it makes, the layers against those the weights hold, the
vocabulary against the token table, and both SentencePiece models (loaded once).
"""

import dataclasses
import os

from keras_attn.checkpoints import files, huggingface
from keras_attn.checkpoints.tensors import TensorFiles
from keras_attn.errors import UserError
from keras_attn.models.seq2seq_lm import Seq2SeqLM
from keras_attn.models.transformer import TransformerBackbone
from pipelines.special_tokens import BOS_ID, EOS_ID, PAD_ID, SPECIAL_TOKENS, UNK_ID

VOCABULARY = "vocab.json"
SOURCE_MODEL, TARGET_MODEL = "source.spm", "target.spm"
NEVER = -1e9  # the logit bias of our special tokens that Marian lacks: never generated
# Marian's positions are sinusoids, computed rather than read: a bound on the table we make.
MAX_POSITIONS = 2**16

# Hugging Face's `activation_function` → ours (`layers.activations`).
ACTIVATION = {
    "swish": "silu",
    "silu": "silu",
    "gelu": "gelu",
    "relu": "relu",
    "gelu_new": "gelu_tanh",
}
# Tensors some checkpoints hold and we do not read: the sinusoids (computed), and copies of the
# shared table (tied to it).
KNOWN_EXTRAS = (
    r"model\.(encoder|decoder)\.embed_positions\.weight",
    r"model\.(encoder|decoder)\.embed_tokens\.weight",
    r"lm_head\.weight",
)
SHARED = "model.shared.weight"


def backbone_arguments(settings):
    """The checked sizes of a Marian `config.json` and the `TransformerBackbone` arguments they
    make; what we cannot build is refused in one line.

    The numbers of layers and the vocabulary sizes are not among the arguments: the layers are
    counted in the weights, the vocabulary is put in our order (`read_checkpoint`).

    Args:
        settings: Settings. The folder's `config.json` (`files.Settings`).

    Returns:
        A tuple `(sizes, arguments)`: `{name: value}` of `vocab_size`, `d_model`,
            `encoder_attention_heads`, `encoder_ffn_dim`, `pad_token_id`, `eos_token_id` and
            `decoder_start_token_id`, and the `TransformerBackbone` arguments (`preset=None`).

    Raises:
        UserError: when a setting is missing or wrong: `activation_function` not one of
            `ACTIVATION`, a size not a whole number from 1 to 2**31 - 1, a decoder's number of
            heads, feed-forward width or vocabulary size other than the encoder's, `d_model`
            not a multiple of `encoder_attention_heads`, embeddings not shared, tied and scaled,
            a token id outside the vocabulary, `decoder_start_token_id` other than
            `pad_token_id`, `max_position_embeddings` above `MAX_POSITIONS` or `dropout` not in
            [0, 1).
    """
    activation = ACTIVATION[settings.choice("activation_function", ACTIVATION)]
    sizes = {
        name: settings.whole(name)
        for name in ("vocab_size", "d_model", "encoder_attention_heads", "encoder_ffn_dim")
    }
    vocabulary_size = sizes["vocab_size"]
    for name in ("attention_heads", "ffn_dim"):
        settings.equal(
            f"decoder_{name}",
            sizes[f"encoder_{name}"],
            f"read only when equal to encoder_{name} {sizes[f'encoder_{name}']}",
        )
    settings.equal(
        "decoder_vocab_size",
        vocabulary_size,
        "a separate target vocabulary is not read, only Marian's shared one",
        default=vocabulary_size,
    )
    if sizes["d_model"] % sizes["encoder_attention_heads"]:
        raise UserError(
            f"{settings.origin}: d_model {sizes['d_model']} does not split into "
            f"encoder_attention_heads {sizes['encoder_attention_heads']} heads"
        )
    for name in ("share_encoder_decoder_embeddings", "tie_word_embeddings", "scale_embedding"):
        settings.equal(
            name, True, "only Marian's one table, scaled by √d_model, is read", default=True
        )
    ids = {
        name: settings.whole(name, low=0, high=vocabulary_size - 1)
        for name in ("pad_token_id", "eos_token_id", "decoder_start_token_id")
    }
    if ids["decoder_start_token_id"] != ids["pad_token_id"]:
        raise UserError(
            f"{settings.origin}: decoder_start_token_id {ids['decoder_start_token_id']} is not "
            f"the pad_token_id {ids['pad_token_id']} (Marian's)"
        )
    arguments = dict(
        max_sequence_length=settings.whole("max_position_embeddings", high=MAX_POSITIONS),
        preset=None,
        hidden_dim=sizes["d_model"],
        num_heads=sizes["encoder_attention_heads"],
        intermediate_dim=sizes["encoder_ffn_dim"],
        dropout=settings.number("dropout", at_least=0, below=1, default=0.1),
        norm_first=False,
        share_embeddings=True,
        tie_output=True,
        activation=activation,
        position="sinusoidal_halves",
        output_bias=True,
    )
    return {**sizes, **ids}, arguments


def plan_of(sizes, layers, table):
    """The `huggingface.Plan` of a `TransformerBackbone` of `sizes` and `layers`, its one table
    read from the tensor `table`.

    The `final_logits_bias` is the output bias, `NEVER` for our special tokens Marian lacks.

    Args:
        sizes: dict. The checked sizes of `backbone_arguments`.
        layers: dict. `{"encoder": count, "decoder": count}`: the number of layers of each.
        table: str. The name of the tensor of the one token table (`SHARED`, or the encoder's
            copy).

    Returns:
        A `huggingface.Plan`, its `order` not yet set.
    """
    plan = huggingface.Plan(sizes)
    width, heads, inner = "d_model", "encoder_attention_heads", "encoder_ffn_dim"
    plan.table(table, "source_embedding/token_embedding/embeddings", ("vocab_size", width))
    plan.expected["final_logits_bias"] = (1, "vocab_size")
    plan.values["output_bias/bias"] = lambda tensors: plan.in_our_order(
        tensors.read("final_logits_bias").reshape(-1), NEVER
    )
    parts = {"query": "q_proj", "key": "k_proj", "value": "v_proj", "output": "out_proj"}
    for stack, count in layers.items():
        for layer in range(count):
            theirs, ours = f"model.{stack}.layers.{layer}", f"{stack}_block_{layer}"
            attentions = {"self_attn": "self_attention"}
            if stack == "decoder":
                attentions["encoder_attn"] = "cross_attention"
            for their_attention, our_attention in attentions.items():
                names = {part: f"{theirs}.{their_attention}.{n}" for part, n in parts.items()}
                plan.attention(names, f"{ours}/{our_attention}", width, heads)
                plan.layer_norm(
                    f"{theirs}.{their_attention}_layer_norm",
                    f"{ours}/{our_attention}_norm/layer_norm",
                    width,
                )
            plan.dense(f"{theirs}.fc1", f"{ours}/feed_forward/inner", width, inner)
            plan.dense(f"{theirs}.fc2", f"{ours}/feed_forward/outer", inner, width)
            plan.layer_norm(
                f"{theirs}.final_layer_norm", f"{ours}/feed_forward_norm/layer_norm", width
            )
    return plan


def read_vocabulary(folder, sizes):
    """The folder's `vocab.json` in our order, and for each of our ids the checkpoint's.

    [PAD] and [BOS] are `<pad>`'s id (`pad_token_id`, `decoder_start_token_id`), [UNK] `<unk>`'s
    and [EOS] `eos_token_id`; [CLS], [SEP] and [MASK] have none.

    Args:
        folder: str. The Marian folder.
        sizes: dict. The checked sizes and ids of `backbone_arguments`.

    Returns:
        A tuple `(vocabulary, order)`: the list of tokens in our order (`SPECIAL_TOKENS`, then
            the folder's other pieces), and the list of the checkpoint's id of each of ours
            (None for a token it lacks).

    Raises:
        UserError: when `vocab.json` cannot be read as a `{token: id}` object of `vocab_size`
            tokens, ids 0 to `vocab_size` - 1 each once (`files.read_token_ids`), or has no
            `<unk>`.
    """
    path = os.path.join(folder, VOCABULARY)
    by_id = files.read_token_ids(path, sizes["vocab_size"])
    if "<unk>" not in by_id:
        raise UserError(f"{path}: no <unk>")
    ours = {
        PAD_ID: sizes["pad_token_id"],
        UNK_ID: by_id.index("<unk>"),
        BOS_ID: sizes["decoder_start_token_id"],
        EOS_ID: sizes["eos_token_id"],
    }
    order = [ours.get(i) for i in range(len(SPECIAL_TOKENS))]
    taken = set(ours.values())
    order += [i for i in range(len(by_id)) if i not in taken]
    return list(SPECIAL_TOKENS) + [by_id[i] for i in order[len(SPECIAL_TOKENS) :]], order


def read_sentencepiece_models(folder):
    """The folder's two SentencePiece models, each loaded once to check it (TensorFlow's kernel
    would fail on a broken one only when it first tokenizes).

    Args:
        folder: str. The Marian folder.

    Returns:
        A dict `{file name: bytes}` of `source.spm` and `target.spm`.

    Raises:
        UserError: when a model is missing, larger than `files.MAX_VOCABULARY_BYTES`,
            unreadable, does not parse, or has no pieces.
    """
    import sentencepiece

    from keras_attn.quiet import stderr_held

    models = {}
    for name in (SOURCE_MODEL, TARGET_MODEL):
        path = os.path.join(folder, name)
        if not os.path.isfile(path):
            raise UserError(f"{path}: no such file; a Marian folder has its SentencePiece models")
        models[name] = files.read_bytes(path, files.MAX_VOCABULARY_BYTES)
        pieces = None
        with stderr_held():  # the library's own lines on a model it reads or refuses: ours say it
            try:
                pieces = sentencepiece.SentencePieceProcessor(model_proto=models[name]).vocab_size()
            except (RuntimeError, OSError, TypeError):
                pass
        if pieces is None:
            raise UserError(f"{path}: not a SentencePiece model (it does not parse)")
        if pieces < 1:
            raise UserError(f"{path}: a SentencePiece model without pieces")
    return models


@dataclasses.dataclass
class Checkpoint:
    """A Hugging Face Marian folder, checked: the `TransformerBackbone` arguments of its
    architecture, the `Plan` of its weights, their files, its vocabulary in our order and its
    SentencePiece models.

    Each argument is also an attribute of the same name.

    Args:
        folder: str. The Marian folder.
        arguments: dict. The `TransformerBackbone` arguments of its architecture.
        plan: huggingface.Plan. How each weight is made from its tensors.
        tensors: TensorFiles. Its safetensors weights.
        vocabulary: list of str. Its tokens in our order.
        models: dict. `{file name: bytes}` of its SentencePiece models, `source.spm` and
            `target.spm`.
    """

    folder: str
    arguments: dict
    plan: huggingface.Plan
    tensors: TensorFiles
    vocabulary: list
    models: dict


def read_checkpoint(folder):
    """The `Checkpoint` of `folder`, every file checked, no tensor read yet.

    Tensors the model does not use are not read; those `KNOWN_EXTRAS` does not list are named in a
    warning.

    Args:
        folder: str. The Hugging Face Marian folder (`config.json`, safetensors weights,
            `vocab.json`, `source.spm` and `target.spm`).

    Returns:
        A `Checkpoint`.

    Raises:
        UserError: when a file is missing or unreadable, a setting is wrong
            (`backbone_arguments`), the weights hold other layers than `encoder_layers` and
            `decoder_layers` or tensors of another dtype or shape than the settings make, the
            vocabulary does not fit the token table (`read_vocabulary`), or a SentencePiece
            model does not load (`read_sentencepiece_models`).
    """
    settings = huggingface.read_config(folder, "marian")
    sizes, arguments = backbone_arguments(settings)
    tensors = TensorFiles(folder)
    layers = {
        stack: tensors.layer_count(
            rf"model\.{stack}\.layers\.(\d+)\.", f"{stack}_layers", settings, f"{stack} layer"
        )
        for stack in ("encoder", "decoder")
    }
    arguments.update(num_layers=layers["encoder"], num_decoder_layers=layers["decoder"])
    table = SHARED if SHARED in tensors else "model.encoder.embed_tokens.weight"
    plan = plan_of(sizes, layers, table)
    tensors.check(plan.expected, sizes, settings.origin)
    huggingface.warn_unread(folder, tensors.unexpected(plan.expected, KNOWN_EXTRAS), "Marian model")
    vocabulary, plan.order = read_vocabulary(folder, sizes)
    # ours: the special tokens Marian lacks added, `<pad>` once for [PAD] and [BOS]
    arguments.update(source_vocabulary_size=len(vocabulary), target_vocabulary_size=len(vocabulary))
    models = read_sentencepiece_models(folder)
    return Checkpoint(folder, arguments, plan, tensors, vocabulary, models)


def build_backbone(checkpoint, **kwargs):
    """A `TransformerBackbone` of the checkpoint, with its weights.

    Args:
        checkpoint: Checkpoint. The checked checkpoint.
        **kwargs: Only `dropout`, `dtype`, `name`, `trainable` of the backbone
            (`huggingface.OWN_CHOICES`); they win over the checkpoint's.

    Returns:
        A `TransformerBackbone`.

    Raises:
        UserError: when `kwargs` holds another argument, or a tensor read holds NaN or infinite
            values.
    """
    huggingface.check_own_choices(kwargs, checkpoint.folder)
    backbone = TransformerBackbone(**{**checkpoint.arguments, **kwargs})
    huggingface.assign(backbone.weights, checkpoint.plan, checkpoint.tensors, checkpoint.folder)
    return backbone


def load_preprocessor(checkpoint, max_length):
    """The `TranslationPreprocessor` of the folder's SentencePiece models and vocabulary (sources
    end with [EOS]).

    Args:
        checkpoint: Checkpoint. The checked checkpoint.
        max_length: int. The preprocessor's `max_length`.

    Returns:
        A `pipelines.preprocessors.TranslationPreprocessor` whose source and target tokenizers
            are `pipelines.marian_tokenizer.MarianTokenizer`s.
    """
    from pipelines.marian_tokenizer import MarianTokenizer
    from pipelines.preprocessors import TranslationPreprocessor

    return TranslationPreprocessor(
        MarianTokenizer(checkpoint.models[SOURCE_MODEL], checkpoint.vocabulary),
        MarianTokenizer(checkpoint.models[TARGET_MODEL], checkpoint.vocabulary),
        max_length=max_length,
        source_eos=True,
    )


def build_task(checkpoint, preprocessor=None, **kwargs):
    """A `Seq2SeqLM` on the checkpoint's backbone, with its preprocessor.

    Args:
        checkpoint: Checkpoint. The checked checkpoint.
        preprocessor: TranslationPreprocessor. The task's preprocessor. Defaults to None: the
            preprocessor of the checkpoint's tokenizers (`load_preprocessor`).
        **kwargs: The backbone's arguments (`build_backbone`).

    Returns:
        A `Seq2SeqLM`.

    Raises:
        UserError: as `build_backbone`.
    """
    backbone = build_backbone(checkpoint, **kwargs)
    if preprocessor is None:
        preprocessor = load_preprocessor(checkpoint, backbone.get_config()["max_sequence_length"])
    return Seq2SeqLM(backbone, preprocessor=preprocessor)
