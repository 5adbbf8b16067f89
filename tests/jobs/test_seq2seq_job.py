"""`keras-attn train seq2seq`: the translation job's spine with the RNN model."""

import contextlib
import io
import os
import sys

import numpy as np
import pytest

from keras_attn import cli
from keras_attn.config import Seq2SeqConfig
from keras_attn.errors import UserError
from keras_attn.jobs import translation


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """One small Luong run through the CLI, and the job's in-process result."""
    root = tmp_path_factory.mktemp("seq2seq")
    argv = [
        "train",
        "seq2seq",
        "--attention",
        "luong",
        "--cell",
        "gru",
        "--builtin-size",
        "640",
        "--epochs",
        "1",
        "--vocab-size",
        "200",
        "--beam-width",
        "2",
        "--precision",
        "float32",
        "--run-dir",
        str(root / "run"),
        "--export",
        str(root / "saved_models"),
    ]
    results = []
    with pytest.MonkeyPatch.context() as patch:
        run = translation.run
        patch.setattr(
            translation, "run", lambda *a, **k: results.append(run(*a, **k)) or results[-1]
        )
        printed = io.StringIO()
        with contextlib.redirect_stdout(printed):
            assert cli.main(argv) == 0
    return root, argv, results[0], printed.getvalue()


@pytest.mark.slow
def test_the_job_trains_evaluates_and_exports_the_rnn_model(trained, capsys):
    root, _, result, printed = trained
    decoder = result.model.backbone.decoder
    assert decoder.attention == "luong" and decoder.cell == "gru"
    assert result.steps == 10  # 627 training pairs at a global batch of 64
    assert f"exported to {root / 'saved_models' / 'seq2seq' / '1'}" in printed
    # The export translates as the job's in-process translator did (beam 2).
    source = result.samples[0][0]
    assert cli.main(["translate", result.export_path, source, "--beam-width", "2"]) == 0
    assert capsys.readouterr().out.strip() == result.samples[0][1]
    out = root / "plots" / "attention.png"
    assert cli.main(["plot-attention", result.export_path, source, "--out", str(out)]) == 0
    assert out.read_bytes()[:4] == b"\x89PNG"


@pytest.mark.slow
def test_the_run_folder_is_bound_to_its_model_settings(trained):
    root = trained[0]
    with pytest.raises(UserError, match=r"--attention luong \(now bahdanau\)"):
        translation.bind_run_folder(
            Seq2SeqConfig(
                run_dir=str(root / "run"),
                attention="bahdanau",
                cell="gru",
                vocabulary_size=200,
                builtin_size=640,
            ),
            translation.load_corpora(Seq2SeqConfig(builtin_size=640))["train"],
        )
    with pytest.raises(UserError, match=r"--scheduled-sampling None \(now linear\)"):
        translation.bind_run_folder(
            Seq2SeqConfig(
                run_dir=str(root / "run"),
                attention="luong",
                cell="gru",
                vocabulary_size=200,
                builtin_size=640,
                scheduled_sampling="linear",
            ),
            translation.load_corpora(Seq2SeqConfig(builtin_size=640))["train"],
        )


@pytest.mark.slow
def test_the_readmes_commands_run_one_after_another_with_their_names(trained, capsys):
    """A second variant in the same run folder is refused, and the
    advice (--name) gives it its own export.
    """
    root, argv, _, _ = trained
    bahdanau = [flag if flag != "luong" else "bahdanau" for flag in argv]
    assert cli.main(bahdanau) == 2
    error = capsys.readouterr().err.strip()
    assert error == (
        f"keras-attn: error: {root / 'run'} was started with other settings: --attention luong "
        "(now bahdanau); train under another --name (it names both the run folder, runs/<name>, "
        f"and the export), or delete {root / 'run'} to start over"
    )
    configs = []  # what the advice gives: its own run folder and export name
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(
            translation,
            "run",
            lambda config: (
                configs.append(config) or translation.TranslationResult(None, {}, [], {})
            ),
        )
        assert (
            cli.main(["train", "seq2seq", "--attention", "bahdanau", "--name", "seq2seq-bahdanau"])
            == 0
        )
    assert (configs[0].run_dir, configs[0].name) == (
        os.path.join("runs", "seq2seq-bahdanau"),
        "seq2seq-bahdanau",
    )


