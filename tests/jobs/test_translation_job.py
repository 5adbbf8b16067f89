"""The main job end to end through the CLI: train, export, translate, evaluate, plot."""

import dataclasses
import os

import pytest

from keras_attn import cli


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    root = tmp_path_factory.mktemp("job")
    argv = [
        "train", "transformer", "--builtin-size", "6000", "--epochs", "5",
        "--batch-size", "64", "--warmup-steps", "50",
        "--run-dir", str(root / "run"), "--export", str(root / "saved_models"),
        "--beam-width", "2",
    ]
    assert cli.main(argv) == 0
    return root


def test_the_job_learns_the_builtin_corpus_and_exports(trained, capsys):
    from keras_attn.jobs import translation

    result = translation.run(
        translation.TranslationConfig(
            builtin_size=6000, epochs=5, warmup_steps=50,
            run_dir=str(trained / "run"), export=False, beam_width=2, verbose=0,
        ),
        log=lambda *_: None,
    )
    # Resumed from the finished run: no training, the same learned model.
    assert result.history == {}
    # 470 steps from scratch: an untrained model scores BLEU ~0 and no exact
    # match. Three orders of the data (seeds) gave 15-32% exact match and
    # BLEU 35-62: the run stops on the steep part of the learning curve.
    assert result.metrics["exact_match"] >= 0.1
    assert result.metrics["bleu"] >= 30
    assert os.path.isfile(trained / "saved_models" / "transformer" / "1" / "saved_model.pb")


def test_cli_translates_evaluates_and_plots(trained, tmp_path, capsys):
    from pipelines import synthetic

    test = synthetic.translation_corpus(seed=0, train_size=6000)["test"]
    model_dir = str(trained / "saved_models" / "transformer" / "1")
    capsys.readouterr()
    assert cli.main(["translate", model_dir, test.sources[0], test.sources[1], "--beam-width", "1"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 2 and all(lines)

    (tmp_path / "src.txt").write_text("\n".join(test.sources[:40]) + "\n")
    (tmp_path / "ref.txt").write_text("\n".join(test.targets[:40]) + "\n")
    assert cli.main(["evaluate", model_dir, "--src", str(tmp_path / "src.txt"), "--ref", str(tmp_path / "ref.txt")]) == 0
    assert "BLEU" in capsys.readouterr().out

    out = tmp_path / "attention.png"
    assert cli.main(["plot-attention", model_dir, test.sources[0], "--out", str(out)]) == 0
    assert out.stat().st_size > 10_000


def test_bad_input_is_one_line_and_exit_code_2(tmp_path, capsys):
    (tmp_path / "a.txt").write_text("eins\nzwei\n")
    (tmp_path / "b.txt").write_text("one\n")
    code = cli.main(["train", "transformer", "--src", str(tmp_path / "a.txt"), "--tgt", str(tmp_path / "b.txt"),
                     "--run-dir", str(tmp_path / "run")])
    error = capsys.readouterr().err.strip()
    assert code == 2 and len(error.splitlines()) == 1
    assert "a.txt" in error and "b.txt" in error
    assert cli.main(["translate", str(tmp_path / "missing")]) == 2
    assert "not a SavedModel" in capsys.readouterr().err


def test_a_rerun_with_other_data_or_settings_is_refused(tmp_path):
    from keras_attn.errors import UserError
    from keras_attn.jobs import translation
    from pipelines import synthetic

    def start(config, train):  # what the job does before training
        translation.bind_run_folder(config, train)
        return translation.build_tokenizers(config, train)

    train = synthetic.translation_corpus(seed=0, train_size=300)["train"]
    config = translation.TranslationConfig(run_dir=str(tmp_path), vocab_size=200)
    learned = start(config, train)
    reused = start(dataclasses.replace(config, epochs=20), train)
    for old, new, texts in zip(learned, reused, (train.sources[:20], train.targets[:20])):
        assert new.tokenize(texts).to_list() == old.tokenize(texts).to_list()
    with pytest.raises(UserError, match="vocab_size 200 \\(now 300\\)"):
        start(dataclasses.replace(config, vocab_size=300), train)
    with pytest.raises(UserError, match="shared_vocab False \\(now True\\), preset tiny \\(now small\\)"):
        start(dataclasses.replace(config, shared_vocab=True, preset="small"), train)
    other = synthetic.translation_corpus(seed=1, train_size=300)["train"]
    with pytest.raises(UserError, match="other training data"):
        start(config, other)


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--epochs", "0"], "argument --epochs: must be >= 1, got 0"),
        (["--batch-size", "-1"], "argument --batch-size: must be >= 1, got -1"),
        (["--dropout", "1.5"], "argument --dropout: must be in [0, 1), got 1.5"),
        (["--learning-rate", "0"], "argument --learning-rate: must be > 0, got 0.0"),
        (["--beam-width", "two"], "argument --beam-width: not a whole number: 'two'"),
    ],
)
def test_bad_flag_values_are_refused_before_any_work(flags, message, capsys):
    with pytest.raises(SystemExit) as exit:
        cli.main(["train", "transformer", *flags])
    assert exit.value.code == 2
    assert message in capsys.readouterr().err


def test_a_savedmodel_that_is_not_ours_is_refused(tmp_path, capsys):
    import tensorflow as tf

    tf.saved_model.save(tf.Module(), str(tmp_path / "other"))
    assert cli.main(["translate", str(tmp_path / "other"), "hello"]) == 2
    error = capsys.readouterr().err.strip()
    assert len(error.splitlines()) == 1 and "not a keras-attn translation export" in error


def test_data_flags_without_their_partner_or_without_pairs_are_refused(tmp_path, capsys):
    (tmp_path / "a.txt").write_text("eins\nzwei\n")
    (tmp_path / "b.txt").write_text("one\ntwo\n")
    (tmp_path / "blank.tsv").write_text("\t\n  \t \n")
    pair = ["--src", str(tmp_path / "a.txt"), "--tgt", str(tmp_path / "b.txt")]
    for flags, message in [
        ([*pair, "--valid-src", str(tmp_path / "a.txt")], "--valid-src and --valid-tgt must be given together"),
        ([*pair, "--data", str(tmp_path / "blank.tsv")], "either as --data or as --src/--tgt"),
        (["--data", str(tmp_path / "blank.tsv")], "blank.tsv: no usable pairs (2 empty ones skipped)"),
    ]:
        code = cli.main(["train", "transformer", *flags, "--run-dir", str(tmp_path / "run")])
        error = capsys.readouterr().err.strip()
        assert code == 2 and len(error.splitlines()) == 1 and message in error, error
