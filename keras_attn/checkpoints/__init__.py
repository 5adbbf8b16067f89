"""The one preset loader: every backbone's and task's `from_preset(preset)` comes here.

`load` tells what `preset` is and hands it to that kind's loader, which checks
the folder's files before it builds anything (`files`, `tensors`):

    a size name ("tiny", "base")         a new model of the family's sizes (`from_size`)
    a Hugging Face BERT folder           `bert`: config.json of model_type "bert"
    a Hugging Face Marian folder         `marian`: config.json of model_type "marian"
    a keras-hub BERT preset folder       `keras_hub`: config.json of a keras-hub class
    an export of keras-attn              `pretrained_bert` (a BERT's), `serving.translator`

The models know only the hook `keras_attn.presets.load`, which this module sets
when imported; it knows the models. A name that is neither a size nor a folder,
and a folder of none of these kinds, is refused in one line (`UserError`, a
`ValueError`).
"""

import os
import warnings

from keras_attn import presets
from keras_attn.checkpoints import bert, files, huggingface, keras_hub, marian, pretrained_bert
from keras_attn.errors import UserError
from keras_attn.models.backbone import Backbone
from keras_attn.models.bert import BertBackbone, BertTask
from keras_attn.models.seq2seq_lm import Seq2SeqLM
from keras_attn.models.transformer import TransformerBackbone
from keras_attn.serving import translator


def _bert_checkpoint(model_class, folder, preprocessor=None, **kwargs):
    checkpoint = pretrained_bert.read_bert(folder)
    if issubclass(model_class, BertBackbone):
        return bert.build_backbone(checkpoint, **kwargs)
    return bert.build_task(model_class, checkpoint, preprocessor, **kwargs)


def _marian_checkpoint(model_class, folder, preprocessor=None, **kwargs):
    checkpoint = marian.read_checkpoint(folder)
    if issubclass(model_class, TransformerBackbone):
        return marian.build_backbone(checkpoint, **kwargs)
    return marian.build_task(checkpoint, preprocessor, **kwargs)


def _bert_export(model_class, folder, preprocessor=None, **kwargs):
    huggingface.check_own_choices(kwargs, folder)
    return pretrained_bert.load_backbone(folder, **kwargs)


def _translation_export(model_class, folder, preprocessor=None, **kwargs):
    huggingface.check_own_choices(kwargs, folder)
    if preprocessor is not None or kwargs:
        raise UserError(f"{folder}: an export loads as it was exported, with its preprocessor")
    task = translator.load_task(folder)
    return task if issubclass(model_class, Seq2SeqLM) else task.backbone


# Each kind: what it is called, the model classes it makes, and its loader.
KINDS = {
    "huggingface-bert": ("a Hugging Face BERT folder", (BertBackbone, BertTask), _bert_checkpoint),
    "keras-hub": ("a keras-hub BERT preset", (BertBackbone, BertTask), _bert_checkpoint),
    "huggingface-marian": (
        "a Hugging Face Marian folder",
        (TransformerBackbone, Seq2SeqLM),
        _marian_checkpoint,
    ),
    "bert-export": ("a keras-attn BERT export", (BertBackbone,), _bert_export),
    "translation-export": (
        "a keras-attn translation export",
        (Seq2SeqLM, TransformerBackbone),
        _translation_export,
    ),
}


def kind_of(folder):
    """Which of `KINDS` the folder `folder` is, refused in one line when none.

    A folder with `config.json` is a keras-hub preset or a Hugging Face folder of its
    `model_type`; one without is a BERT or translation export of keras-attn.

    Args:
        folder: str. The folder.

    Returns:
        A str, a key of `KINDS`.

    Raises:
        UserError: when `config.json` cannot be read as a JSON object, or its `model_type` is
            not `"bert"` or `"marian"`; or when the folder has no `config.json` and is not an
            export of keras-attn.
    """
    if os.path.isfile(os.path.join(folder, huggingface.CONFIG)):
        settings = files.read_settings(os.path.join(folder, huggingface.CONFIG))
        if str(settings.values.get("registered_name", "")).startswith(keras_hub.REGISTERED):
            return "keras-hub"
        kind = settings.values.get("model_type")
        if kind not in ("bert", "marian"):
            raise UserError(
                f"{os.path.join(folder, huggingface.CONFIG)}: model_type {kind!r}, not 'bert' or "
                "'marian' (the Hugging Face folders keras-attn reads)"
            )
        return f"huggingface-{kind}"
    if pretrained_bert.is_export(folder):
        return "bert-export"
    if translator.is_export(folder):
        return "translation-export"
    raise UserError(
        f"{folder}: no {huggingface.CONFIG} (a Hugging Face or keras-hub folder) and not an export "
        "of keras-attn (saved_models/NAME/VERSION)"
    )


def load(model_class, preset, **kwargs):
    """The `model_class` model that `preset` names, a size name or a folder (see the module).

    A size name makes a new model (`model_class.from_size`), even where a folder of that name
    exists; a folder is read by its kind's loader (`KINDS`).

    Args:
        model_class: type. A Backbone or Task subclass, whose `presets` are its size names.
        preset: str or os.PathLike. A size name of `model_class.presets`, or a folder.
        **kwargs: Given to `from_size`, or to the folder's loader. Beside a folder: a task's
            `preprocessor`, a BERT task's own arguments, and the backbone's `dropout`, `dtype`,
            `name` and `trainable`; nothing beside a translation export, which loads as it was
            exported.

    Returns:
        An instance of `model_class`.

    Raises:
        UserError: when `preset` is neither a size name nor a folder, the folder is of no kind
            or of a kind that does not make a `model_class` (`kind_of`), or its loader refuses
            it or the arguments.
    """
    sizes = model_class.presets
    if issubclass(model_class, Backbone) and "preprocessor" in kwargs:
        raise UserError(
            f"{model_class.__name__}.from_preset: a backbone takes no preprocessor (a task does)"
        )
    if isinstance(preset, str) and preset in sizes:
        if huggingface.is_folder(preset):
            warnings.warn(
                f"{preset!r}: the size name, not the folder of that name (give "
                f"{os.path.join('.', preset)!r} to read the folder)",
                stacklevel=3,
            )
        return model_class.from_size(preset, **kwargs)
    if not huggingface.is_folder(preset):
        raise UserError(
            f"{model_class.__name__}.from_preset({preset!r}): no such folder, and not one of its "
            f"sizes ({', '.join(sizes)})"
        )
    folder = os.fspath(preset)
    what, classes, loader = KINDS[kind_of(folder)]
    if not issubclass(model_class, classes):
        raise UserError(
            f"{folder}: {what}, which makes a {' or a '.join(c.__name__ for c in classes)}, "
            f"not a {model_class.__name__}"
        )
    return loader(model_class, folder, **kwargs)


presets.set_loader(load)
