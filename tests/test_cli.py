"""`keras-attn` commands run in-process: user mistakes, help, stdin, defaults."""

import io
import os
import sys
import types

import numpy as np
import pytest

from keras_attn import cli

pytest_plugins = ["tests.fixtures_export"]


@pytest.fixture(scope="module")
def paths(tmp_path_factory, tiny_export):
    """Files and folders of the kinds users give by mistake."""
    import tensorflow as tf

    root = tmp_path_factory.mktemp("mistakes")
    (root / "two.txt").write_text("eins\nzwei\n")
    (root / "one.txt").write_text("one\n")
    (root / "empty.txt").write_text("")
    (root / "latin1.txt").write_bytes(b"gr\xfc\xdfe\n")
    (root / "folder").mkdir()
    (root / "folder.png").mkdir()
    (root / "file").write_text("not a folder\n")
    (root / "garbage").mkdir()
    (root / "garbage" / "saved_model.pb").write_bytes(b"\x00 not a protocol buffer \xff" * 10)
    tf.saved_model.save(tf.Module(), str(root / "other"))
    return types.SimpleNamespace(
        root=root, export=tiny_export, exports=os.path.dirname(tiny_export),
        **{name.replace(".", "_"): str(root / name) for name in (
            "two.txt", "one.txt", "empty.txt", "latin1.txt", "folder", "folder.png", "file",
            "garbage", "other", "missing",
        )},
    )


def _train(*flags, p):
    return ["train", "transformer", "--run-dir", str(p.root / "run"), "--export", str(p.root / "out"), *flags]


