"""A `TransformerBackbone` as a CTranslate2 model folder: the same logits, decoded by CTranslate2.

CTranslate2 (`pip install ctranslate2`) runs the converted model on CPU or
GPU, float32 or quantized. Its computation matches the backbone's:

- embeddings: the token tables (one, aliased, with `share_embeddings`),
  times √d where ours are (`scale_embeddings`);
- positions: our table written out (`position_encodings`), sinusoidal or
  learned: CTranslate2's own sinusoid is another one (sin and cos halves
  concatenated, a `depth / 2 - 1` denominator, positions counted from 1);
- attention: kernels transposed to `(out, in)`; self-attention's Q, K, V
  fused into one `(3d, d)` projection, cross-attention's K, V into one
  `(2d, d)`; CTranslate2 splits heads as we do (`(B, T, h, d/h)`);
- Add & Norm: post-norm or pre-norm (`pre_norm`, the final norms of the
  pre-norm stacks); our LayerNorm epsilon in `config.json`;
- output: the target table itself when tied (aliased), else the output
  Dense's kernel and bias;
- tokens: our vocabularies in id order, CTranslate2's special tokens
  named as ours (`unk_token` [UNK], `bos_token` and `decoder_start_token`
  [BOS], `eos_token` [EOS]); sources get no added [BOS]/[EOS], as ours.

Translate with `SEARCH_OPTIONS` to search as `Seq2SeqLM.generate` does,
sources cut and outputs capped at the backbone's `max_sequence_length` `L`
(CTranslate2 refuses a position the table lacks):

    translator = ctranslate2.Translator(folder, device="cpu")
    translator.translate_batch(source_tokens, beam_size=1, max_input_length=L,
                               max_decoding_length=n, **SEARCH_OPTIONS)

Greedy search then gives our tokens, those of the float32 model: the
weights and the position table are written at float32 even from a
mixed_bfloat16 model, whose own search, in bfloat16, can take other turns
where two tokens are nearly tied. Beam search differs in three ways
CTranslate2 cannot be told: its length penalty is `length^α`, not GNMT's
`((5 + length) / 6)^α` (α = 0 on both sides ranks alike); it renormalizes
the probabilities after removing [PAD] and [BOS], where
`keras_attn.decoding` does not; at the step budget it ranks the hypotheses
cut off with those that emitted [EOS], where we rank the latter first.
"""

import json
import os
import secrets
import shutil

import ctranslate2
import keras
import numpy as np
from ctranslate2.converters import utils
from ctranslate2.specs import common_spec, transformer_spec

from keras_attn.errors import UserError
from keras_attn.models.transformer import TransformerBackbone
from keras_attn.serving.versions import CTRANSLATE2_MODEL, is_ctranslate2_folder
from pipelines.special_tokens import BOS_ID, EOS_ID, PAD_ID, SPECIAL_TOKENS, UNK_ID

# `translate_batch` options that search as `keras_attn.decoding` does: [PAD] and [BOS] never
# emitted, [EOS] allowed from the first step, outputs without [EOS].
SEARCH_OPTIONS = dict(
    suppress_sequences=[[SPECIAL_TOKENS[PAD_ID]], [SPECIAL_TOKENS[BOS_ID]]],
    min_decoding_length=0,
    return_end_token=False,
)

PREPROCESSOR = "keras_attn_preprocessor.json"  # in the folder: how to tokenize for it

# Our feed-forward activations (`layers.activations.ACTIVATIONS`) as CTranslate2's.
_ACTIVATIONS = {
    "relu": common_spec.Activation.RELU,
    "silu": common_spec.Activation.SWISH,
    "gelu": common_spec.Activation.GELU,
    "gelu_tanh": common_spec.Activation.GELUTanh,
}


