"""A run folder's layout: the names the runner, the jobs and the loaders share, written once.

    <run_dir>/
        settings.json       the training data's hash and the settings bound to
                            the run (`jobs.common.bind_run_folder`)
        checkpoints/        backups: model, optimizer, position in the data
        best.weights.h5     the weights with the lowest validation loss
        history.json        per-epoch logs and the step count
        logs/               TensorBoard's (chief only)
        epochs/             the last epochs' weights, with checkpoint averaging by epoch
        updates/            the weights at the last backups by update, with averaging by update
        STOPPED             a callback stopped the run: a rerun trains no more
        vocab.txt           BERT's or a captioner's vocabulary, or
        vocab.source.txt, vocab.target.txt   a translation model's (WordPiece), or
        vocab.source.model, vocab.target.model   its SentencePiece models
        test.src, test.ref  the test split a translation job scored

Example:

    >>> path("runs/transformer", BEST_WEIGHTS)
    'runs/transformer/best.weights.h5'
"""

import json
import os

SETTINGS = "settings.json"
CHECKPOINTS = "checkpoints"
BEST_WEIGHTS = "best.weights.h5"
HISTORY = "history.json"
LOGS = "logs"
EPOCHS = "epochs"
UPDATES = "updates"
STOPPED = "STOPPED"
VOCABULARY = "vocab.txt"
TEST_SOURCE, TEST_REFERENCE = "test.src", "test.ref"
# Settings that run folders started before 2026-12-04 recorded under
# the command line's shorter names.
FORMER_NAMES = {"vocab_size": "vocabulary_size", "max_length": "max_sequence_length"}


def path(run_dir, name):
    """The path of `name` (one of this module's names) in `run_dir`."""
    return os.path.join(run_dir, name)


def vocabulary_paths(run_dir, extension=".txt"):
    """A translation run's vocabulary files, source then target:
    `vocab.source.txt`, `vocab.target.txt`.

    SentencePiece's models end in `.model` instead.
    """
    return [path(run_dir, f"vocab.{side}{extension}") for side in ("source", "target")]


def is_run_folder(folder):
    """Whether `folder` is a run folder (it has its `settings.json`), not an export."""
    return os.path.isfile(path(folder, SETTINGS))


def read_settings(run_dir):
    """The settings a run was bound to (`settings.json`), or `{}` when
    it has none or they do not parse.

    Keys are the config's field names (`FORMER_NAMES` renamed).
    """
    try:
        with open(path(run_dir, SETTINGS)) as file:
            settings = json.load(file)
    except (OSError, ValueError):
        return {}
    return (
        {FORMER_NAMES.get(key, key): value for key, value in settings.items()}
        if isinstance(settings, dict)
        else {}
    )
