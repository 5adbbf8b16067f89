"""Round trip through the installed wheel: export a tiny translator, translate with `keras-attn`.

Run by `.ci/run` with the Python of an environment where the wheel (not the
checkout) is installed, from a folder outside the checkout. The model is
untrained, so its output is noise; what counts is that every module and file
the command needs came with the wheel.
"""

import importlib.metadata
import os
import subprocess
import sys
import tempfile

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import keras  # noqa: E402

import keras_attn  # noqa: E402
from keras_attn import export  # noqa: E402
from keras_attn.models import TransformerStepper, transformer  # noqa: E402
from pipelines import tokenizers  # noqa: E402

SOURCES = ["ein hund läuft .", "zwei katzen schlafen ."]
TARGETS = ["a dog runs .", "two cats sleep ."]


def main():
    assert "site-packages" in keras_attn.__file__, f"not the installed wheel: {keras_attn.__file__}"
    files = [str(f) for f in importlib.metadata.distribution("keras-attn").files]
    assert any(f.endswith("LICENSE") for f in files), "LICENSE is not in the wheel"

    source = tokenizers.WordPieceTokenizer(tokenizers.learn_wordpiece_vocabulary(SOURCES, vocab_size=100))
    target = tokenizers.WordPieceTokenizer(tokenizers.learn_wordpiece_vocabulary(TARGETS, vocab_size=100))
    keras.utils.set_random_seed(7)
    model = transformer(
        source.vocabulary_size, target.vocabulary_size, max_sequence_length=12, num_layers=1,
        hidden_dim=16, num_heads=2, intermediate_dim=32, dropout=0.0,
    )
    translator = export.Translator(TransformerStepper(model), source, target, max_length=12)
    path = export.export(translator, tempfile.mkdtemp(), "toy")

    command = os.path.join(os.path.dirname(sys.executable), "keras-attn")
    result = subprocess.run([command, "translate", path, "ein hund ."], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert len(result.stdout.splitlines()) == 1, result.stdout
    print(f"wheel round trip: {path} translated 'ein hund .' to {result.stdout.strip()!r}")


if __name__ == "__main__":
    main()