def ctranslate2_spec(backbone, source_tokens, target_tokens):
    """The CTranslate2 `TransformerSpec` of `backbone`, its weights and vocabularies set.

    Args:
        backbone: `keras_attn.models.TransformerBackbone`. The built backbone.
        source_tokens: list of str. The source vocabulary, a token per id (a tokenizer's
            `vocabulary`), starting with the special tokens.
        target_tokens: list of str. The target's (the same list with a shared vocabulary).

    Returns:
        A `ctranslate2.specs.TransformerSpec`, not yet validated or saved
        (`export_ctranslate2` does both).

    Raises:
        UserError: when `backbone` is not a `TransformerBackbone`, holds what CTranslate2
            cannot represent (LayerNorms of different epsilons), or the vocabularies do not
            fit it (another size, duplicate tokens, not starting with the special tokens); in
            one line.

    Example:

    >>> backbone = TransformerBackbone(
    ...     12, 12, preset="tiny", hidden_dim=16, intermediate_dim=32, max_sequence_length=8
    ... )
    >>> tokens = [*SPECIAL_TOKENS, "a", "b", "c", "d", "e"]
    >>> spec = ctranslate2_spec(backbone, tokens, tokens)
    >>> spec.config.decoder_start_token, len(spec.decoder.layer)
    ('[BOS]', 2)
    """
    if not isinstance(backbone, TransformerBackbone):
        raise UserError(
            "CTranslate2 export: only a TransformerBackbone converts, got "
            f"{type(backbone).__name__}"
        )
    _check_vocabulary("source", source_tokens, backbone.source_embedding)
    _check_vocabulary("target", target_tokens, backbone.target_embedding)
    encoder_blocks, decoder_blocks = backbone.encoder_blocks, backbone.decoder_blocks
    activation = _ACTIVATIONS[backbone.get_config()["activation"]]
    norm_first = encoder_blocks[0].norm_first
    encoder = transformer_spec.TransformerEncoderSpec(
        len(encoder_blocks),
        encoder_blocks[0].num_heads,
        pre_norm=norm_first,
        no_final_norm=backbone.encoder_norm is None,
        activation=activation,
    )
    decoder = transformer_spec.TransformerDecoderSpec(
        len(decoder_blocks),
        decoder_blocks[0].num_heads,
        pre_norm=norm_first,
        no_final_norm=backbone.decoder_norm is None,
        activation=activation,
    )
    _set_embedding(encoder, encoder.embeddings[0], backbone.source_embedding)
    _set_embedding(decoder, decoder.embeddings, backbone.target_embedding)
    for layer, block in zip(encoder.layer, encoder_blocks):
        _set_attention(
            layer.self_attention,
            block.self_attention,
            block.self_attention_norm,
            self_attention=True,
        )
        _set_feed_forward(layer.ffn, block)
    for layer, block in zip(decoder.layer, decoder_blocks):
        _set_attention(
            layer.self_attention,
            block.self_attention,
            block.self_attention_norm,
            self_attention=True,
        )
        _set_attention(
            layer.attention, block.cross_attention, block.cross_attention_norm, self_attention=False
        )
        _set_feed_forward(layer.ffn, block)
    if backbone.encoder_norm is not None:
        _set_layer_norm(encoder.layer_norm, backbone.encoder_norm)
        _set_layer_norm(decoder.layer_norm, backbone.decoder_norm)
    if backbone.output_projection is None:
        decoder.projection.weight = decoder.embeddings.weight
    else:
        _set_dense(
            decoder.projection, backbone.output_projection.kernel, backbone.output_projection.bias
        )
    if backbone.output_bias is not None:  # on the logits: the projection's bias, or added to it
        bias = _numpy(backbone.output_bias.bias)
        decoder.projection.bias = (
            bias if backbone.output_projection is None else decoder.projection.bias + bias
        )

    spec = transformer_spec.TransformerSpec(encoder, decoder)
    config = spec.config
    config.unk_token, config.bos_token, config.eos_token = (
        SPECIAL_TOKENS[i] for i in (UNK_ID, BOS_ID, EOS_ID)
    )
    config.decoder_start_token = SPECIAL_TOKENS[BOS_ID]  # `target_in` starts with it
    config.layer_norm_epsilon = _epsilon(backbone)
    spec.register_source_vocabulary(list(source_tokens))
    spec.register_target_vocabulary(list(target_tokens))
    return spec


