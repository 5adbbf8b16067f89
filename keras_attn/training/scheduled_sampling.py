"""Scheduled sampling (Bengio et al. 2015): the teacher-forcing ratio decays over training.

At training step i the decoder is fed the gold previous token with
probability ε_i and its own prediction otherwise (section 2.4). The paper's
three decays of ε_i:

- linear: ε_i = max(ε, k - c·i), with 0 ≤ ε < 1 the floor;
- exponential: ε_i = k^i, with k < 1;
- inverse sigmoid: ε_i = k / (k + exp(i / k)), with k ≥ 1.

`ScheduledSampling` sets the decoder's `sampling_probability` to 1 - ε_i
before every batch (see `AttentionDecoder`). The default parameters, the
job's, put ε near 0.5 after a few thousand steps.
"""

import inspect
import math

import keras


def linear_decay(step, k=1.0, c=1e-4, minimum=0.25):
    """ε_i = max(ε, k - c·i), ε the `minimum`.

    Args:
        step: int. The training step i.
        k: float. The ratio at step 0. Defaults to 1.0.
        c: float. The decrease per step. Defaults to 1e-4.
        minimum: float. ε, the floor (0 ≤ ε < 1). Defaults to 0.25.

    Returns:
        A float: the teacher-forcing ratio ε_i.
    """
    return max(minimum, k - c * step)


def exponential_decay(step, k=0.9998):
    """ε_i = k^i (k < 1).

    Args:
        step: int. The training step i.
        k: float. The decay per step, below 1. Defaults to 0.9998.

    Returns:
        A float: the teacher-forcing ratio ε_i.
    """
    return k**step


def inverse_sigmoid_decay(step, k=500.0):
    """ε_i = k / (k + exp(i / k)) (k ≥ 1).

    Args:
        step: int. The training step i.
        k: float. How slowly the ratio decays, at least 1. Defaults to 500.0.

    Returns:
        A float: the teacher-forcing ratio ε_i (0.0 once exp(i / k) overflows).
    """
    exponent = step / k
    if exponent > 700:  # exp overflows; ε is 0 to double precision
        return 0.0
    return k / (k + math.exp(exponent))


SCHEDULES = {
    "linear": linear_decay,
    "exponential": exponential_decay,
    "inverse_sigmoid": inverse_sigmoid_decay,
}
DECAYS = tuple(SCHEDULES)  # the teacher-forcing decays, the default first


def decay_parameters(name):
    """The parameters of the decay called `name` and their defaults, e.g. `{"k": 500.0}`.

    Args:
        name: str. One of `"linear"`, `"exponential"`, `"inverse_sigmoid"`.

    Returns:
        A dict: each parameter's default, by name (all but `step`).

    Raises:
        KeyError: when `name` is not one of those.
    """
    parameters = list(inspect.signature(SCHEDULES[name]).parameters.values())[1:]  # after `step`
    return {parameter.name: parameter.default for parameter in parameters}


def teacher_forcing_schedule(name, **parameters):
    """The decay called `name` with its `parameters` fixed: `step → ε_step`.

    Args:
        name: str. One of `"linear"`, `"exponential"`, `"inverse_sigmoid"`.
        **parameters: The decay's parameters (as `decay_parameters(name)` names them), each
            left out at its default.

    Returns:
        A callable: `step → ε_step`.

    Raises:
        ValueError: when `name` is an unknown decay, or a parameter is one it does not have
            (naming its parameters).

    Example:

        >>> schedule = teacher_forcing_schedule("inverse_sigmoid", k=500.0)
        >>> round(schedule(0), 4), round(schedule(5000), 4)
        (0.998, 0.0222)
    """
    if name not in SCHEDULES:
        raise ValueError(f"The schedule must be one of {sorted(SCHEDULES)}, got {name!r}.")
    unknown = sorted(set(parameters) - set(decay_parameters(name)))
    if unknown:
        raise ValueError(
            f"{name} decay has no parameter {', '.join(unknown)}; "
            f"its parameters are {', '.join(decay_parameters(name))}"
        )
    decay = SCHEDULES[name]
    return lambda step: decay(step, **parameters)


class ScheduledSampling(keras.callbacks.Callback):
    """Sets the decoders' sampling probability to 1 - ε(step) before every batch.

    The step is the optimizer's iteration count, so a resumed run picks the
    schedule up where it stopped. The probability in use is logged at the
    end of every epoch as `sampling_probability`.

    Args:
        schedule: callable. `step → ε`, the teacher-forcing ratio (e.g.
            `teacher_forcing_schedule("inverse_sigmoid", k=1000.0)`).

    Example:

        >>> from keras_attn.models import Seq2SeqBackbone
        >>> from keras_attn.losses import MaskedSparseCrossEntropy
        >>> model = Seq2SeqBackbone(1000, 1000, scheduled_sampling="argmax")
        >>> model.compile("adam", MaskedSparseCrossEntropy())
        >>> callback = ScheduledSampling(inverse_sigmoid_decay)
        >>> model.fit(dataset, epochs=5, callbacks=[callback])  # doctest: +SKIP
    """

    def __init__(self, schedule):
        super().__init__()
        self.schedule = schedule

    def on_train_begin(self, logs=None):
        # The sampling probabilities of the model's layers that have
        # one (decoders with scheduled sampling).
        layers = self.model._flatten_layers()  # noqa: SLF001
        self._variables = [
            layer.sampling_probability
            for layer in layers
            if getattr(layer, "sampling_probability", None) is not None
        ]

    def on_train_batch_begin(self, batch, logs=None):
        step = int(self.model.optimizer.iterations.numpy())
        probability = 1.0 - float(self.schedule(step))
        for variable in self._variables:
            variable.assign(probability)

    def on_epoch_end(self, epoch, logs=None):
        if logs is not None and self._variables:
            logs["sampling_probability"] = float(self._variables[0].numpy())
