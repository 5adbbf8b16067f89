"""Optimizers: Adam (Kingma and Ba 2015) in one fused kernel per weight, and BERT's AdamW.

Keras's `Adam.update_step` spells the update as a dozen elementwise ops per
weight (three passes over the gradient, two over each moment, five more
for the step), each a separate TensorFlow op with its own scheduling cost;
a Transformer has over a hundred weights, so a step runs over a thousand
small ops for the optimizer alone. TensorFlow has the whole update as one
multithreaded kernel, `ResourceApplyAdam`, computing the same formula:

    m ← β1 m + (1 − β1) g,    v ← β2 v + (1 − β2) g²
    θ ← θ − α m / (√v + ε),   α = lr √(1 − β2ᵗ) / (1 − β1ᵗ)

`FusedAdam` is Keras's `Adam` with that kernel as its update of dense
gradients: same arguments, same optimizer variables (so checkpoints of
either load into the other), same results to float32 rounding; what every weight's update shares
(β1ᵗ, β2ᵗ, the rate) is made once a step. Clipping, learning-rate schedules, loss scaling and
`tf.distribute` stay Keras's own. TensorFlow backend only. BERT keeps Keras's `AdamW`: its learning
test sits close to its bars, and a run that differs only by rounding crossed one.

An embedding's gradient arrives as `IndexedSlices`, one slice per lookup,
and Keras's Adam squares the slices before summing the repeated rows: a
token seen n times adds Σ gᵢ² to v, not the (Σ gᵢ)² of the gradient the
fused kernel squares. Those weights keep Keras's update, so that training
is unchanged.
"""

import keras
import tensorflow as tf


@keras.saving.register_keras_serializable(package="keras_attn")
class FusedAdam(keras.optimizers.Adam):
    """`keras.optimizers.Adam` whose update is one fused kernel per weight.

    Takes `keras.optimizers.Adam`'s arguments and computes its update (see
    the module docstring); about half the optimizer's time in a Transformer
    training step. `amsgrad=True` falls back to Keras's update, as do the gradients that
    arrive as `tf.IndexedSlices` (embeddings). TensorFlow backend only.

    Args:
        learning_rate: float or `keras.optimizers.schedules.LearningRateSchedule`. The
            learning rate, or its schedule. Defaults to 0.001.
        beta_1: float. The decay rate of the first moment, β1. Defaults to 0.9.
        beta_2: float. The decay rate of the second moment, β2. Defaults to 0.999.
        epsilon: float. ε, added to √v for numerical stability. Defaults to 1e-7.
        amsgrad: bool. Whether to use AMSGrad, with Keras's own update. Defaults to `False`.
        **kwargs: The other arguments of `keras.optimizers.Adam`, such as `clipnorm`,
            `global_clipnorm`, `weight_decay` and `name`.

    Example:

        >>> optimizer = FusedAdam(1e-3, beta_2=0.98, epsilon=1e-9, clipnorm=1.0)
        >>> model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
        >>> model.compile(optimizer=optimizer, loss="mse")
        >>> model.fit(np.ones((8, 4)), np.ones((8, 1)), epochs=2, verbose=0).epoch
        [0, 1]
    """

    def update_step(self, gradient, variable, learning_rate):
        if self._keras_updates(gradient):
            return super().update_step(gradient, variable, learning_rate)
        self._fused_update(gradient, variable, self._step_scalars(variable.dtype, learning_rate))

    def _distributed_tf_update_step(self, distribution, grads_and_vars, learning_rate):
        # Keras's TensorFlow loop over the weights, each weight's `update_step` replaced by the
        # fused kernel on scalars made once a step: β1ᵗ, β2ᵗ and the rate are the same for every
        # weight, and made per weight they were about a thousand more ops for a Transformer's step
        # to trace and its first call to optimize.
        shared = {}

        def update(variable, gradient, learning_rate):
            if self._keras_updates(gradient):
                return self.update_step(gradient, variable, learning_rate)  # Keras's own
            key = (variable.dtype, id(learning_rate))  # a replica's own rate under a strategy
            if key not in shared:
                shared[key] = self._step_scalars(variable.dtype, learning_rate)
            self._fused_update(gradient, variable, shared[key])

        for gradient, variable in grads_and_vars:
            distribution.extended.update(
                variable, update, args=(gradient, learning_rate), group=False
            )

    def _keras_updates(self, gradient):
        """Whether Keras's own update applies: AMSGrad (not in the
        kernel), or slices (module docstring).
        """
        return self.amsgrad or isinstance(gradient, tf.IndexedSlices)

    def _step_scalars(self, dtype, learning_rate):
        """The kernel's scalar arguments at this step, in `dtype`."""
        step = tf.cast(self.iterations + 1, dtype)
        beta_1, beta_2 = tf.cast(self.beta_1, dtype), tf.cast(self.beta_2, dtype)
        return dict(
            beta1_power=tf.pow(beta_1, step),
            beta2_power=tf.pow(beta_2, step),
            lr=tf.cast(learning_rate, dtype),
            beta1=beta_1,
            beta2=beta_2,
            epsilon=tf.cast(self.epsilon, dtype),
        )

    def _fused_update(self, gradient, variable, scalars):
        index = self._get_variable_index(variable)
        tf.raw_ops.ResourceApplyAdam(
            var=_handle(variable),
            m=_handle(self._momentums[index]),
            v=_handle(self._velocities[index]),
            grad=tf.cast(gradient, variable.dtype),
            **scalars,
        )


