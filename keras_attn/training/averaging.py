"""Checkpoint averaging: the mean of the last epochs' weights (Vaswani et al. 2017, 6.1).

The paper's base models were the mean of their last 5 checkpoints. The
runner keeps the weights of the last `k` epochs and, after each epoch's
validation, validates their mean as well; whichever of the epoch's own
weights and the mean has the lower validation loss competes for
`best.weights.h5`. Training itself always continues from the epoch's own
weights. On Multi30k the mean of the five epochs around the best one
beat the best single epoch by 0.4 BLEU on test2016 (benchmarks/RESULTS.md).
"""

import os

import numpy as np

from keras_attn import run_folder
from keras_attn.training.checkpoints import save_weights_atomically


def mean_weights(snapshots):
    """The elementwise mean of several `model.get_weights()` lists."""
    return [np.mean(arrays, axis=0) for arrays in zip(*snapshots)]


class EpochAverage:
    """The weights of the last `k` epochs, kept in memory and in the run folder.

    The files (`<run_dir>/epochs/epoch-N.weights.h5`, written by the chief
    only) let a resumed run average over the epochs before its restart.
    Memory: `k` copies of the weights in host memory.

    Args:
        run_dir: the run folder.
        k: how many epochs to average (at least 2).
        chief: whether this worker writes the files.

    Example:

    >>> model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    >>> average = EpochAverage("runs/toy", k=5, chief=True)
    >>> average.add(model, epoch=1)        # after epoch 1's validation
    >>> model.set_weights([w + 1 for w in model.get_weights()])  # epoch 2 trains
    >>> average.add(model, epoch=2)
    >>> own = average.use_mean(model)      # the model now holds the mean: validate it
    >>> float(model.layers[0].bias[0])
    0.5
    >>> model.set_weights(own)             # training goes on from epoch 2's weights
    """

    def __init__(self, run_dir, k, chief):
        if k < 2:
            raise ValueError(f"EpochAverage needs k >= 2 epochs, got {k}.")
        self.folder = run_folder.path(run_dir, run_folder.EPOCHS)
        self.k = k
        self.chief = chief
        self.snapshots = {}  # epoch number -> list of weight arrays

    def _path(self, epoch):
        return os.path.join(self.folder, f"epoch-{epoch}.weights.h5")

    def add(self, model, epoch):
        """Keeps the model's weights as those of `epoch` (counted from 1); drops older ones."""
        self.snapshots[epoch] = model.get_weights()
        for old in [e for e in self.snapshots if e <= epoch - self.k]:
            del self.snapshots[old]
        if self.chief:
            os.makedirs(self.folder, exist_ok=True)
            save_weights_atomically(model, self._path(epoch))
            # Older files, also those of an earlier run of this folder with a larger k.
            for name in os.listdir(self.folder):
                kept = name.removeprefix("epoch-").removesuffix(".weights.h5")
                if kept.isdigit() and int(kept) <= epoch - self.k:
                    os.remove(os.path.join(self.folder, name))

    def restore(self, model, epoch):
        """On resume after `epoch` finished epochs: reads the files of the epochs before it.

        The model's own weights are left as they were.
        """
        own = model.get_weights()
        for kept in range(max(1, epoch - self.k + 1), epoch + 1):
            if os.path.exists(self._path(kept)):
                model.load_weights(self._path(kept))
                self.snapshots[kept] = model.get_weights()
        model.set_weights(own)

    @property
    def count(self):
        return len(self.snapshots)

    def use_mean(self, model):
        """Sets the model to the mean of the kept epochs; returns its own weights, to set back."""
        own = model.get_weights()
        model.set_weights(mean_weights(self.snapshots.values()))
        return own
