"""What every task shares: a backbone and a preprocessor in its
config, `from_preset`, and the task's loss.
"""

import inspect

import keras
import tensorflow as tf

import pipelines.preprocessors  # noqa: F401  (registers the preprocessors a task's config names)
from keras_attn import presets
from keras_attn.errors import UserError


class Task(keras.Model):
    """A functional `keras.Model` on a backbone, with the preprocessor that feeds it.

    A subclass builds its graph on `backbone` in `__init__`, keeps its other
    arguments in `self._arguments` and says how a preset's backbone is sized
    by a preprocessor (`make_backbone`). `get_config` holds the backbone's
    and the preprocessor's configs, so `keras.saving.load_model` rebuilds
    both. `compile(loss="auto")` may set `task_loss`, a loss that is already
    this replica's share of the global batch's mean (what `tf.distribute`
    sums), used instead of Keras's per-replica mean. A `compile` that used
    only its own arguments keeps them in `_auto_compile`: a `.keras` file
    then reloads compiled the same way, with its optimizer state.
    """

    task_loss = None
    # The task's own `compile` arguments, when it was compiled with its defaults only.
    _auto_compile = None

    def get_config(self):
        return {
            "name": self.name,
            "trainable": self.trainable,
            "backbone": keras.saving.serialize_keras_object(self.backbone),
            "preprocessor": self.preprocessor
            and keras.saving.serialize_keras_object(self.preprocessor),
            **self._arguments,
        }

    @classmethod
    def from_config(cls, config):
        config = dict(config, backbone=keras.saving.deserialize_keras_object(config["backbone"]))
        if config.get("preprocessor"):
            config["preprocessor"] = keras.saving.deserialize_keras_object(config["preprocessor"])
        return cls(**config)

    presets = {}  # its backbone family's sizes by name (`keras_attn.presets.PRESETS`)

    @classmethod
    def from_preset(cls, preset, preprocessor=None, **kwargs):
        """The task of `preset`: a new one on a new backbone of a size name of `presets`, or one
        with the weights of a checkpoint folder (`keras_attn.checkpoints.load` tells which).

        Args:
            preset: str or path-like. A size name, or a folder: a Hugging Face or keras-hub
                checkpoint, or an export of keras-attn.
            preprocessor: a `pipelines.preprocessors` layer or `None`. The preprocessor the task
                reads its inputs with; a new model needs one, a checkpoint folder gives its own
                unless one is given. Defaults to `None`.
            **kwargs: The task's own arguments (those its constructor names) and backbone
                arguments, which win over the size's (beside a folder: only `dropout`, `dtype`,
                `name` and `trainable`).

        Returns:
            An instance of this class.

        Raises:
            ValueError: when `preset` is neither a size name nor a folder, is a size name without
                a preprocessor, or is a folder that cannot be read; said in one line
                (`keras_attn.errors.UserError`).
        """
        return presets.load(cls, preset, preprocessor=preprocessor, **kwargs)

    @classmethod
    def from_size(cls, preset, preprocessor=None, **kwargs):
        """A new task on a new backbone of the size name `preset`, sized by `preprocessor`'s
        vocabulary and length (`make_backbone`).

        Args:
            preset: str. A size name of `presets`.
            preprocessor: a `pipelines.preprocessors` layer. The preprocessor the task reads its
                inputs with. Defaults to `None`, which is refused: a new task needs one.
            **kwargs: As `from_preset`'s: the task's own arguments and backbone arguments.

        Returns:
            An instance of this class.

        Raises:
            ValueError: when `preprocessor` is `None` (`keras_attn.errors.UserError`).
        """
        if preprocessor is None:
            raise UserError(
                f"{cls.__name__}.from_preset({preset!r}): a new model needs the preprocessor it "
                "reads with (a checkpoint folder gives its own)"
            )
        own = inspect.signature(cls.__init__).parameters
        task_arguments = {key: kwargs.pop(key) for key in list(kwargs) if key in own}
        return cls(
            cls.make_backbone(preset, preprocessor, **kwargs),
            preprocessor=preprocessor,
            **task_arguments,
        )

    @classmethod
    def make_backbone(cls, preset, preprocessor, **kwargs):
        """A new backbone of the size name `preset`, sized by `preprocessor`; each task says how.

        Args:
            preset: str. A size name of `presets`.
            preprocessor: a `pipelines.preprocessors` layer. The preprocessor the task reads its
                inputs with.
            **kwargs: Backbone arguments, which win over the size's values.

        Returns:
            A `keras_attn.models.backbone.Backbone`.
        """
        raise NotImplementedError

    def get_compile_config(self):
        if self._auto_compile is not None:
            return {"auto": self._auto_compile}
        return super().get_compile_config()

    def compile_from_config(self, config):
        if "auto" not in config:
            return super().compile_from_config(config)
        # A task compiled with its own arguments loads compiled the
        # same way (a schedule among them comes back an object).
        self.compile(**keras.saving.deserialize_keras_object(config["auto"]))
        if self.built:
            # so the saved optimizer state loads into it
            self.optimizer.build(self.trainable_variables)

    def fit(self, *args, **kwargs):
        # Without a strategy scope Keras builds the optimizer inside the first
        # trace of its train step, which makes TensorFlow trace that step twice.
        if self.built and self.optimizer is not None and not self.optimizer.built:
            with self.distribute_strategy.scope():
                self.optimizer.build(self.trainable_variables)
        # A dataset shuffles itself: Keras's default `shuffle=True`
        # would only warn that it is ignored.
        data = args[0] if args else kwargs.get("x")
        if isinstance(data, (tf.data.Dataset, keras.utils.PyDataset)):
            kwargs.setdefault("shuffle", False)
        return super().fit(*args, **kwargs)

    def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, training=True):
        if self.task_loss is None:
            return super().compute_loss(x, y, y_pred, sample_weight, training)
        if sample_weight is not None:
            raise ValueError(
                f"{type(self).__name__}: its own loss (`compile(loss='auto')`) weighs every "
                "real token alike and takes no `sample_weight`; compile with a Keras loss to "
                "weight samples."
            )
        # The task's loss, and as Keras adds them, the layers' own
        # (`add_loss`, weight regularizers).
        return keras.ops.sum(
            [
                self.task_loss(y, y_pred),
                *(self._aggregate_additional_loss(loss) for loss in self.losses),
            ]
        )