def _handle(variable):
    """The resource handle of a Keras or TensorFlow variable.

    Inside `strategy.extended.update` a distributed variable's handle is
    the one of the replica being updated.
    """
    if isinstance(variable, keras.Variable):
        variable = variable.value
    return variable.handle


def transformer_adam(schedule, clipnorm=1.0, fused=True):
    """The Transformer's optimizer (Vaswani et al. 2017, 5.3): Adam with β1 0.9, β2 0.98, ε 1e-9.

    Args:
        schedule: float or `keras.optimizers.schedules.LearningRateSchedule`. The learning rate
            or its schedule.
        clipnorm: float or `None`. Each gradient's norm is clipped to this; `None` clips
            nothing. Defaults to 1.0.
        fused: bool. `True` makes a `FusedAdam`; `False` a `keras.optimizers.Adam` (to
            compare). Defaults to `True`.

    Returns:
        A `FusedAdam`, or a `keras.optimizers.Adam` when `fused` is `False`.
    """
    optimizer = FusedAdam if fused else keras.optimizers.Adam
    return optimizer(schedule, beta_1=0.9, beta_2=0.98, epsilon=1e-9, clipnorm=clipnorm)


def adamw(schedule, weight_decay=0.01, clipnorm=1.0):
    """BERT's optimizer: Adam with decoupled weight decay, none on biases and LayerNorm.

    β1 0.9, β2 0.999 and ε 1e-6; weights whose names hold `bias`, `gamma` or `beta` are not
    decayed.

    Args:
        schedule: float or `keras.optimizers.schedules.LearningRateSchedule`. The learning rate
            or its schedule.
        weight_decay: float. The decoupled weight decay rate. Defaults to 0.01.
        clipnorm: float or `None`. Each gradient's norm is clipped to this; `None` clips
            nothing. Defaults to 1.0.

    Returns:
        A `keras.optimizers.AdamW`.
    """
    optimizer = keras.optimizers.AdamW(
        schedule,
        weight_decay=weight_decay,
        beta_1=0.9,
        beta_2=0.999,
        epsilon=1e-6,
        clipnorm=clipnorm,
    )
    optimizer.exclude_from_weight_decay(var_names=["bias", "gamma", "beta"])
    return optimizer
