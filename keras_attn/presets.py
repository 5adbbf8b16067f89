"""Every model preset, and the one rule that applies them.

A preset names a family's architecture values (depth and widths). An
argument given explicitly always wins over its preset's value, in every
model; what neither gives comes from the model function's own defaults.

Example:

    >>> architecture("transformer", "tiny", {}, hidden_dim=64)
    {'num_layers': 2, 'hidden_dim': 64, 'num_heads': 4, 'intermediate_dim': 512}
"""

PRESETS = {
    "transformer": {
        # Quick runs on a laptop CPU, e.g. the built-in corpus.
        "tiny": dict(num_layers=2, hidden_dim=128, num_heads=4, intermediate_dim=512),
        # The 3+3-layer model of the Multi30k literature.
        "small": dict(num_layers=3, hidden_dim=256, num_heads=8, intermediate_dim=512),
        # The paper's base model (table 3).
        "base": dict(num_layers=6, hidden_dim=512, num_heads=8, intermediate_dim=2048),
    },
    "seq2seq": {
        # (Embeddings as wide as the LSTM: `Seq2SeqBackbone`'s embedding_dim defaults to
        # hidden_dim.) Quick runs on a laptop CPU, e.g. the built-in corpus: 1 × 128 LSTM.
        "tiny": dict(num_layers=1, hidden_dim=128),
        # Multi30k-sized, trains on a laptop CPU: 2 × 256 LSTM.
        "small": dict(num_layers=2, hidden_dim=256),
        # Luong et al. (2015), section 4.1: 4 × 1000 LSTM, 1000-wide embeddings.
        "base": dict(num_layers=4, hidden_dim=1000),
    },
    # Show, Attend and Tell over the generated scenes (64×64 images, an 8×8 grid): the CNN's stage
    # widths, the grid's feature width D and the LSTM's width.
    "captioner": {
        "tiny": dict(filters=(16, 32, 64), feature_dim=64, hidden_dim=128, stage_depth=1),
        "small": dict(filters=(32, 64, 128), feature_dim=128, hidden_dim=256, stage_depth=1),
    },
    # The compact models of Turc et al. 2019 and BERT-base (L layers, H wide, A heads).
    "bert": {
        "tiny": dict(num_layers=2, hidden_dim=128, num_heads=2),
        "mini": dict(num_layers=4, hidden_dim=256, num_heads=4),
        "small": dict(num_layers=4, hidden_dim=512, num_heads=8),
        "medium": dict(num_layers=8, hidden_dim=512, num_heads=8),
        "base": dict(num_layers=12, hidden_dim=768, num_heads=12),
    },
}


_loader = []  # the one preset loader, `keras_attn.checkpoints.load`, once it is imported


def set_loader(loader):
    """Makes `loader` the one preset loader that every `from_preset` asks.

    `keras_attn.checkpoints` sets itself when imported (as importing `keras_attn` does): it knows
    the models; the models know only this hook.

    Args:
        loader: callable. Called as `loader(model_class, preset, **kwargs)`, it returns the model
            of class `model_class` that `preset` names.
    """
    _loader[:] = [loader]


def load(model_class, preset, **kwargs):
    """Makes the model of class `model_class` that `preset` names, with the one preset loader.

    Args:
        model_class: a `keras_attn.models.backbone.Backbone` or `keras_attn.models.Task`
            subclass. The class of the model to make.
        preset: str or path-like. A size name of `model_class.presets`, or a checkpoint folder.
        **kwargs: Keyword arguments passed to the loader, then to the model.

    Returns:
        A `model_class` instance.
    """
    if not _loader:
        raise RuntimeError(
            "no preset loader: `import keras_attn` sets it (keras_attn.checkpoints, with the "
            "TensorFlow backend)"
        )
    return _loader[0](model_class, preset, **kwargs)


def architecture(family, preset, defaults, **given):
    """The architecture values a model of `family` is built with.

    Args:
        family: str. A key of `PRESETS`: one of `"transformer"`, `"seq2seq"`, `"captioner"`,
            `"bert"`.
        preset: str or `None`. One of the family's preset names, or `None` for none.
        defaults: dict. The model function's values for what neither the preset nor `given`
            sets.
        **given: The model function's architecture arguments; those that are not `None` were
            given explicitly and win.

    Returns:
        A dict of every key of `defaults`, the preset and `given`.

    Raises:
        ValueError: when `preset` is not one of the family's preset names (the message names
            them).
        KeyError: when `family` is not a key of `PRESETS`.
    """
    presets = PRESETS[family]
    if preset is not None and preset not in presets:
        raise ValueError(
            f"unknown {family} preset {preset!r}; the presets are {', '.join(presets)}."
        )
    values = {**defaults, **(presets[preset] if preset is not None else {})}
    values.update({key: value for key, value in given.items() if value is not None})
    return values