def test_model_flags_belong_to_their_job(capsys):
    with pytest.raises(SystemExit, match="2"):
        cli.main(["train", "transformer", "--attention", "luong", "--cell", "gru"])
    assert capsys.readouterr().err == (
        "keras-attn: error: train transformer: --attention, --cell: for train seq2seq, captioner "
        "only (see keras-attn train transformer --help)\n"
    )
    with pytest.raises(SystemExit):
        cli.main(["train", "seq2seq", "--attention", "dot"])
    assert "invalid choice: 'dot'" in capsys.readouterr().err
    with pytest.raises(UserError, match="--local must be one of monotonic, predictive"):
        Seq2SeqConfig(local="gaussian")


def test_scheduled_sampling_is_wired_into_model_and_runner():
    from keras_attn.training import ScheduledSampling

    config = Seq2SeqConfig(preset="tiny", scheduled_sampling="inverse_sigmoid")
    (callback,) = config.callbacks()
    assert isinstance(callback, ScheduledSampling)
    assert callback.schedule(0) == pytest.approx(500 / 501)  # ε starts near 1: teacher forcing
    assert callback.schedule(10_000) < 0.01
    from pipelines.preprocessors import TranslationPreprocessor
    from pipelines.tokenizers import SPECIAL_TOKENS, WordPieceTokenizer

    words = WordPieceTokenizer([*SPECIAL_TOKENS, "a", "b"])
    model = translation.build_task(
        config, TranslationPreprocessor(words, words, max_length=8), dropout=0.0
    )
    assert model.backbone.decoder.scheduled_sampling == "argmax"  # as the job builds it
    assert Seq2SeqConfig(preset="tiny").callbacks() == []


def test_the_cli_sets_the_decays_parameters_and_refuses_those_it_has_not(monkeypatch, capsys):
    from keras_attn.jobs import translation

    configs = []
    monkeypatch.setattr(
        translation, "run", lambda config, **_: configs.append(config) or sys.exit(0)
    )
    argv = [
        "train",
        "seq2seq",
        "--scheduled-sampling",
        "linear",
        "--decay-parameters",
        "c=1e-3",
        "minimum=0.5",
    ]
    with pytest.raises(SystemExit):
        cli.main(argv)
    (callback,) = configs[0].callbacks()
    assert configs[0].decay_parameters == {"c": 1e-3, "minimum": 0.5}
    assert callback.schedule(100) == pytest.approx(0.9) and callback.schedule(10_000) == 0.5
    for flags, message in [
        (
            ["--scheduled-sampling", "exponential", "--decay-parameters", "c=1"],
            "--scheduled-sampling: exponential decay has no parameter c; its parameters are k",
        ),
        (
            ["--decay-parameters", "k=2"],
            "--decay-parameters: a decay's parameters need --scheduled-sampling",
        ),
    ]:
        assert cli.main(["train", "seq2seq", *flags]) == 2
        assert capsys.readouterr().err.strip().endswith(message)
    with pytest.raises(SystemExit):
        cli.main(["train", "seq2seq", "--scheduled-sampling", "linear", "--decay-parameters", "k"])
    assert "expected NAME=NUMBER, got 'k'" in capsys.readouterr().err


def test_the_callback_drives_every_layer_with_a_sampling_probability():
    """Any layer with a `sampling_probability` weight, not only `AttentionDecoder`."""
    import keras

    from keras_attn.training import ScheduledSampling

    class Sampled(keras.layers.Layer):
        def build(self, shape):
            self.sampling_probability = self.add_weight(
                shape=(), initializer="zeros", trainable=False
            )

        def call(self, x):
            return x

    inputs = keras.Input((2,))
    model = keras.Model(inputs, keras.layers.Dense(1)(Sampled()(inputs)))
    model.compile("sgd", "mse")
    callback = ScheduledSampling(lambda step: 0.25)
    model.fit(np.zeros((4, 2)), np.zeros((4, 1)), epochs=1, verbose=0, callbacks=[callback])
    assert float(model.layers[1].sampling_probability.numpy()) == 0.75
