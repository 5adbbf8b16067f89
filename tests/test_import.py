"""`import keras_attn` is all a program needs to load the package's
`.keras` files, whatever it imports first.
"""

import json
import os
import subprocess
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_attn.models import Seq2SeqLM
from tests import fresh_process

pytest_plugins = ["tests.fixtures_export"]
pytestmark = pytest.mark.slow  # each test starts processes

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LOAD = (
    "import json, sys\n"
    "import numpy as np\n"
    "{imports}\n"
    "model = keras.saving.load_model(sys.argv[1])\n"
    "inputs = {{key: np.array(value, 'int32') for key, value in json.loads(sys.argv[2]).items()}}\n"
    "print(json.dumps(keras.ops.convert_to_numpy(model(inputs)).tolist()))\n"
)


def _fresh(code, *args, quiet_tensorflow=True):
    """Runs `code` in a new Python process from the repository's root;
    returns its standard output and error.

    `quiet_tensorflow=False` leaves `TF_CPP_MIN_LOG_LEVEL` unset, as a user's
    environment does, in a process that imports TensorFlow itself; otherwise the
    process is forked from one that has imported TensorFlow alone
    (`tests/fresh_process.py`), with keras, keras_attn and pipelines still to import.
    """
    if quiet_tensorflow:
        out = fresh_process.run(code, *args, cwd=ROOT)
    else:
        env = {name: value for name, value in os.environ.items() if name != "TF_CPP_MIN_LOG_LEVEL"}
        out = subprocess.run(
            [sys.executable, "-c", code, *args], cwd=ROOT, capture_output=True, text=True, env=env
        )
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout, out.stderr


@pytest.fixture(scope="module")
def saved(tmp_path_factory, tiny_translator):
    """A tiny untrained Transformer task saved as `.keras`, an input and its output."""
    task = Seq2SeqLM(tiny_translator.model, tiny_translator.preprocessor)
    path = str(tmp_path_factory.mktemp("keras") / "translator.keras")
    task.save(path)
    packed = task.preprocessor(tf.constant(["ein hund läuft ."]), tf.constant(["a dog runs ."]))
    inputs = {
        "source": packed["source"].numpy().tolist(),
        "target_in": packed["target_in"].numpy().tolist(),
    }
    expected = task({key: np.array(value, "int32") for key, value in inputs.items()})
    return path, inputs, keras.ops.convert_to_numpy(expected)


@pytest.mark.parametrize(
    "imports",
    [
        "import keras_attn\nimport keras",
        "import keras\nimport keras_attn",
        "import keras_attn\nfrom keras_attn import layers\nimport keras",
        "import pipelines.preprocessors\nimport keras_attn\nimport keras",
    ],
)
def test_a_fresh_process_loads_a_saved_task_after_import_keras_attn(saved, imports):
    """The last order: the data floor first (`pipelines` imports nothing of `keras_attn`), then
    the package; no import cycle breaks.

    Where `keras_attn` comes first, `TF_CPP_MIN_LOG_LEVEL` is left unset:
    TensorFlow's start-up lines (oneDNN, CUDA stubs, absl) are held back
    while `keras_attn` imports it, so the process prints its answer only.
    """
    path, inputs, expected = saved
    library_first = imports.startswith("import keras_attn")
    out, err = _fresh(
        LOAD.format(imports=imports), path, json.dumps(inputs), quiet_tensorflow=not library_first
    )
    np.testing.assert_allclose(np.array(json.loads(out)), expected, atol=1e-5)
    if library_first:
        assert err == ""
