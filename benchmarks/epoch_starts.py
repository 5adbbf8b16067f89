"""How long each epoch of the built-in translation job waits before its first step.

    python benchmarks/epoch_starts.py [--runs 3] [--epochs 5]

Runs the job (`keras_attn.jobs.translation.run`: the built-in corpus of 6,000
pairs, batch 64, float32, no export) and prints, for every epoch, the seconds
from its start to its first step and the median step. Run as a file with
`PYTHONPATH=<checkout>` to time another commit, alternating the two, as
RESULTS.md's "Epoch starts" rows were made.
"""

import argparse
import statistics
import tempfile
import time

import keras

from keras_attn.config import TranslationConfig
from keras_attn.jobs import translation


class EpochClock(keras.callbacks.Callback):
    """Seconds from each epoch's start to its first step, and each step's duration."""

    def __init__(self):
        super().__init__()
        self.waits, self.steps = [], []

    def on_epoch_begin(self, epoch, logs=None):
        self.started, self.ends = time.perf_counter(), []

    def on_train_batch_begin(self, batch, logs=None):
        if batch == 0:
            self.waits.append(time.perf_counter() - self.started)

    def on_train_batch_end(self, batch, logs=None):
        self.ends.append(time.perf_counter())

    def on_epoch_end(self, epoch, logs=None):
        self.steps.extend(b - a for a, b in zip(self.ends, self.ends[1:]))


def run_once(epochs):
    clock = EpochClock()
    train = translation.train

    def train_with_clock(*args, callbacks=(), **kwargs):
        return train(*args, callbacks=[*callbacks, clock], **kwargs)

    translation.train = train_with_clock
    try:
        config = TranslationConfig(
            builtin_size=6000, epochs=epochs, batch_size=64, warmup_steps=50, mixed_precision=False,
            run_dir=tempfile.mkdtemp(prefix="epoch-starts-"), export=False, verbose=0,
        )
        translation.run(config, log=lambda line: None)
    finally:
        translation.train = train
    return clock


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--epochs", type=int, default=5)
    args = parser.parse_args()
    for _ in range(args.runs):
        clock = run_once(args.epochs)
        waits = " ".join(f"{wait:.2f}" for wait in clock.waits)
        print(f"first step after (s): {waits}; median step {1000 * statistics.median(clock.steps):.0f} ms", flush=True)


if __name__ == "__main__":
    main()
