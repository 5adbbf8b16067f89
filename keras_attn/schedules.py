"""Learning-rate schedules: the Transformer paper's (5.3), warm-up +
cosine, BERT's warm-up + linear decay.
"""

import keras
from keras import ops


@keras.saving.register_keras_serializable(package="keras_attn")
class TransformerSchedule(keras.optimizers.schedules.LearningRateSchedule):
    """Linear warm-up, then inverse-square-root decay.

    lrate = scale · hidden_dim^-0.5 · min(step^-0.5, step · warmup_steps^-1.5),
    counting steps from 1 (`hidden_dim` is the paper's d_model). The peak,
    at `warmup_steps`, is scale · (hidden_dim · warmup_steps)^-0.5.

    Args:
        hidden_dim: int. The model width (the paper's d_model).
        warmup_steps: int. Steps of linear warm-up (4000 in the paper). Defaults to 4000.
        scale: float. A multiplier on the paper's rate (1.0 in the paper). Defaults to 1.0.

    Example:

        >>> schedule = TransformerSchedule(hidden_dim=512, warmup_steps=4000)
        >>> optimizer = keras.optimizers.Adam(schedule, beta_2=0.98, epsilon=1e-9)
    """

    def __init__(self, hidden_dim, warmup_steps=4000, scale=1.0):
        self.hidden_dim = hidden_dim
        self.warmup_steps = warmup_steps
        self.scale = scale

    @classmethod
    def with_peak(cls, hidden_dim, warmup_steps, peak):
        """The schedule of that shape whose peak, at `warmup_steps`, is `peak`.

        Args:
            hidden_dim: int. The model width.
            warmup_steps: int. Steps of linear warm-up.
            peak: float. The learning rate at the end of the warm-up.

        Returns:
            A `TransformerSchedule`, its `scale` set to reach `peak`.
        """
        return cls(hidden_dim, warmup_steps, scale=peak / (hidden_dim * warmup_steps) ** -0.5)

    def __call__(self, step):
        step = ops.cast(step, "float32") + 1.0
        rate = ops.minimum(ops.rsqrt(step), step * float(self.warmup_steps) ** -1.5)
        return self.scale * float(self.hidden_dim) ** -0.5 * rate

    def get_config(self):
        return {
            "hidden_dim": self.hidden_dim,
            "warmup_steps": self.warmup_steps,
            "scale": self.scale,
        }

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        if "d_model" in config:  # saved before the width was called hidden_dim everywhere
            config["hidden_dim"] = config.pop("d_model")
        return cls(**config)


def warmup_cosine(peak, warmup_steps, total_steps, final_fraction=0.02):
    """Linear warm-up to `peak`, then cosine decay to `final_fraction · peak`.

    A schedule for runs of a known length: annealing to the end of the run
    is what lets a short run converge (the paper's schedule never anneals).

    Args:
        peak: float. The learning rate at the end of the warm-up.
        warmup_steps: int. Steps of linear warm-up from 0; cut to `total_steps - 1` when
            larger.
        total_steps: int. The run's steps; the decay ends there.
        final_fraction: float. The rate at the end, as a fraction of `peak`. Defaults to 0.02.

    Returns:
        A `keras.optimizers.schedules.CosineDecay`.
    """
    warmup_steps = min(warmup_steps, max(total_steps - 1, 0))
    return keras.optimizers.schedules.CosineDecay(
        initial_learning_rate=0.0,
        decay_steps=max(total_steps - warmup_steps, 1),
        alpha=final_fraction,
        warmup_target=peak,
        warmup_steps=warmup_steps,
    )


@keras.saving.register_keras_serializable(package="keras_attn")
class WarmupLinearDecay(keras.optimizers.schedules.LearningRateSchedule):
    """BERT's schedule: linear warm-up to `peak`, then linear decay to 0 at `total_steps`.

    Args:
        peak: float. The learning rate at the end of the warm-up.
        warmup_steps: int. Steps of warm-up (BERT: 10,000 of 1M; fine-tuning:
            about a tenth of the run).
        total_steps: int. The run's steps; the rate is 0 from there on.

    Example:

        >>> schedule = WarmupLinearDecay(1e-4, warmup_steps=100, total_steps=1000)
        >>> [round(float(schedule(step)), 6) for step in (0, 50, 100, 550, 1000)]
        [0.0, 5e-05, 0.0001, 5e-05, 0.0]
    """

    def __init__(self, peak, warmup_steps, total_steps):
        self.peak = peak
        self.warmup_steps = warmup_steps
        self.total_steps = total_steps

    def __call__(self, step):
        step = ops.cast(step, "float32")
        warmup = float(max(self.warmup_steps, 1))
        decay = float(max(self.total_steps - self.warmup_steps, 1))
        rising = step / warmup
        falling = ops.maximum(0.0, (float(self.total_steps) - step) / decay)
        return self.peak * ops.where(step < self.warmup_steps, rising, falling)

    def get_config(self):
        return {
            "peak": self.peak,
            "warmup_steps": self.warmup_steps,
            "total_steps": self.total_steps,
        }
