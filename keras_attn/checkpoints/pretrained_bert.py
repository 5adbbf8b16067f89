"""A pretrained BERT to fine-tune: its vocabulary, settings and backbone, from an export, a run
folder or a checkpoint folder.

`keras-attn finetune MODEL_DIR` reads a BERT export (what
`keras_attn.serving.BertServer` keeps in `assets.extra/`), the run folder of
`keras-attn pretrain bert` (`keras_attn.run_folder`'s layout), or a Hugging
Face or keras-hub BERT folder (`keras_attn.checkpoints.bert`, `keras_hub`).
"""

import functools
import inspect
import os

from keras_attn import run_folder
from keras_attn.checkpoints import bert, files, huggingface, keras_hub
from keras_attn.errors import UserError
from keras_attn.models.bert import BertBackbone, BertPretrainer, backbone_arguments
from keras_attn.serving.bert import BACKBONE_SETTINGS, BACKBONE_WEIGHTS, VOCABULARY
from pipelines.tokenizers import WordPieceTokenizer

EXTRA = "assets.extra"  # an export's files that servers ignore


def read_pretrained(model_dir):
    """What a BERT export or pretraining run folder keeps for fine-tuning, without building a model.

    Args:
        model_dir: str. An export (`saved_models/bert/<version>`), the run folder of
            `keras-attn pretrain bert` (`runs/bert`: its `vocab.txt`, `settings.json` and best
            weights), or a Hugging Face or keras-hub BERT folder (its `config.json`, weights and
            vocabulary).

    Returns:
        A tuple `(tokenizer, settings)`: its `WordPieceTokenizer` and the `BertBackbone`
            arguments it was built with, written out (`BertBackbone.resolve`: the same for a run
            folder and its export), with the preprocessor's `lowercase`, `strip_accents` and
            `max_length`.

    Raises:
        ValueError: when `model_dir` is none of these, a run folder without best weights yet,
            or a checkpoint folder without a vocabulary.
        UserError: when a checkpoint folder cannot be read, in one line.
    """
    if run_folder.is_run_folder(model_dir):
        return _read_run_folder(model_dir)
    if is_checkpoint_folder(model_dir):
        return _read_checkpoint_folder(model_dir)
    if not is_export(model_dir):
        raise ValueError(
            f"{model_dir}: not a keras-attn BERT export (no {BACKBONE_SETTINGS} in {EXTRA}), "
            f"a pretraining run folder (no {run_folder.SETTINGS}) or a Hugging Face or keras-hub "
            f"BERT folder (no {huggingface.CONFIG})"
        )
    paths = _export_files(model_dir)
    saved = files.read_settings(paths[0])  # exports before 2026-12-04 name a preset, not values
    architecture = backbone_arguments(saved.values)
    unknown = sorted(set(architecture) - set(inspect.signature(BertBackbone).parameters))
    if unknown:
        raise UserError(f"{paths[0]}: {', '.join(map(files.shown, unknown))}: no BERT setting")
    for name in set(architecture) & set(keras_hub.SIZES):  # the sizes of a BertBackbone
        saved.whole(name)
    settings = {
        **_written_out(architecture),
        "lowercase": saved.boolean("lowercase"),
        "strip_accents": saved.boolean("strip_accents", default=False),
        "max_length": saved.whole("max_length"),
    }
    return WordPieceTokenizer.load(
        paths[2], lowercase=settings["lowercase"], strip_accents=settings["strip_accents"]
    ), settings


def _export_files(model_dir):
    return [
        os.path.join(model_dir, EXTRA, name)
        for name in (BACKBONE_SETTINGS, BACKBONE_WEIGHTS, VOCABULARY)
    ]


def is_export(model_dir):
    """Whether `model_dir` is a BERT export of keras-attn (its backbone's files in
    `assets.extra/`).

    Args:
        model_dir: str. The folder.

    Returns:
        A bool: whether `assets.extra/` holds its backbone's settings, weights and vocabulary.
    """
    return all(os.path.isfile(path) for path in _export_files(model_dir))


