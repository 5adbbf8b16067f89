"""What the benchmarks and tests measure the library against, and the library itself does not need.

- `uncached_greedy_search`: greedy search that reruns the whole model every
  step (what the TensorFlow tutorials do), the reference `decoding.greedy_search`
  must equal. Written
  apart from `keras_attn.decoding`, so that it checks that code rather than
  sharing it.
- `padding_fraction`, `count_truncated`: what the translation pipeline pads
  and cuts.
- `fit_steps_per_second`: a compiled model's training steps/s under `fit`,
  warmed up first and timed between steps.
- `describe_cpu`: the CPU a figure was measured on, as the benchmark pages
  name it (a figure holds for its CPU type).
"""

import os
import time

import keras
import numpy as np
import tensorflow as tf

from keras_attn.training.precision import NATIVE_BFLOAT16_FLAGS, cpu_info
from pipelines.special_tokens import BOS_ID, EOS_ID, PAD_ID


def uncached_greedy_search(model, source, max_length, bos_id=BOS_ID, eos_id=EOS_ID):
    """Greedy search rerunning the encoder, and the decoder over all outputs so far, every step.

    O(t) work at step t where a cached stepper does O(1).

    Args:
        model: a functional model mapping `{"source", "target_in"}` to
            `(B, T, V)` logits, e.g. `TransformerBackbone(...)`.
        source: `(B, S)` int token ids, 0 as padding.
        max_length: the most tokens to emit; int or scalar int32 tensor.
        bos_id: the token fed at the first step.
        eos_id: the token that ends a sequence.

    Returns:
        A dict with `tokens` `(B, L)` ([PAD] after a row's [EOS]), `scores`
        `(B,)` (sums of the emitted tokens' log-probabilities) and `lengths`
        `(B,)`, as `greedy_search` returns them.
    """
    source = tf.convert_to_tensor(source)
    batch = tf.shape(source)[0]

    def step(index, prefix, scores, lengths, done):
        logits = model({"source": source, "target_in": prefix}, training=False)[:, -1]
        log_probs = tf.nn.log_softmax(tf.cast(logits, tf.float32))
        ids = tf.range(tf.shape(log_probs)[-1])
        log_probs = tf.where((ids == PAD_ID) | (ids == bos_id), -np.inf, log_probs)  # never emitted
        token = tf.argmax(log_probs, axis=-1, output_type=tf.int32)
        scores += tf.where(done, 0.0, tf.reduce_max(log_probs, axis=-1))
        lengths += tf.cast(~done, tf.int32)
        token = tf.where(done, PAD_ID, token)
        return (
            index + 1,
            tf.concat([prefix, token[:, None]], 1),
            scores,
            lengths,
            done | (token == eos_id),
        )

    start = (
        tf.constant(0),
        tf.fill([batch, 1], bos_id),
        tf.zeros([batch]),
        tf.zeros([batch], tf.int32),
        tf.zeros([batch], tf.bool),
    )
    _, prefix, scores, lengths, _ = tf.while_loop(
        lambda index, prefix, scores, lengths, done: (index < max_length) & ~tf.reduce_all(done),
        step,
        start,
        shape_invariants=(
            tf.TensorShape([]),
            tf.TensorShape([None, None]),
            *[tf.TensorShape([None])] * 3,
        ),
    )
    return {"tokens": prefix[:, 1:], "scores": scores, "lengths": lengths}


def padding_fraction(dataset, max_batches=None):
    """Fraction of the ids in `source`, `target_in` and `target_out` that are padding.

    Args:
        dataset: a dataset made by `pipelines.translation.translation_dataset`
            (finite, or cut with `max_batches`).
        max_batches: look at this many batches at most.

    Returns:
        A float in [0, 1): padded ids / all ids.
    """
    padding = total = 0
    for step, (inputs, target_out) in enumerate(dataset):
        if max_batches is not None and step >= max_batches:
            break
        for ids in (inputs["source"], inputs["target_in"], target_out):
            ids = ids.numpy()
            padding += int(np.sum(ids == PAD_ID))
            total += ids.size
    return padding / max(total, 1)


def count_truncated(sources, targets, source_tokenizer, target_tokenizer, max_length):
    """Number of pairs that lose tokens to `max_length` in `translation_dataset`.

    A pair counts when its source has more than `max_length` tokens or its
    target more than `max_length - 1` (room is needed for BOS/EOS).
    """
    source_lengths = source_tokenizer.tokenize(list(sources)).row_lengths().numpy()
    target_lengths = target_tokenizer.tokenize(list(targets)).row_lengths().numpy()
    return int(np.sum((source_lengths > max_length) | (target_lengths > max_length - 1)))


class _StepClock(keras.callbacks.Callback):
    """The wall time at the end of a `fit` call's first step and of its last."""

    def on_train_batch_end(self, batch, logs=None):
        self.last = time.perf_counter()
        if batch == 0:
            self.first = self.last


def fit_steps_per_second(model, batches, steps, warmup_steps):
    """Training steps/s of compiled `model` under `fit` on `batches` (a repeating dataset).

    Warmed up (traced) by a first `fit` of `warmup_steps`, then timed from
    the end of a second call's first step to the end of its last, not around
    the call, so that starting the call's iterator over the pipeline is not
    counted.
    """
    model.fit(batches, steps_per_epoch=warmup_steps, epochs=1, verbose=0)
    clock = _StepClock()
    model.fit(batches, steps_per_epoch=steps + 1, epochs=1, verbose=0, callbacks=[clock])
    return steps / (clock.last - clock.first)


# what decides bfloat16's and AMX's speed
CPU_FLAGS = (
    "avx512f",
    *NATIVE_BFLOAT16_FLAGS,
    "amx_tile",
)


def describe_cpu(cpuinfo="/proc/cpuinfo"):
    """The CPU type in one line: model name, family/model, cores and which of `CPU_FLAGS` it has.

    Example:

        >>> describe_cpu()  # doctest: +SKIP
        'Intel(R) Xeon(R) Processor, family 6 model 167, 2 cores, flags: avx512f ...'
    """
    fields = cpu_info(cpuinfo)
    if not fields:
        return f"unknown CPU ({cpuinfo} unreadable), {os.cpu_count()} cores"
    flags = [flag for flag in CPU_FLAGS if flag in fields.get("flags", "").split()]
    return (
        f"{fields.get('model name', '?')}, family {fields.get('cpu family', '?')} model "
        f"{fields.get('model', '?')}, {os.cpu_count()} cores, flags: "
        f"{' '.join(flags) or 'none of ' + ' '.join(CPU_FLAGS)}"
    )
