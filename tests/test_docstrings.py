"""The docstrings' examples run, and the dotted names they and the documentation mention exist.

Every `>>>` line under `keras_attn/` and `pipelines/` runs as a doctest of its
module, in a temporary folder (examples that read files write them first),
with `np`, `keras` and `tf` given as in the Keras and TensorFlow docs.
"""

import doctest
import importlib
import re
from pathlib import Path

import keras
import numpy as np
import pytest
import tensorflow as tf

ROOT = Path(__file__).resolve().parents[1]
SOURCES = sorted(
    path for package in ("keras_attn", "pipelines") for path in (ROOT / package).rglob("*.py")
)
FLAGS = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE


def _module(path):
    return ".".join(path.relative_to(ROOT).with_suffix("").parts)


WITH_EXAMPLES = [_module(path) for path in SOURCES if ">>>" in path.read_text(encoding="utf-8")]


# Examples that train, export or search, 2-4 s each: the slow tier.
SLOW_EXAMPLES = {"keras_attn.decoding", "keras_attn.models.bert", "keras_attn.models.seq2seq_lm"}


def test_each_slow_example_is_a_module_with_examples():
    """A module renamed, or its examples gone, would leave its name here marking nothing."""
    assert SLOW_EXAMPLES <= set(WITH_EXAMPLES), SLOW_EXAMPLES - set(WITH_EXAMPLES)


@pytest.mark.parametrize(
    "name",
    [
        pytest.param(name, marks=pytest.mark.slow) if name in SLOW_EXAMPLES else name
        for name in WITH_EXAMPLES
    ],
)
def test_examples_run(name, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    module = importlib.import_module(name)
    runner = doctest.DocTestRunner(optionflags=FLAGS)
    report = []
    for test in doctest.DocTestFinder().find(
        module, extraglobs={"np": np, "keras": keras, "tf": tf}
    ):
        runner.run(test, out=report.append)
    assert runner.tries > 0, f"{name}: its `>>>` lines were not found"
    assert runner.failures == 0, "".join(report)


# `keras_attn.training.ScheduledSampling`, written in backquotes.
_REFERENCE = re.compile(r"`((?:keras_attn|pipelines)(?:\.\w+)+)")


def _resolves(dotted):
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            found = importlib.import_module(".".join(parts[:cut]))
        except ModuleNotFoundError:
            continue
        for attribute in parts[cut:]:
            if not hasattr(found, attribute):
                return False
            found = getattr(found, attribute)
        return True
    return False


def test_dotted_names_in_docs_exist():
    texts = {str(path.relative_to(ROOT)): path.read_text(encoding="utf-8") for path in SOURCES}
    for page in [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]:
        texts[str(page.relative_to(ROOT))] = page.read_text(encoding="utf-8")
    broken = sorted(
        f"{where}: {dotted}"
        for where, text in texts.items()
        for dotted in set(_REFERENCE.findall(text))
        if not _resolves(dotted)
    )
    assert not broken, "names that do not exist:\n" + "\n".join(broken)
