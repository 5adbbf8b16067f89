"""Each SavedModel folder loaded once per test run by the CLI's commands, for the test modules that ask.

Use with `pytest_plugins = ["tests.fixtures_cli"]` in a test module.
"""

import os

import pytest

_LOADED = {}


@pytest.fixture
def cli_loads_saved_models_once(monkeypatch):
    """Makes `keras_attn.cli` load each SavedModel folder once per test run (loading costs seconds); returns
    the loader, so that a test reads an export as the commands do.

    Refusals are not cached: a folder that fails to load fails every time. What a command checks after
    loading (its signatures, the files beside the SavedModel) it checks every time.
    """
    from keras_attn import cli

    real = cli._load_saved_model

    def load(model_dir):
        key = os.path.realpath(model_dir)
        if key not in _LOADED:
            _LOADED[key] = real(model_dir)
        return _LOADED[key]

    monkeypatch.setattr(cli, "_load_saved_model", load)
    return load
