"""What every backbone shares: its arguments as its config, and `from_preset`."""

import keras


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

    @classmethod
    def from_preset(cls, preset, **kwargs):
        """The model of `preset` (a name of its family's `PRESETS`);
        arguments given win over its values.
        """
        return cls(preset=preset, **kwargs)
