"""The installed wheel: every module of the checkout in it and importable, and a round trip.

`python wheel_smoke.py CHECKOUT`, run by `.ci/run` with the Python of an
environment where the wheel (not the checkout) is installed, from a folder
outside the checkout. It exports a tiny untrained translator (its output is
noise) and translates with the `keras-attn` command.
"""

import importlib
import importlib.metadata
import os
import subprocess
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import keras  # noqa: E402

import keras_attn  # noqa: E402
from keras_attn import serving  # noqa: E402
from keras_attn.models import Seq2SeqLM, TransformerBackbone  # noqa: E402
from pipelines import tokenizers  # noqa: E402
from pipelines.preprocessors import TranslationPreprocessor  # noqa: E402

SOURCES = ["ein hund läuft .", "zwei katzen schlafen ."]
TARGETS = ["a dog runs .", "two cats sleep ."]


def check_contents(checkout):
    assert "site-packages" in keras_attn.__file__, f"not the installed wheel: {keras_attn.__file__}"
    installed = {str(f) for f in importlib.metadata.distribution("keras-attn").files}
    assert any(f.endswith("LICENSE") for f in installed), "LICENSE is not in the wheel"
    modules = sorted(
        str(path.relative_to(checkout))
        for package in ("keras_attn", "pipelines")
        for path in (checkout / package).rglob("*.py")
    )
    missing = [module for module in modules if module not in installed]
    assert not missing, f"not in the wheel: {missing}"
    for module in modules:  # also: what they import is installed with the wheel
        importlib.import_module(
            module.removesuffix(".py").removesuffix("/__init__").replace("/", ".")
        )
    print(f"wheel: {len(modules)} modules, all importable")


def round_trip():
    source = tokenizers.WordPieceTokenizer(
        tokenizers.learn_wordpiece_vocabulary(SOURCES, vocabulary_size=100)
    )
    target = tokenizers.WordPieceTokenizer(
        tokenizers.learn_wordpiece_vocabulary(TARGETS, vocabulary_size=100)
    )
    keras.utils.set_random_seed(7)
    model = TransformerBackbone(
        source.vocabulary_size,
        target.vocabulary_size,
        max_sequence_length=12,
        num_layers=1,
        hidden_dim=16,
        num_heads=2,
        intermediate_dim=32,
        dropout=0.0,
    )
    translator = serving.Translator(
        Seq2SeqLM(model, TranslationPreprocessor(source, target, max_length=12))
    )
    with tempfile.TemporaryDirectory() as root:
        path = serving.export(translator, root, "toy")
        command = os.path.join(os.path.dirname(sys.executable), "keras-attn")
        result = subprocess.run(
            [command, "translate", path, "ein hund ."], capture_output=True, text=True
        )
    assert result.returncode == 0, result.stderr
    assert len(result.stdout.splitlines()) == 1, result.stdout
    print(f"wheel round trip: `keras-attn translate` on a fresh export: {result.stdout.strip()!r}")


if __name__ == "__main__":
    check_contents(Path(sys.argv[1]))
    round_trip()
