"""Training: strategies, precision, scheduled sampling and the runner every job uses.

The objectives a model compiles with are beside the layers: `keras_attn.losses`,
`keras_attn.metrics`, `keras_attn.optimizers` and `keras_attn.schedules`.
"""

from keras_attn.training.scheduled_sampling import (
    ScheduledSampling,
    exponential_decay,
    inverse_sigmoid_decay,
    linear_decay,
    teacher_forcing_schedule,
)
from keras_attn.training.strategy import get_strategy

__all__ = [
    "ScheduledSampling",
    "exponential_decay",
    "inverse_sigmoid_decay",
    "linear_decay",
    "teacher_forcing_schedule",
    "get_strategy",
]
