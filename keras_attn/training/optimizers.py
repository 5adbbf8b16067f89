"""Optimizers: BERT's AdamW (Devlin et al. 2019, appendix A.2; Loshchilov and Hutter 2019)."""

import keras


def adamw(schedule, weight_decay=0.01, clipnorm=1.0):
    """BERT's optimizer: Adam with decoupled weight decay, none on biases and LayerNorm."""
    optimizer = keras.optimizers.AdamW(
        schedule, weight_decay=weight_decay, beta_1=0.9, beta_2=0.999, epsilon=1e-6, clipnorm=clipnorm
    )
    optimizer.exclude_from_weight_decay(var_names=["bias", "gamma", "beta"])
    return optimizer