MISTAKES = {
    # train: data files
    "train: missing file": (lambda p: _train("--src", p.missing, "--tgt", p.one_txt, p=p), "missing: file not found"),
    "train: empty folder of shards": (lambda p: _train("--src", p.folder, "--tgt", p.one_txt, p=p),
                                      "folder: a folder without files"),
    "train: unequal files": (lambda p: _train("--src", p.two_txt, "--tgt", p.one_txt, p=p), "has 2 lines but"),
    "train: empty data": (lambda p: _train("--data", p.empty_txt, p=p), "empty.txt: no usable pairs"),
    "train: not UTF-8": (lambda p: _train("--src", p.latin1_txt, "--tgt", p.latin1_txt, p=p), "latin1.txt:1: invalid UTF-8"),
    "train: half a pair": (lambda p: _train("--src", p.two_txt, p=p), "--src and --tgt must be given together"),
    "export-ct2: not a run folder": (lambda p: ["export-ct2", p.folder, str(p.root / "ct2")],
                                     "folder: neither a run folder (no settings.json) nor an export (no saved_model.pb)"),
    "train: preparing a corpus in memory": (lambda p: _train("--src", p.two_txt, "--tgt", p.two_txt, "--prepared",
                                                             p.folder, p=p), "--prepared: the training data is read into memory"),
    "train: averaging no epochs": (lambda p: _train("--average-epochs", "0", p=p), "--average-epochs: must be >= 1"),
    "train: no such device": (lambda p: _train("--strategy", "mirrored", "--devices", "/gpu:9", p=p), "--devices /gpu:9: no such device here"),
    "train: not a device": (lambda p: _train("--strategy", "one_device", "--devices", "gpu9", p=p), "--devices gpu9: not a device name"),
    # train: output folders
    "train: run folder under a file": (
        lambda p: ["train", "transformer", "--run-dir", os.path.join(p.file, "run")], "(--run-dir): cannot be a folder"),
    "train: export root under a file": (
        lambda p: ["train", "transformer", "--run-dir", str(p.root / "run"), "--export", os.path.join(p.file, "x")],
        "(--export): cannot be a folder"),
    # argparse
    "train: bad flag value": (lambda p: ["train", "transformer", "--epochs", "0"], "must be >= 1, got 0 (see keras-attn train --help)"),
    "pretrain: negative NSP weight": (lambda p: ["pretrain", "bert", "--nsp-weight", "-1"],
                                      "must be >= 0, got -1.0 (see keras-attn pretrain --help)"),
    "pretrain: mask rate of 1": (lambda p: ["pretrain", "bert", "--mask-rate", "1"],
                                 "must be in (0, 1), got 1.0 (see keras-attn pretrain --help)"),
    "unknown command": (lambda p: ["trian"], "invalid choice: 'trian'"),
    "translate: bad beam": (lambda p: ["translate", p.export, "x", "--beam-width", "0"], "must be >= 1"),
    # translate: model folders
    "translate: missing model": (lambda p: ["translate", p.missing, "x"], "missing: no such folder"),
    "translate: file as model": (lambda p: ["translate", p.file, "x"], "file: is a file, not an export folder"),
    "translate: plain folder": (lambda p: ["translate", p.folder, "x"], "folder: not a SavedModel folder"),
    "translate: model root": (lambda p: ["translate", p.exports, "x"], "not a SavedModel folder (no saved_model.pb); its versions: 1"),
    "translate: another model": (lambda p: ["translate", p.other, "x"], "not a keras-attn translation export"),
    "translate: corrupt model": (lambda p: ["translate", p.garbage, "x"], "garbage: cannot be loaded as a SavedModel"),
    # evaluate
    "evaluate: missing file": (lambda p: ["evaluate", p.export, "--src", p.missing, "--ref", p.one_txt], "missing: file not found"),
    "evaluate: folder as file": (lambda p: ["evaluate", p.export, "--src", p.folder, "--ref", p.one_txt], "is a directory"),
    "evaluate: half a pair": (lambda p: ["evaluate", p.export, "--src", p.two_txt], "--src and --ref must be given together"),
    "evaluate: empty files": (lambda p: ["evaluate", p.export, "--src", p.empty_txt, "--ref", p.empty_txt], "no sentences to score"),
    "evaluate: unequal files": (lambda p: ["evaluate", p.export, "--src", p.two_txt, "--ref", p.one_txt], "has 2 lines but"),
    "evaluate: not UTF-8": (lambda p: ["evaluate", p.export, "--src", p.latin1_txt, "--ref", p.latin1_txt], "invalid UTF-8"),
    "evaluate: no test split known": (lambda p: ["evaluate", p.other], "names no test split of its run; give --src and --ref"),
    "evaluate: missing model": (lambda p: ["evaluate", p.missing], "missing: no such folder"),
    # export-ct2
    "export-ct2: missing model": (lambda p: ["export-ct2", p.missing, str(p.root / "out")], "missing: neither a run folder"),
    "export-ct2: another model": (lambda p: ["export-ct2", p.other, str(p.root / "out")],
                                  "no translator_task.json in assets.extra (not a translation export of keras-attn"),
    # plot-attention
    "plot: unknown image suffix": (lambda p: ["plot-attention", p.export, "ein hund", "--out", str(p.root / "a.xyz")], "not an image name"),
    "plot: folder as image": (lambda p: ["plot-attention", p.export, "ein hund", "--out", p.folder], "not an image name"),
    "plot: empty text": (lambda p: ["plot-attention", p.export, " ", "--out", str(p.root / "a.png")], "nothing to plot: the text is empty"),
    "plot: invisible text": (lambda p: ["plot-attention", p.export, "\u200b", "--out", str(p.root / "a.png")], "no tokens the model reads"),
    "plot: image under a file": (
        lambda p: ["plot-attention", p.export, "ein hund", "--out", os.path.join(p.file, "a.png")], "cannot be written"),
    "plot: image path is a folder": (lambda p: ["plot-attention", p.export, "ein hund", "--out", p.folder_png], "cannot be written"),
    "plot: missing model": (lambda p: ["plot-attention", p.missing, "ein hund"], "missing: no such folder"),
}


@pytest.mark.parametrize("mistake", MISTAKES)
def test_every_command_answers_a_mistake_in_one_line(mistake, paths, cli_loads_once, capsys):
    argv, message = MISTAKES[mistake]
    try:
        code = cli.main(argv(paths))  # an uncaught exception fails the test with its traceback
    except SystemExit as exit:  # argparse
        code = exit.code
    error = capsys.readouterr().err
    assert code == 2, error
    assert len(error.strip().splitlines()) == 1 and error.startswith("keras-attn"), error
    assert message in error, error
    assert not (paths.root / "run").exists() and not (paths.root / "out").exists()


def test_a_tf_config_that_is_not_json_is_one_line(paths, monkeypatch, capsys):
    monkeypatch.setenv("TF_CONFIG", '{"cluster": {"worker": ["a:1"]}, task: 0}')
    assert cli.main(_train("--strategy", "multi_worker", p=paths)) == 2
    error = capsys.readouterr().err
    assert error.startswith("keras-attn: error: TF_CONFIG is not valid JSON (") and len(error.splitlines()) == 1


