"""One process of a test run of the Transformer job (not a test module).

    python translation_worker.py CONFIG_JSON OUT_PREFIX

Runs `translation.run(TranslationConfig(**CONFIG_JSON))`; with `TF_CONFIG`
set it is one worker of a MultiWorkerMirroredStrategy cluster. Writes the
final weights to OUT_PREFIX.npz and the step count and history to
OUT_PREFIX.json, so the tests can compare processes.
"""

import json
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))

import numpy as np  # noqa: E402

from keras_attn.jobs import translation  # noqa: E402


def main(config_json, out_prefix):
    result = translation.run(translation.TranslationConfig(**json.loads(config_json)))
    np.savez(out_prefix + ".npz", *result.model.get_weights())
    with open(out_prefix + ".json", "w") as f:
        json.dump({"steps": result.steps, "history": result.history, "export_path": result.export_path}, f)


if __name__ == "__main__":
    main(*sys.argv[1:])
