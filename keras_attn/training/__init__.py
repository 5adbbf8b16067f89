"""Training: losses, metrics, schedules, strategies and the runner every job uses."""

from keras_attn.training.losses import (
    ClassificationLoss,
    MaskedSparseCrossEntropy,
    PretrainingLoss,
    token_cross_entropy,
)
from keras_attn.training.metrics import MaskedPerplexity, MaskedTokenAccuracy, PretrainingMetrics
from keras_attn.training.optimizers import FusedAdam, adamw, transformer_adam
from keras_attn.training.scheduled_sampling import (
    ScheduledSampling,
    exponential_decay,
    inverse_sigmoid_decay,
    linear_decay,
    teacher_forcing_schedule,
)
from keras_attn.training.schedules import TransformerSchedule, WarmupLinearDecay, warmup_cosine
from keras_attn.training.strategy import get_strategy

__all__ = [
    "ClassificationLoss",
    "MaskedSparseCrossEntropy",
    "PretrainingLoss",
    "token_cross_entropy",
    "MaskedPerplexity",
    "MaskedTokenAccuracy",
    "PretrainingMetrics",
    "FusedAdam",
    "adamw",
    "transformer_adam",
    "ScheduledSampling",
    "exponential_decay",
    "inverse_sigmoid_decay",
    "linear_decay",
    "teacher_forcing_schedule",
    "TransformerSchedule",
    "WarmupLinearDecay",
    "warmup_cosine",
    "get_strategy",
]
