"""One process of a test run of the Transformer job (not a test module).

    python translation_worker.py CONFIG_JSON OUT_PREFIX

Runs `translation.run(TranslationConfig(**CONFIG_JSON))`; with `TF_CONFIG`
set it is one worker of a MultiWorkerMirroredStrategy cluster. Writes the
final weights to OUT_PREFIX.npz and the step count, history and export
path to OUT_PREFIX.json, so the tests can compare processes.

Two keys of CONFIG_JSON are not the job's: they make the process SIGKILL
itself (a real SIGKILL: no handler, no cleanup) at a chosen point, so a
test kills it at the same place on a fast machine and on a loaded one:

    kill_after_step: N   right after optimizer step N, before any backup
                         the loop would write after it.
    kill_in_export: true once the export's SavedModel is written in its
                         temporary folder, before its metadata and the
                         rename that makes it a version.

and one saves time where a test reads no test-split scores:

    translate_test_split: false  scores empty translations instead of
                         decoding the test split (tracing the search
                         costs seconds a process).
"""

import functools
import json
import os
import signal
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))

import keras  # noqa: E402
import numpy as np  # noqa: E402

from keras_attn import evaluation  # noqa: E402
from keras_attn.config import TranslationConfig  # noqa: E402
from keras_attn.jobs import translation  # noqa: E402
from keras_attn.serving import versions  # noqa: E402


def _die():
    sys.stdout.flush()
    os.kill(os.getpid(), signal.SIGKILL)


class _KillAfterStep(keras.callbacks.Callback):
    def __init__(self, step):
        super().__init__()
        self.step = step

    def on_train_batch_end(self, batch, logs=None):
        if int(self.model.optimizer.iterations.numpy()) >= self.step:
            print(f"SIGKILL after step {self.step}", flush=True)
            _die()


def _with_callback(train, callback):
    """`train` (the runner's) with `callback` added to those the job passes."""

    @functools.wraps(train)
    def train_with(*args, callbacks=(), **kwargs):
        return train(*args, callbacks=[*callbacks, callback], **kwargs)

    return train_with


def _kill_in_export(write_metadata):
    @functools.wraps(write_metadata)
    def write_then_die(path, *args, **kwargs):
        print(f"SIGKILL with the SavedModel in {path}", flush=True)
        _die()

    return write_then_die


def score_empty_translations(translator, corpus, beam_width):
    hypotheses = [""] * len(corpus.sources)
    return {**evaluation.translation_scores(hypotheses, corpus.targets), "hypotheses": hypotheses}


def main(config_json, out_prefix):
    config = json.loads(config_json)
    kill_after_step = config.pop("kill_after_step", None)
    if kill_after_step is not None:
        translation.train = _with_callback(translation.train, _KillAfterStep(kill_after_step))
    if config.pop("kill_in_export", False):
        versions.write_metadata = _kill_in_export(versions.write_metadata)  # noqa: SLF001
    if not config.pop("translate_test_split", True):
        translation.evaluate = score_empty_translations
    result = translation.run(TranslationConfig(**config))
    np.savez(out_prefix + ".npz", *result.model.get_weights())
    with open(out_prefix + ".json", "w") as f:
        json.dump(
            {
                "steps": result.steps,
                "history": result.history,
                "export_path": result.export_path,
                "new_export": result.new_export,
                "already_finished": result.already_finished,
            },
            f,
        )


if __name__ == "__main__":
    main(*sys.argv[1:])
