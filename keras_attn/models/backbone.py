"""What every backbone shares: its arguments as its config, and `from_preset`."""

import keras

from keras_attn import presets


class Backbone(keras.Model):
    """A functional `keras.Model` rebuilt from the arguments it was made with.

    A subclass builds its graph in `__init__`, calls `super().__init__(inputs,
    outputs, ...)` and then keeps its resolved arguments (the preset's values
    written out) in `self._arguments`: `get_config` returns them, so
    `from_config` and `keras.saving.load_model` make the same model.
    """

    def get_config(self):
        return {"name": self.name, "trainable": self.trainable, **self._arguments}

    @classmethod
    def from_config(cls, config):
        return cls(**config)

    presets = {}  # the family's sizes by name (`keras_attn.presets.PRESETS`)

    @classmethod
    def from_preset(cls, preset, **kwargs):
        """The model of `preset`: a new one of a size name of `presets`, or one with the weights of
        a checkpoint folder (`keras_attn.checkpoints.load` tells which).

        Args:
            preset: str or path-like. A size name (arguments given win over its values), or a
                folder: a Hugging Face or keras-hub checkpoint, or an export of keras-attn.
            **kwargs: The model's arguments; beside a folder only `dropout`, `dtype`, `name` and
                `trainable`, the rest being the checkpoint's.

        Returns:
            An instance of this class.

        Raises:
            ValueError: when `preset` is neither a size name nor a folder, or is a folder that
                cannot be read; said in one line (`keras_attn.errors.UserError`).
        """
        return presets.load(cls, preset, **kwargs)

    @classmethod
    def from_size(cls, preset, **kwargs):
        """A new model of the size name `preset`; arguments given win over its values.

        Args:
            preset: str. A size name of `presets`.
            **kwargs: The model's arguments, which win over the size's values.

        Returns:
            An instance of this class.
        """
        return cls(preset=preset, **kwargs)
