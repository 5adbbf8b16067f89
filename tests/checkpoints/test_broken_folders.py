"""Broken and hostile checkpoint folders end in one line naming the file and the value, in Python
(a `UserError`, which is a `ValueError`) and on the command line (exit 2), before anything is
built and with nothing written; folders of other fine shapes still load.

The folders are made at test time from the tiny fixtures, one change each
(`benchmarks.broken_checkpoints`, which also runs them through other loaders).
"""

import contextlib
import json
import shutil
import warnings

import numpy as np
import pytest

from benchmarks.broken_checkpoints import (
    BASES,
    CASES,
    FINE,
    FINE_FOLDER_NAMES,
    FIXTURES,
    TASKS,
    make,
)
from keras_attn import cli, models
from keras_attn.errors import UserError
from tests import fresh_process

pytestmark = pytest.mark.slow  # 47 folders, each loaded twice


def _files(root):
    return sorted(str(path.relative_to(root)) for path in root.rglob("*"))


@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
def test_a_broken_folder_is_refused_in_one_line_naming_the_file_and_the_value(
    case, tmp_path, capsys
):
    folder = make(case, tmp_path / "checkpoint")
    written = _files(tmp_path)
    with pytest.raises(ValueError) as error:
        getattr(models, TASKS[case.base]).from_preset(str(folder))
    message = str(error.value)
    assert isinstance(error.value, UserError) and "\n" not in message, message
    assert all(said in message for said in case.says), message
    out = tmp_path / "saved_models" / "imported"
    assert cli.main(["import", str(folder), str(out)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("keras-attn: error: ") and err.count("\n") == 1, err
    assert all(said in err for said in case.says), err
    assert _files(tmp_path) == written  # nothing made, nothing left behind


def test_there_are_cases_of_every_kind_the_loader_checks():
    kinds = [case.kind for case in CASES]
    assert len(CASES) >= 30 and {kind: kinds.count(kind) > 2 for kind in set(kinds)} == {
        "sizes": True,
        "weights": True,
        "files": True,
        "values": True,
    }


# In a process forked from one that imported TensorFlow alone: its peak memory and time are this
# load's.
MEASURED = """
import json, resource, sys, time
import keras_attn
from keras_attn import models
start, before = time.monotonic(), resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
try:
    getattr(models, sys.argv[2]).from_preset(sys.argv[1])
    ended = "loaded"
except ValueError as error:
    ended = str(error)
grown = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
print(json.dumps({"ended": ended, "seconds": time.monotonic() - start, "grown_mb": grown}))
"""


def _measured_load(folder, task):
    done = fresh_process.run(MEASURED, folder, task, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.splitlines()[-1])


SIZES = [case for case in CASES if case.kind == "sizes"]


@pytest.mark.parametrize("case", SIZES, ids=[case.name for case in SIZES])
def test_a_size_the_weights_do_not_hold_costs_neither_memory_nor_time(case, tmp_path):
    """Before the checks, each of these built for minutes or exhausted memory."""
    measured = _measured_load(make(case, tmp_path), TASKS[case.base])
    assert all(said in measured["ended"] for said in case.says), measured
    assert measured["grown_mb"] < 100 and measured["seconds"] < 20, measured


def _reference_outputs(model, task):
    if task == "Seq2SeqLM":
        return model.generate(["a b c"], max_length=6)
    backbone = getattr(model, "backbone", model)
    ids = np.array([[4, 9, 10, 11, 5]])
    return np.asarray(
        backbone({"token_ids": ids, "segment_ids": np.zeros_like(ids)})["pooled_output"]
    )


@pytest.mark.parametrize("fine", FINE, ids=[fine[0] for fine in FINE])
def test_a_fine_folder_of_another_shape_loads_with_the_references_weights(fine, tmp_path):
    name, base, _ = fine
    task = TASKS[base]
    folder = make(fine, tmp_path)
    if "2 GB" in name:  # its unknown tensor is never read: memory grows by the model's alone
        measured = _measured_load(folder, task)
        assert measured["ended"] == "loaded" and measured["grown_mb"] < 300, measured
        return
    model_class = getattr(models, task)
    unread = "unknown" in name
    with (
        pytest.warns(UserWarning, match=r"not read, not part of a BERT: 'extra\.note'")
        if unread
        else _no_unread_tensors()
    ):
        loaded = model_class.from_preset(str(folder))
    expected = _reference_outputs(model_class.from_preset(str(FIXTURES / BASES[base])), task)
    got = _reference_outputs(loaded, task)
    if task == "Seq2SeqLM":
        assert got == expected
    else:  # float16 weights round the reference's
        np.testing.assert_allclose(got, expected, atol=2e-2 if "16" in name else 1e-6)


@contextlib.contextmanager
def _no_unread_tensors():
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message=".*not read")
        yield


@pytest.mark.parametrize("name", FINE_FOLDER_NAMES)
def test_a_folder_named_with_spaces_or_other_letters_imports(name, tmp_path, capsys):
    folder = shutil.copytree(FIXTURES / "bert", tmp_path / name)
    out = tmp_path / "saved_models" / "bert"
    assert cli.main(["import", str(folder), str(out)]) == 0, capsys.readouterr().err
    assert (out / "1" / "saved_model.pb").is_file()