def export_ctranslate2(
    backbone,
    source_tokens,
    target_tokens,
    output_dir,
    quantization=None,
    force=False,
    preprocessor=None,
):
    """Writes `backbone` as a CTranslate2 model folder, atomically.

    The folder holds `model.bin`, `config.json` and the vocabularies
    (`shared_vocabulary.json`, or `source_vocabulary.json` and
    `target_vocabulary.json`); load it with `ctranslate2.Translator`, or,
    with a `preprocessor` kept, with `load_ctranslate2` (strings in, strings out).

    Args:
        backbone: `keras_attn.models.TransformerBackbone`. The built backbone.
        source_tokens: list of str. The source vocabulary, a token per id.
        target_tokens: list of str. The target vocabulary, a token per id.
        output_dir: str. The folder to write.
        quantization: str or `None`. One of `keras_attn.config.CT2_QUANTIZATIONS`
            (`"int8"`, `"int8_float32"`, `"int8_bfloat16"`, `"int16"`, `"float16"`,
            `"bfloat16"`, `"float32"`), or `None` for the weights' float32. Defaults to `None`.
        force: bool. Whether to replace an existing `output_dir` (a CTranslate2 model folder
            only). Defaults to `False`.
        preprocessor: `TranslationPreprocessor` or `None`. The preprocessor to tokenize with,
            kept as its Keras config in `PREPROCESSOR`. Defaults to `None` (not kept).

    Returns:
        A str: `output_dir`.

    Raises:
        UserError: as `ctranslate2_spec`; as `check_output_folder`.
    """
    check_output_folder(output_dir, force)
    spec = ctranslate2_spec(backbone, source_tokens, target_tokens)
    stem = f"{os.path.normpath(os.path.abspath(output_dir))}.{secrets.token_hex(4)}"
    temporary, replaced = f"{stem}.tmp", f"{stem}.replaced"
    try:
        _SpecConverter(spec).convert(temporary, quantization=quantization)
        if preprocessor is not None:
            with open(os.path.join(temporary, PREPROCESSOR), "w", encoding="utf-8") as file:
                json.dump(keras.saving.serialize_keras_object(preprocessor), file)
        if os.path.exists(output_dir):  # set aside until the new folder is in its place
            os.rename(output_dir, replaced)
        try:
            os.rename(temporary, output_dir)
        except OSError:
            if os.path.exists(replaced):
                os.rename(replaced, output_dir)
            raise
        shutil.rmtree(replaced, ignore_errors=True)
    finally:
        shutil.rmtree(temporary, ignore_errors=True)
    return output_dir


def check_output_folder(output_dir, force, force_flag="force=True"):
    """Refuses in one line an `output_dir` that `export_ctranslate2` must not write or replace.

    Only a CTranslate2 model folder is replaced (with `force`): never a
    folder of anything else, nor one that holds the current folder.

    Args:
        output_dir: str. The folder to write.
        force: bool. Whether an existing CTranslate2 model folder may be replaced.
        force_flag: str. How the refusal names `force` to the caller (e.g. `"--force"`).
            Defaults to `"force=True"`.

    Raises:
        UserError: when `output_dir` is empty, or exists and `force` is not given, or is not
            a CTranslate2 model folder, or holds the current folder.
    """
    if not output_dir:
        raise UserError(
            "an empty output folder's name: give the folder to write (such as ct2/<name>)"
        )
    if not os.path.exists(output_dir):
        return
    if not force:
        raise UserError(f"{output_dir} already exists ({force_flag} replaces it)")
    if not is_ctranslate2_folder(output_dir):
        raise UserError(
            f"{output_dir}: not a CTranslate2 model folder (no {CTRANSLATE2_MODEL}), which is all "
            f"{force_flag} replaces"
        )
    here, out = os.path.realpath(os.getcwd()), os.path.realpath(output_dir)
    if os.path.commonpath([here, out]) == out:
        raise UserError(f"{output_dir}: holds the current folder, so it cannot be replaced")


class _SpecConverter(ctranslate2.converters.Converter):
    """CTranslate2's converter (validate, optimize, quantize, save) of a spec already filled."""

    def __init__(self, spec):
        self._spec = spec

    def _load(self):
        return self._spec


