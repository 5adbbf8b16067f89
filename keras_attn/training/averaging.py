"""Checkpoint averaging: the mean of the last checkpoints' weights (Vaswani et al. 2017, 6.1).

The paper's base models were the mean of their last 5 checkpoints. The
runner averages two ways:

- by epoch (`average_epochs`): it keeps the weights of the last `k` epochs
  and, after each epoch's validation, validates their mean as well;
  whichever of the epoch's own weights and the mean has the lower
  validation loss competes for `best.weights.h5`. Training itself always
  continues from the epoch's own weights. On Multi30k the mean of the five
  epochs around the best one beat the best single epoch by 0.4 BLEU on
  test2016 (docs/benchmarks/quality.md).
- by update (`average_last`, fairseq's `average_checkpoints.py
  --num-update-checkpoints`): the weights every `backup_every` updates and
  at the last one; the run's model is the mean of the last `k`.
"""

import os

import numpy as np

from keras_attn.training.checkpoints import save_weights_atomically


def mean_weights(snapshots):
    """The elementwise mean of several `model.get_weights()` lists.

    Args:
        snapshots: list of lists of arrays. Each a `model.get_weights()` of the same model.

    Returns:
        A list of arrays: the mean of each weight.
    """
    return [np.mean(arrays, axis=0) for arrays in zip(*snapshots)]


class WeightsAverage:
    """The weights of the last `k` checkpoints (epochs or updates),
    kept in memory and in the run folder.

    The files (`<folder>/<kind>-N.weights.h5`, written by the chief only)
    let a resumed run average over the checkpoints before its restart.
    Memory: `k` copies of the weights in host memory.

    Args:
        folder: str. Where the files go (`run_folder.EPOCHS` or `UPDATES` of the run).
        kind: str. What a checkpoint's number counts. One of `"epoch"`, `"update"`.
        k: int. How many checkpoints to average (at least 2).
        chief: bool. Whether this worker writes the files.

    Raises:
        ValueError: when `k` is less than 2.

    Example:

        >>> model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
        >>> average = WeightsAverage("runs/toy/epochs", "epoch", k=5, chief=True)
        >>> average.add(model, 1)              # after epoch 1's validation
        >>> model.set_weights([w + 1 for w in model.get_weights()])  # epoch 2 trains
        >>> average.add(model, 2)
        >>> own = average.use_mean(model)      # the model now holds the mean: validate it
        >>> float(model.layers[0].bias[0])
        0.5
        >>> model.set_weights(own)             # training goes on from epoch 2's weights
    """

    def __init__(self, folder, kind, k, chief):
        if k < 2:
            raise ValueError(f"WeightsAverage needs k >= 2 checkpoints, got {k}.")
        self.folder, self.kind, self.k, self.chief = folder, kind, k, chief
        self.snapshots = {}  # checkpoint number -> list of weight arrays

    def _path(self, number):
        return os.path.join(self.folder, f"{self.kind}-{number}.weights.h5")

    def _numbers_on_disk(self):
        if not os.path.isdir(self.folder):
            return []
        names = (
            name.removeprefix(f"{self.kind}-").removesuffix(".weights.h5")
            for name in os.listdir(self.folder)
        )
        return sorted(int(name) for name in names if name.isdigit())

    def add(self, model, number):
        """Keeps the model's weights as checkpoint `number` (counted
        from 1); drops all but the last `k`.

        Args:
            model: `keras.Model`. The model whose weights are kept.
            number: int. The checkpoint's number: the epoch or the update, from 1.
        """
        self.snapshots[number] = model.get_weights()
        for old in sorted(self.snapshots)[: -self.k]:
            del self.snapshots[old]
        if self.chief:
            os.makedirs(self.folder, exist_ok=True)
            save_weights_atomically(model, self._path(number))
            # Older files, also those of an earlier run of this folder with a larger k.
            for old in self._numbers_on_disk():
                if old < min(self.snapshots):
                    os.remove(self._path(old))

    def restore(self, model, upto):
        """On resume after checkpoint `upto`: reads the files of the last `k` checkpoints up to it.

        Files after `upto` (written after the backup a run resumes from)
        are deleted (by the chief). The model's own weights are left as they were.

        Args:
            model: `keras.Model`. The model the files are read into, one at a time.
            upto: int. The number of the last checkpoint before the restart (the epochs or
                updates the backup had done).
        """
        own = model.get_weights()
        if self.chief:
            for number in self._numbers_on_disk():
                if number > upto:
                    os.remove(self._path(number))
        for number in [n for n in self._numbers_on_disk() if n <= upto][-self.k :]:
            model.load_weights(self._path(number))
            self.snapshots[number] = model.get_weights()
        model.set_weights(own)

    @property
    def count(self):
        """The number of checkpoints kept."""
        return len(self.snapshots)

    def use_mean(self, model):
        """Sets the model to the mean of the kept checkpoints;
        returns its own weights, to set back.

        Args:
            model: `keras.Model`. The model to set.

        Returns:
            A list of arrays: the model's weights before, as `model.get_weights()` gives them.
        """
        own = model.get_weights()
        model.set_weights(mean_weights(self.snapshots.values()))
        return own
