"""Backups of a run (model, optimizer, data position) and the best weights, written atomically.

A backup is a `tf.train.Checkpoint` of the model, the optimizer, the
training metrics, the model's random state (`random_state`: where its
dropout masks' seeds are) and the run's `Progress` (epochs done, steps
done in the current epoch, best validation loss). TensorFlow writes a checkpoint's
files under temporary names, renames them, and only then points the
`checkpoint` state file at the new one (also by a rename), so a crash at
any moment leaves the previous backup as the latest.

Under MultiWorkerMirroredStrategy every worker writes at the same steps,
as TensorFlow requires; the chief into the run folder, the others into a
temporary folder they delete at once. Every worker restores from the
chief's folder, which therefore has to be on storage all workers see.
"""

import os
import shutil

import tensorflow as tf


class Progress(tf.Module):
    """Where the run is: saved with every backup.

    Attributes:
        epoch: `tf.Variable`. int64, the epochs done.
        step: `tf.Variable`. int64, the steps done in the current epoch (`epoch`).
        best_val_loss: `tf.Variable`. float64, the lowest validation loss so far (infinite
            before the first).
        global_batch_size: `tf.Variable`. int64, the run's examples per step over all
            replicas (0 before it is set).
    """

    def __init__(self):
        super().__init__()
        self.epoch = tf.Variable(0, dtype=tf.int64, trainable=False)
        self.step = tf.Variable(0, dtype=tf.int64, trainable=False)  # steps done in `epoch`
        self.best_val_loss = tf.Variable(float("inf"), dtype=tf.float64, trainable=False)
        self.global_batch_size = tf.Variable(0, dtype=tf.int64, trainable=False)


def random_state(model):
    """The state of `model`'s `keras.random.SeedGenerator`s, which `model.weights` leaves out.

    Restored with the weights, a resumed run draws the dropout masks the uninterrupted one drew.

    Args:
        model: `keras.Model`. The model.

    Returns:
        A list of `keras.Variable`: the model's variables that are not among its weights.
    """
    weights = {id(weight) for weight in model.weights}
    return [variable for variable in model.variables if id(variable) not in weights]


class Backups:
    """Saves and restores the backups of one run folder.

    Args:
        checkpoint: `tf.train.Checkpoint`. The checkpoint to save.
        directory: str. The chief's backup folder (`<run_dir>/checkpoints`).
        chief: bool. Whether this process is the chief. Defaults to `True`.
        worker: str. This process's name, for its temporary folder. Defaults to `"chief"`.
        keep: int. How many backups the chief keeps. Defaults to 2.
    """

    def __init__(self, checkpoint, directory, chief=True, worker="chief", keep=2):
        self.checkpoint = checkpoint
        self.directory = directory
        self.chief = chief
        if chief:
            self._manager = tf.train.CheckpointManager(checkpoint, directory, max_to_keep=keep)
        else:
            self._scratch = os.path.join(os.path.dirname(directory), f".{worker}-scratch")

    def restore(self):
        """Restores the latest backup; returns its path, or `None` if there is none.

        Returns:
            A str or `None`.

        Raises:
            AssertionError: when the backup lacks objects the checkpoint holds (a backup of
                another model).
            ValueError: when a saved value has another shape than its object's.
        """
        latest = tf.train.latest_checkpoint(self.directory)
        if latest:
            self.checkpoint.restore(latest).assert_existing_objects_matched()
        return latest

    def save(self, step):
        """Writes a backup numbered `step` (the run's global step).

        Args:
            step: int. The run's global step, the backup's number.

        Returns:
            The backup's path on the chief; `None` on another worker, whose backup is deleted
            once written.
        """
        if self.chief:
            return self._manager.save(checkpoint_number=step)
        self.checkpoint.write(os.path.join(self._scratch, "ckpt"))
        shutil.rmtree(self._scratch, ignore_errors=True)
        return None


def save_weights_atomically(model, path):
    """Writes `model`'s weights to `path` through a temporary file and a rename.

    Args:
        model: `keras.Model`. The model whose weights are written.
        path: str. The weights file, ending in `.weights.h5`; its folder is created.
    """
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    temporary = path + ".tmp.weights.h5"
    model.save_weights(temporary)
    os.replace(temporary, path)