def _check_vocabulary(side, tokens, embedding):
    size = embedding.vocabulary_size
    if len(tokens) != size:
        raise UserError(
            f"CTranslate2 export: the {side} vocabulary has {len(tokens)} tokens, the model {size}"
        )
    if len(set(tokens)) != len(tokens):
        raise UserError(f"CTranslate2 export: the {side} vocabulary has duplicate tokens")
    if tuple(tokens[: len(SPECIAL_TOKENS)]) != SPECIAL_TOKENS:
        raise UserError(
            f"CTranslate2 export: the {side} vocabulary must start with {' '.join(SPECIAL_TOKENS)}"
        )


def _epsilon(backbone):
    blocks = backbone.encoder_blocks + backbone.decoder_blocks
    add_and_norms = [
        getattr(block, name, None)
        for block in blocks
        for name in ("self_attention_norm", "cross_attention_norm", "feed_forward_norm")
    ]
    norms = [add_and_norm.layer_norm for add_and_norm in add_and_norms if add_and_norm is not None]
    norms += [norm for norm in (backbone.encoder_norm, backbone.decoder_norm) if norm is not None]
    epsilons = {float(norm.epsilon) for norm in norms}
    if len(epsilons) != 1:
        raise UserError(
            f"CTranslate2 export: one LayerNorm epsilon for the whole model, got {sorted(epsilons)}"
        )
    return epsilons.pop()


def _numpy(weight):
    return np.asarray(keras.ops.convert_to_numpy(weight), np.float32)


def _set_embedding(stack, spec, embedding):
    spec.weight = _numpy(embedding.token_embedding.embeddings)
    stack.scale_embeddings = bool(embedding.scale_by_sqrt_dim)
    stack.position_encodings.encodings = _position_table(embedding)


def _position_table(embedding):
    """The `(max_sequence_length, d)` positions at float32, as CTranslate2 adds them.

    Computed by a float32 twin of the position layer: a layer of a
    mixed_bfloat16 model hands out its table rounded to bfloat16.
    """
    layer = embedding.position_embedding
    twin = type(layer).from_config({**layer.get_config(), "dtype": "float32"})
    positions = np.zeros((1, embedding.max_sequence_length, embedding.hidden_dim), np.float32)
    twin.build(positions.shape)
    twin.set_weights(layer.get_weights())
    return _numpy(twin(positions)[0])


def _set_dense(spec, kernel, bias, input_axes=1):
    """A Keras kernel `(in..., out...)` as CTranslate2's `(out, in)`
    weight, flattened over `input_axes`.
    """
    kernel = _numpy(kernel)
    spec.weight = kernel.reshape(int(np.prod(kernel.shape[:input_axes])), -1).T.copy()
    if bias is not None:
        spec.bias = _numpy(bias).reshape(-1)


def _set_attention(spec, attention, add_and_norm, self_attention):
    """CTranslate2 fuses self-attention's Q, K, V projections into one, cross-attention's K, V."""
    query, key, value = [common_spec.LinearSpec() for _ in range(3)]
    _set_dense(query, attention.query_kernel, attention.query_bias)
    _set_dense(key, attention.key_kernel, attention.key_bias)
    _set_dense(value, attention.value_kernel, attention.value_bias)
    if self_attention:
        utils.fuse_linear(spec.linear[0], [query, key, value])
    else:
        spec.linear[0] = query
        utils.fuse_linear(spec.linear[1], [key, value])
    _set_dense(spec.linear[-1], attention.output_kernel, attention.output_bias, input_axes=2)
    _set_layer_norm(spec.layer_norm, add_and_norm.layer_norm)


def _set_feed_forward(spec, block):
    feed_forward = block.feed_forward
    _set_dense(spec.linear_0, feed_forward.inner.kernel, feed_forward.inner.bias)
    _set_dense(spec.linear_1, feed_forward.outer.kernel, feed_forward.outer.bias)
    _set_layer_norm(spec.layer_norm, block.feed_forward_norm.layer_norm)


def _set_layer_norm(spec, norm):
    spec.gamma = _numpy(norm.gamma)
    spec.beta = _numpy(norm.beta)