def test_a_closed_output_pipe_ends_quietly(tiny_export, cli_loads_once, monkeypatch, capsys):
    def closed(*args, **kwargs):
        raise BrokenPipeError(32, "Broken pipe")

    monkeypatch.setattr("builtins.print", closed)
    assert cli.main(["translate", tiny_export, "ein hund"]) == 141


def test_help_shows_defaults_and_describes_every_argument(capsys):
    parser = cli.build_parser()
    commands = parser._subparsers._group_actions[0].choices
    for name, command in commands.items():
        for action in command._actions:
            assert action.help, f"{name} {action.option_strings or action.dest} has no help text"
    with pytest.raises(SystemExit):
        cli.main(["train", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    for shown in ("--epochs EPOCHS passes over the training data, those of a resumed run included (default: 8 for "
                  "transformer, 8 for seq2seq, 10 for captioner)", "(default: tiny); captioner: tiny (encoder", "transformer, seq2seq: examples per replica (default: 64;",
                  "built-in corpus (default: 20000)", "(default: auto)", "(default: 0.1)",
                  "transformer, seq2seq: training pairs as TSV, source<TAB>target: a file, or shards as --src; "
                  "captioner: the folder of "
                  "the images that --captions names"):
        assert shown in text
    assert "default: None" not in text and "default: False" not in text


def test_translate_keeps_empty_and_invalid_lines_from_stdin(tiny_export, tiny_translator, cli_loads_once,
                                                             monkeypatch, capsys):
    lines = [b"ein hund", b"\xff\xfe kaputt", b"", b"   ", "der mann isst".encode()]
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"\n".join(lines) + b"\n")))
    assert cli.main(["translate", tiny_export, "--beam-width", "1"]) == 0
    printed = capsys.readouterr().out.split("\n")[:-1]
    result = tiny_translator.translate(np.array(lines, dtype=object), np.int32(1))
    assert printed == [t.decode("utf-8") for t in result["translation"].numpy()]
    # Empty lines give "" with score 0; the others were searched (an untrained
    # model may still say nothing, but a search always scores below 0).
    scores = result["score"].numpy()
    assert printed[2] == printed[3] == "" and scores[2] == scores[3] == 0.0
    assert np.all(scores[[0, 1, 4]] < 0)

    assert cli.main(["translate", tiny_export, "", "ein hund"]) == 0
    assert capsys.readouterr().out.split("\n")[0] == ""


def test_evaluate_defaults_to_the_test_split_of_the_run(tiny_export, tiny_translator, cli_loads_once, capsys):
    from keras_attn import evaluation
    from tests.fixtures_export import SOURCES, TARGETS

    assert cli.main(["evaluate", tiny_export, "--beam-width", "1"]) == 0
    printed = capsys.readouterr().out.splitlines()
    out = tiny_translator.translate(np.array(SOURCES, dtype=object), np.int32(1))["translation"].numpy()
    scores = evaluation.translation_scores([t.decode() for t in out], TARGETS)
    assert printed[0] == evaluation.format_scores(scores)
    assert printed[0].startswith("exact match 0.0%, BLEU ") and ", chrF " in printed[0]
    assert printed[1].startswith("BLEU signature: nrefs:1|case:mixed|")
    assert printed[2].startswith("tokenized lowercased BLEU signature: nrefs:1|case:lc|")
    assert printed[3].startswith("chrF signature: nrefs:1|case:mixed|") and "nc:6" in printed[3]
    assert len(printed) == 4

    assert cli.main(["evaluate", tiny_export, "--beam-width", "1", "--tokenized"]) == 0
    tokenized = evaluation.tokenized_bleu([t.decode() for t in out], TARGETS)
    assert capsys.readouterr().out.splitlines()[4] == (
        f"BLEU on the text as tokenized: {tokenized['bleu_tokenized']:.2f} (signature: nrefs:1|case:mixed|eff:no|"
        "tok:none|smooth:none|version:" + tokenized["bleu_tokenized_signature"].split("version:")[1] + ")")


def test_plot_attention_creates_missing_folders(tiny_export, cli_loads_once, tmp_path, capsys):
    out = tmp_path / "missing" / "dir" / "attention.png"
    assert cli.main(["plot-attention", tiny_export, "ein hund läuft .", "--out", str(out)]) == 0
    assert out.read_bytes()[:4] == b"\x89PNG"
    assert capsys.readouterr().out.splitlines()[-1].startswith(f"wrote {out} (")
