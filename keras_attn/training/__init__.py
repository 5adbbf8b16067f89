"""Training: losses, metrics, schedules, strategies and the runner every job uses."""

from keras_attn.training.losses import MaskedSparseCrossEntropy, token_cross_entropy
from keras_attn.training.metrics import MaskedPerplexity, MaskedTokenAccuracy
from keras_attn.training.schedules import TransformerSchedule, warmup_cosine
from keras_attn.training.strategy import get_strategy