def _read_run_folder(run_dir):
    bound = run_folder.read_settings(run_dir)
    vocabulary, best = (
        run_folder.path(run_dir, name) for name in (run_folder.VOCABULARY, run_folder.BEST_WEIGHTS)
    )
    # (a captioner's)
    if not os.path.isfile(vocabulary) or "preset" not in bound or "image_size" in bound:
        raise ValueError(
            f"{run_dir}: not a BERT pretraining run folder (no {run_folder.VOCABULARY}, or no "
            f"preset or an image_size in {run_folder.SETTINGS})"
        )
    if not os.path.isfile(best):
        raise ValueError(
            f"{run_dir}: no {run_folder.BEST_WEIGHTS} yet (the run has not finished an epoch)"
        )
    tokenizer = WordPieceTokenizer.load(vocabulary, lowercase=True)
    architecture = _written_out(
        dict(
            vocabulary_size=tokenizer.vocabulary_size,
            preset=bound["preset"],
            max_sequence_length=bound["max_sequence_length"],
            # folders started before the setting: post-norm
            norm_first=bound.get("norm_first", False),
        )
    )
    return tokenizer, {
        **architecture,
        "lowercase": True,
        "strip_accents": False,
        "max_length": bound["max_sequence_length"],
    }


def is_checkpoint_folder(model_dir):
    """Whether `model_dir` is a Hugging Face or keras-hub BERT folder (it has their
    `config.json`).

    Args:
        model_dir: str. The folder.

    Returns:
        A bool.
    """
    return os.path.isfile(os.path.join(model_dir, huggingface.CONFIG))


def read_bert(folder):
    """The checked `bert.Checkpoint` of a Hugging Face BERT folder or a keras-hub BERT preset.

    Args:
        folder: str. The folder: a keras-hub preset when its `config.json` names a keras-hub
            class (`keras_hub.is_preset`), else a Hugging Face BERT folder.

    Returns:
        A `keras_attn.checkpoints.bert.Checkpoint`, no tensor read yet.

    Raises:
        UserError: when the folder cannot be read as one (`keras_hub.read_bert`,
            `bert.read_checkpoint`).
    """
    if keras_hub.is_preset(folder):
        return keras_hub.read_bert(folder)
    return bert.read_checkpoint(folder)


# Read once a process to fine-tune: `read_pretrained` and `load_backbone` both ask.
_checkpoint = functools.lru_cache(maxsize=1)(read_bert)


def _read_checkpoint_folder(folder):
    checkpoint = _checkpoint(folder)
    if checkpoint.vocabulary is None:
        raise ValueError(f"{folder}: no vocabulary, which fine-tuning needs to read text")
    settings = {
        **_written_out(checkpoint.arguments),
        "lowercase": checkpoint.lowercase,
        "strip_accents": checkpoint.strip_accents,
        "max_length": checkpoint.arguments["max_sequence_length"],
    }
    tokenizer = WordPieceTokenizer(
        checkpoint.vocabulary,
        lowercase=checkpoint.lowercase,
        strip_accents=checkpoint.strip_accents,
    )
    return tokenizer, settings


def _written_out(arguments):
    """`BertBackbone` arguments with its preset written out: what
    fixes the architecture, as its config says it.
    """
    return backbone_arguments(BertBackbone.resolve(**arguments))


def load_backbone(model_dir, dropout=0.1, **kwargs):
    """A new `BertBackbone` with the weights of a BERT export, pretraining run folder or
    checkpoint folder, to fine-tune.

    Build it inside the strategy scope it trains under. A run folder's weights are its
    `BertPretrainer`'s, whose heads are dropped.

    Args:
        model_dir: str. As `read_pretrained`'s.
        dropout: float. The backbone's dropout rate. Defaults to 0.1.
        **kwargs: `dtype`, `name`, `trainable` of the backbone.

    Returns:
        A `BertBackbone`.

    Raises:
        ValueError: as `read_pretrained`.
        UserError: when a checkpoint folder cannot be read, or `kwargs` holds another argument
            beside it (`bert.build_backbone`).
    """
    if is_checkpoint_folder(model_dir):
        return bert.build_backbone(_checkpoint(model_dir), dropout=dropout, **kwargs)
    _, settings = read_pretrained(model_dir)
    backbone = BertBackbone(**backbone_arguments(settings), dropout=dropout, **kwargs)
    if run_folder.is_run_folder(model_dir):
        # heads dropped
        BertPretrainer(backbone).load_weights(run_folder.path(model_dir, run_folder.BEST_WEIGHTS))
    else:
        backbone.load_weights(os.path.join(model_dir, EXTRA, BACKBONE_WEIGHTS))
    return backbone
