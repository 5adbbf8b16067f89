"""`keras-attn` commands run in-process: user mistakes, help, stdin, defaults."""

import io
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import types

import numpy as np
import pytest
from PIL import Image

from keras_attn import cli, config, serving
from keras_attn.models import Captioner
from keras_attn.serving.ctranslate2_export import PREPROCESSOR

pytest_plugins = ["tests.fixtures_export"]


@pytest.fixture(scope="module")
def paths(tmp_path_factory, tiny_export, tiny_captioner):
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
    # a translation export whose metadata names no test split (one made in Python)
    shutil.copytree(tiny_export, root / "unsplit")
    metadata = root / "unsplit" / "assets.extra" / "keras_attn.json"
    values = json.loads(metadata.read_text())
    metadata.write_text(json.dumps({k: v for k, v in values.items() if not k.startswith("test_")}))
    task, scenes, _ = tiny_captioner
    blind = serving.export(
        serving.CaptionServer(Captioner.from_preset("tiny", task.preprocessor, attention="none")),
        str(root / "exports"),
        "blind",
    )
    Image.fromarray(scenes.images[0]).save(root / "scene.png")
    Image.fromarray(scenes.images[1]).save(root / "other.png")
    (root / "scenes.tsv").write_text(
        f"scene.png\t{scenes.captions[0]}\nother.png\t{scenes.captions[1]}\n"
    )
    return types.SimpleNamespace(
        root=root,
        export=tiny_export,
        exports=os.path.dirname(tiny_export),
        captioner=tiny_captioner[2],
        blind=blind,
        scene_png=str(root / "scene.png"),
        scenes_tsv=str(root / "scenes.tsv"),
        **{
            name.replace(".", "_"): str(root / name)
            for name in (
                "two.txt",
                "one.txt",
                "empty.txt",
                "latin1.txt",
                "folder",
                "folder.png",
                "file",
                "garbage",
                "other",
                "unsplit",
                "missing",
            )
        },
    )


def _train(*flags, p, family="transformer"):
    return [
        "train",
        family,
        "--run-dir",
        str(p.root / "run"),
        "--export",
        str(p.root / "out"),
        *flags,
    ]


MISTAKES = {
    # train: data files
    "train: missing file": (
        lambda p: _train("--src", p.missing, "--tgt", p.one_txt, p=p),
        "missing: file not found",
    ),
    "train: empty folder of shards": (
        lambda p: _train("--src", p.folder, "--tgt", p.one_txt, p=p),
        "folder: a folder without files",
    ),
    "train: unequal files": (
        lambda p: _train("--src", p.two_txt, "--tgt", p.one_txt, p=p),
        "has 2 lines but",
    ),
    "train: empty data": (
        lambda p: _train("--data", p.empty_txt, p=p),
        "empty.txt: no usable pairs",
    ),
    "train: not UTF-8": (
        lambda p: _train("--src", p.latin1_txt, "--tgt", p.latin1_txt, p=p),
        "latin1.txt:1: invalid UTF-8",
    ),
    "train: half a pair": (
        lambda p: _train("--src", p.two_txt, p=p),
        "--src and --tgt must be given together",
    ),
    "export-ct2: not a run folder": (
        lambda p: ["export-ct2", p.folder, str(p.root / "ct2")],
        "folder: neither a run folder (no settings.json) nor an export (no saved_model.pb)",
    ),
    "train: preparing a corpus in memory": (
        lambda p: _train("--src", p.two_txt, "--tgt", p.two_txt, "--prepared", p.folder, p=p),
        "--prepared: the training data is read into memory",
    ),
    "train: averaging no epochs": (
        lambda p: _train("--average-epochs", "0", p=p),
        "--average-epochs: must be >= 1",
    ),
    "train: no such device": (
        lambda p: _train("--strategy", "mirrored", "--devices", "/gpu:9", p=p),
        "--devices /gpu:9: no such device here",
    ),
    "train: not a device": (
        lambda p: _train("--strategy", "one_device", "--devices", "gpu9", p=p),
        "--devices gpu9: not a device name",
    ),
    # train: output folders
    "train: run folder under a file": (
        lambda p: ["train", "transformer", "--run-dir", os.path.join(p.file, "run")],
        "(--run-dir): cannot be a folder",
    ),
    "train: export root under a file": (
        lambda p: [
            "train",
            "transformer",
            "--run-dir",
            str(p.root / "run"),
            "--export",
            os.path.join(p.file, "x"),
        ],
        "(--export): cannot be a folder",
    ),
    "train: export root where nothing can be written": (
        lambda p: [
            "train",
            "transformer",
            "--run-dir",
            str(p.root / "run"),
            "--export",
            "/proc/keras-attn",
        ],
        "/proc/keras-attn/transformer (--export): cannot write in /proc (",
    ),
    # argparse
    "train: bad flag value": (
        lambda p: ["train", "transformer", "--epochs", "0"],
        "train transformer: argument --epochs: must be >= 1, got 0 "
        "(see keras-attn train transformer --help)",
    ),
    "train: no family": (
        lambda p: ["train"],
        "train: the following arguments are required: FAMILY (see keras-attn train --help)",
    ),
    "train: unknown family": (
        lambda p: ["train", "transfomer", "--epochs", "2"],
        "train: argument FAMILY: invalid choice: 'transfomer'",
    ),
    "train: another family's flags": (
        lambda p: ["train", "transformer", "--cell", "gru", "--captions", p.one_txt],
        "train transformer: --cell, --captions: for train seq2seq, captioner only (see ",
    ),
    "train: supervising no attention": (
        lambda p: ["train", "captioner", "--attention", "none", "--attention-supervision", "1"],
        "--attention-supervision needs attention to supervise: --attention soft or hard",
    ),
    "train: supervision without regions": (
        lambda p: [
            "train",
            "captioner",
            "--attention-supervision",
            "1",
            "--data",
            str(p.root),
            "--captions",
            p.scenes_tsv,
            "--run-dir",
            str(p.root / "run"),
            "--no-export",
        ],
        "scenes.tsv: --attention-supervision, but no caption names the regions",
    ),
    "train: a Luong option with Bahdanau's attention": (
        lambda p: _train("--score", "dot", "--local", "monotonic", p=p, family="seq2seq"),
        "--score, --local: only for Luong's attention: --attention luong",
    ),
    "train: a window without local attention": (
        lambda p: _train("--attention", "luong", "--window", "3", p=p, family="seq2seq"),
        "--window: only for local attention: --local monotonic or predictive",
    ),
    "train: an estimator without hard attention": (
        lambda p: _train("--hard-estimator", "reinforce", p=p, family="captioner"),
        "--hard-estimator: only for hard attention: --attention hard",
    ),
    "train: export flags with --no-export": (
        lambda p: _train("--force-export", "--no-export", p=p),
        "--export, --force-export: not with --no-export, which exports nothing",
    ),
    "train: a name that is a path": (
        lambda p: _train("--name", "../../escape", p=p),
        "--name '../../escape': a model's folder name under the export root: letters, "
        "digits, '.', '_' and '-', starting with a letter or digit (what serve reads)",
    ),
    "train: misspelt flag": (
        lambda p: ["train", "seq2seq", "--atention", "luong"],
        "train seq2seq: unrecognized arguments: --atention luong; did you mean --attention?",
    ),
    "pretrain: negative NSP weight": (
        lambda p: ["pretrain", "bert", "--nsp-weight", "-1"],
        "must be >= 0, got -1.0 (see keras-attn pretrain --help)",
    ),
    "pretrain: mask rate of 1": (
        lambda p: ["pretrain", "bert", "--mask-rate", "1"],
        "must be in (0, 1), got 1.0 (see keras-attn pretrain --help)",
    ),
    "unknown command": (
        lambda p: ["trian"],
        "keras-attn: error: argument COMMAND: invalid choice: 'trian'",
    ),
    "translate: bad beam": (
        lambda p: ["translate", p.export, "x", "--beam-width", "0"],
        "must be in [1, 32], got 0",
    ),
    # translate: model folders
    "translate: missing model": (
        lambda p: ["translate", p.missing, "x"],
        "missing: no such folder",
    ),
    "translate: file as model": (
        lambda p: ["translate", p.file, "x"],
        "file: is a file, not an export folder",
    ),
    "translate: plain folder": (
        lambda p: ["translate", p.folder, "x"],
        "folder: not a SavedModel folder",
    ),
    "translate: model root": (
        lambda p: ["translate", p.exports, "x"],
        "not a SavedModel folder (no saved_model.pb); its versions: 1",
    ),
    "translate: another model": (
        lambda p: ["translate", p.other, "x"],
        "not a keras-attn translation export",
    ),
    "translate: corrupt model": (
        lambda p: ["translate", p.garbage, "x"],
        "garbage: cannot be loaded as a SavedModel",
    ),
    # evaluate
    "evaluate: missing file": (
        lambda p: ["evaluate", p.export, "--src", p.missing, "--ref", p.one_txt],
        "missing: file not found",
    ),
    "evaluate: folder as file": (
        lambda p: ["evaluate", p.export, "--src", p.folder, "--ref", p.one_txt],
        "is a directory",
    ),
    "evaluate: half a pair": (
        lambda p: ["evaluate", p.export, "--src", p.two_txt],
        "--src and --ref must be given together",
    ),
    "evaluate: empty files": (
        lambda p: ["evaluate", p.export, "--src", p.empty_txt, "--ref", p.empty_txt],
        "no sentences to score",
    ),
    "evaluate: unequal files": (
        lambda p: ["evaluate", p.export, "--src", p.two_txt, "--ref", p.one_txt],
        "has 2 lines but",
    ),
    "evaluate: not UTF-8": (
        lambda p: ["evaluate", p.export, "--src", p.latin1_txt, "--ref", p.latin1_txt],
        "invalid UTF-8",
    ),
    "evaluate: no test split known": (
        lambda p: ["evaluate", p.unsplit],
        "names no test split of its run; give --src and --ref",
    ),
    "evaluate: another model, said first": (
        lambda p: ["evaluate", p.other],
        "not a keras-attn translation export (no translate/attention signatures)",
    ),
    "evaluate: missing model": (lambda p: ["evaluate", p.missing], "missing: no such folder"),
    # export-ct2
    "export-ct2: missing model": (
        lambda p: ["export-ct2", p.missing, str(p.root / "out")],
        "missing: neither a run folder",
    ),
    "export-ct2: another model": (
        lambda p: ["export-ct2", p.other, str(p.root / "out")],
        "no translator_task.json in assets.extra (not a translation export of keras-attn",
    ),
    "export-ct2: existing OUT": (
        lambda p: ["export-ct2", p.export, p.folder],
        "folder already exists (--force replaces it)",
    ),
    "export-ct2: OUT where nothing can be written": (
        lambda p: ["export-ct2", p.export, "/proc/keras-attn-ct2"],
        "/proc/keras-attn-ct2 (OUT): cannot write in /proc (",
    ),
    # caption
    "caption: not an image": (
        lambda p: ["caption", p.captioner, p.two_txt],
        "two.txt: not a readable PNG, JPEG, GIF or BMP image (an empty line printed)",
    ),
    "caption: folder as image": (
        lambda p: ["caption", p.captioner, p.folder],
        "folder: is a folder, not an image file",
    ),
    "serve: a file for the root": (
        lambda p: ["serve", p.one_txt],
        "one.txt: a file, not a folder (the exports to serve",
    ),
    "serve: a version for the root": (
        lambda p: ["serve", p.export],
        "1: one export's version, not a root of exports (<name>/<version>/): give the "
        "folder two levels above it",
    ),
    "export-ct2: an empty OUT": (
        lambda p: ["export-ct2", p.export, ""],
        "an empty output folder's name: give the folder to write (such as ct2/<name>)",
    ),
    "serve: no such port": (
        lambda p: ["serve", p.folder, "--port", "70000"],
        "--port: must be in [0, 65535], got 70000",
    ),
    "translate: a beam too wide": (
        lambda p: ["translate", p.export, "ein hund", "--beam-width", "33"],
        "--beam-width: must be in [1, 32], got 33",
    ),
    "fill-mask: too many candidates": (
        lambda p: ["fill-mask", p.folder, "x", "--top-k", "51"],
        "--top-k: must be in [1, 50], got 51",
    ),
    # plot-attention
    "plot: unknown image suffix": (
        lambda p: ["plot-attention", p.export, "ein hund", "--out", str(p.root / "a.xyz")],
        "not an image name",
    ),
    "plot: folder as image": (
        lambda p: ["plot-attention", p.export, "ein hund", "--out", p.folder],
        "not an image name",
    ),
    "plot: empty text": (
        lambda p: ["plot-attention", p.export, " ", "--out", str(p.root / "a.png")],
        "nothing to plot: the text is empty",
    ),
    "plot: invisible text": (
        lambda p: ["plot-attention", p.export, "\u200b", "--out", str(p.root / "a.png")],
        "no tokens the model reads",
    ),
    "plot: image under a file": (
        lambda p: ["plot-attention", p.export, "ein hund", "--out", os.path.join(p.file, "a.png")],
        "cannot be written",
    ),
    "plot: image path is a folder": (
        lambda p: ["plot-attention", p.export, "ein hund", "--out", p.folder_png],
        "cannot be written",
    ),
    "plot: missing model": (
        lambda p: ["plot-attention", p.missing, "ein hund"],
        "missing: no such folder",
    ),
    "plot: captioner without attention": (
        lambda p: ["plot-attention", p.blind, p.scene_png, "--out", str(p.root / "a.png")],
        "blind/1: a captioner without attention",
    ),
}


@pytest.mark.parametrize("mistake", MISTAKES)
@pytest.mark.slow
def test_every_command_answers_a_mistake_in_one_line(mistake, paths, cli_loads_once, capsys):
    argv, message = MISTAKES[mistake]
    try:
        code = cli.main(argv(paths))  # an uncaught exception fails the test with its traceback
    except SystemExit as exit:  # argparse
        code = exit.code
    error = capsys.readouterr().err
    assert code == 2, error
    assert (
        error.startswith("keras-attn: error: ") and error.count("\n") == 1 and error.endswith("\n")
    ), error
    assert message in error, error
    assert not (paths.root / "run").exists() and not (paths.root / "out").exists()


@pytest.mark.parametrize(
    "tf_config", ['{"cluster": {"worker": ["a:1"]}, task: 0}', ""], ids=["not JSON", "empty"]
)
def test_a_tf_config_that_is_not_json_is_one_line(tf_config, paths, monkeypatch, capsys):
    monkeypatch.setenv("TF_CONFIG", tf_config)
    assert cli.main(_train("--strategy", "multi_worker", p=paths)) == 2
    error = capsys.readouterr().err
    assert (
        error.startswith("keras-attn: error: TF_CONFIG is not valid JSON (")
        and len(error.splitlines()) == 1
    )


@pytest.mark.parametrize(
    "tf_config, message",
    [
        ("[1, 2]", 'TF_CONFIG must be a JSON object with "cluster" and "task", got [1, 2]'),
        (
            '{"cluster": {"worker": ["localhost:1"]}}',
            'must name this process\'s place in its "cluster": a type among '
            "['worker'] and an index, got None",
        ),
        (
            '{"cluster": {"worker": ["localhost:1"]}, "task": {"type": "worker", "index": 5}}',
            "worker has indexes 0 to 0, got 5",
        ),
        (
            '{"cluster": {"worker": "localhost:1"}, "task": {"type": "worker", "index": 0}}',
            '"cluster" must map task types to lists of host:port',
        ),
    ],
    ids=["not an object", "no task", "index out of range", "hosts not a list"],
)
def test_a_tf_config_tensorflow_would_fail_on_is_one_line(
    tf_config, message, paths, monkeypatch, capsys
):
    monkeypatch.setenv("TF_CONFIG", tf_config)
    assert cli.main(_train("--strategy", "multi_worker", p=paths)) == 2
    error = capsys.readouterr().err
    assert error.startswith("keras-attn: error: TF_CONFIG") and len(error.splitlines()) == 1, error
    assert message in error, error


def test_serve_on_a_taken_port_or_an_unknown_host_is_one_line(paths, capsys):
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        assert cli.main(["serve", paths.folder, "--port", str(port)]) == 2
        error = capsys.readouterr().err
        assert error == (
            f"keras-attn: error: 127.0.0.1:{port}: cannot listen there (Address already in use)\n"
        )
    assert cli.main(["serve", paths.folder, "--host", "999.1.1.1"]) == 2
    error = capsys.readouterr().err
    assert (
        error.startswith("keras-attn: error: 999.1.1.1:8501: cannot listen there (")
        and error.count("\n") == 1
    )


def test_a_damaged_export_or_ctranslate2_model_is_one_line(paths, cli_loads_once, tmp_path, capsys):
    damaged = tmp_path / "damaged"
    shutil.copytree(paths.export, damaged)
    (data,) = (damaged / "variables").glob("variables.data-*")
    data.write_bytes(data.read_bytes()[: data.stat().st_size // 2])
    assert cli.main(["export-ct2", str(damaged), str(tmp_path / "ct2")]) == 2
    error = capsys.readouterr().err
    assert (
        error.startswith(f"keras-attn: error: {damaged}: its variables cannot be read (")
        and error.count("\n") == 1
    )
    assert not (tmp_path / "ct2").exists()

    assert cli.main(["export-ct2", paths.export, str(tmp_path / "ct2")]) == 0
    capsys.readouterr()
    # a whole CTranslate2 model, only the files to score missing
    assert cli.main(["evaluate", str(tmp_path / "ct2")]) == 2
    assert capsys.readouterr().err == (
        f"keras-attn: error: {tmp_path / 'ct2'}: a CTranslate2 model, which names no test split; "
        "give --src and --ref\n"
    )
    model = tmp_path / "ct2" / "model.bin"
    model.write_bytes(model.read_bytes()[:1000])
    capsys.readouterr()
    assert cli.main(["translate", str(tmp_path / "ct2"), "ein hund"]) == 2
    error = capsys.readouterr().err
    assert error.startswith(
        f"keras-attn: error: {tmp_path / 'ct2'}: not a readable CTranslate2 model ("
    )
    assert error.count("\n") == 1, error

    preprocessor = tmp_path / "ct2" / PREPROCESSOR
    preprocessor.write_text(preprocessor.read_text()[:100])
    assert cli.main(["translate", str(tmp_path / "ct2"), "ein hund"]) == 2
    error = capsys.readouterr().err
    assert error.startswith(
        f"keras-attn: error: {preprocessor}: not a readable keras-attn preprocessor ("
    )
    assert error.count("\n") == 1, error


def test_a_closed_output_pipe_ends_quietly(tiny_export, cli_loads_once, monkeypatch, capsys):
    def closed(*args, **kwargs):
        raise BrokenPipeError(32, "Broken pipe")

    monkeypatch.setattr("builtins.print", closed)
    assert cli.main(["translate", tiny_export, "ein hund"]) == 141


def _help(argv, capsys):
    with pytest.raises(SystemExit):
        cli.main([*argv, "--help"])
    return capsys.readouterr().out


def test_help_shows_defaults_and_describes_every_argument(capsys):
    parser = cli.build_parser()
    commands = dict(parser._subparsers._group_actions[0].choices)
    families = commands["train"]._subparsers._group_actions[0].choices
    commands.update(
        {f"train {family}": family_parser for family, family_parser in families.items()}
    )
    for name, command in commands.items():
        for action in command._actions:
            assert action.help, f"{name} {action.option_strings or action.dest} has no help text"
    text = " ".join(_help(["train", "transformer"], capsys).split())
    for shown in (
        "--epochs EPOCHS passes over the training data, those of a resumed run included "
        "(default: 8)",
        "--preset {tiny,small,base} model size: tiny (2+2 layers, width 128), small (3+3, 256), "
        "base (6+6, 512: the paper's) (default: tiny)",
        "examples per replica (default: 64;",
        "built-in corpus (default: 20000)",
        "(default: auto)",
        "(default: 0.1)",
        "--data DATA training pairs as TSV, source<TAB>target: a file, or shards as --src",
    ):
        assert shown in text
    assert "default: None" not in text and "default: False" not in text
    text = " ".join(_help(["train", "captioner"], capsys).split())
    assert "--data FOLDER the folder of the images that --captions names" in text
    assert "passes over the training data, those of a resumed run included (default: 10)" in text
    text = " ".join(_help(["train"], capsys).split())
    assert all(family in text for family in ("transformer", "seq2seq", "captioner"))


@pytest.mark.parametrize("family", cli.TRAIN_JOBS)
def test_each_train_family_lists_its_own_flags_only(family, capsys):
    """`train FAMILY --help`: its config's flags, each once, and no other family named."""
    text = _help(["train", family], capsys)
    listed = re.findall(r"^  (--?[\w-]+)", text, flags=re.M)
    own = [config.flag_name(field) for field, _ in config.flags(cli.TRAIN_JOBS[family])]
    assert sorted(listed) == sorted(["-h", *own])
    others = [other for other in cli.TRAIN_JOBS if other != family]
    assert not re.search(rf"\b({'|'.join(others)})\b", text.replace(f"train {family}", "")), text


def test_train_takes_its_family_anywhere():
    parse = cli.build_parser().parse_args
    for argv in (
        ["train", "seq2seq", "--epochs", "2", "--attention", "luong"],
        ["train", "--epochs", "2", "seq2seq", "--attention", "luong"],
        ["train", "--epochs", "2", "--attention", "luong", "seq2seq"],
    ):
        parsed = parse(argv)
        assert (parsed.job, parsed.epochs, parsed.attention) == ("seq2seq", 2, "luong"), argv
    parsed = parse(["train", "--name", "transformer", "seq2seq"])  # a flag's value is no family
    assert (parsed.job, parsed.name) == ("seq2seq", "transformer")


@pytest.mark.slow
def test_translate_keeps_empty_lines_from_stdin(
    tiny_export, tiny_translator, cli_loads_once, monkeypatch, capsys
):
    lines = [b"ein hund", b"", b"   ", b"der mann isst"]
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"\n".join(lines) + b"\n")))
    assert cli.main(["translate", tiny_export, "--beam-width", "1"]) == 0
    printed = capsys.readouterr().out.split("\n")[:-1]
    result = tiny_translator.translate(np.array(lines, dtype=object), np.int32(1))
    assert printed == [t.decode("utf-8") for t in result["translation"].numpy()]
    # Empty lines give "" with score 0; the others were searched (an untrained
    # model may still say nothing, but a search always scores below 0).
    scores = result["score"].numpy()
    assert printed[1] == printed[2] == "" and scores[1] == scores[2] == 0.0
    assert np.all(scores[[0, 3]] < 0)

    assert cli.main(["translate", tiny_export, "", "ein hund"]) == 0
    assert capsys.readouterr().out.split("\n")[0] == ""


def test_translate_refuses_invalid_utf8_on_stdin_as_evaluate_does_in_a_file(
    tiny_export, paths, cli_loads_once, monkeypatch, capsys
):
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"ein hund\ngr\xfc\xdfe\n")))
    assert cli.main(["translate", tiny_export]) == 2
    printed = capsys.readouterr()
    assert (
        printed.err == "keras-attn: error: <stdin>:2: invalid UTF-8 (byte 0xfc at column 3)\n"
        and not printed.out
    )
    assert (
        cli.main(["evaluate", tiny_export, "--src", paths.latin1_txt, "--ref", paths.latin1_txt])
        == 2
    )
    refused = f"keras-attn: error: {paths.latin1_txt}:1: invalid UTF-8 (byte 0xfc at column 3)\n"
    assert capsys.readouterr().err == refused
    # An argument's bytes reach Python as surrogate escapes.
    assert cli.main(["translate", tiny_export, "ein hund", "gr\udcfc\udcdfe"]) == 2
    printed = capsys.readouterr()
    assert printed.err == "keras-attn: error: argument 2: invalid UTF-8 (byte 0xfc at column 3)\n"
    assert not printed.out


def test_export_ct2_replaces_an_existing_out_with_force_only_a_ctranslate2_folder(
    tiny_export, tmp_path, capsys, monkeypatch
):
    out = tmp_path / "ct2"
    assert cli.main(["export-ct2", tiny_export, str(out)]) == 0
    assert cli.main(["export-ct2", tiny_export, str(out)]) == 2
    assert (
        capsys.readouterr().err
        == f"keras-attn: error: {out} already exists (--force replaces it)\n"
    )
    (out / "model.bin").write_bytes(b"old")
    assert cli.main(["export-ct2", tiny_export, str(out), "--force"]) == 0
    assert (out / "model.bin").read_bytes() != b"old"
    assert sorted(os.listdir(tmp_path)) == ["ct2"]  # nothing left beside it
    # Anything else stays as it is: a folder of other files, the
    # export itself, a folder holding the current one.
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "mine.txt").write_text("kept")
    capsys.readouterr()
    for target in (notes, tiny_export):
        assert cli.main(["export-ct2", tiny_export, str(target), "--force"]) == 2
        assert capsys.readouterr().err == (
            f"keras-attn: error: {target}: not a CTranslate2 model folder (no "
            "model.bin), which is all --force replaces\n"
        )
    assert (notes / "mine.txt").read_text() == "kept" and os.path.isfile(
        os.path.join(tiny_export, "saved_model.pb")
    )
    monkeypatch.chdir(out / "..")
    assert cli.main(["export-ct2", tiny_export, ".", "--force"]) == 2
    monkeypatch.chdir(out)
    assert cli.main(["export-ct2", tiny_export, ".", "--force"]) == 2
    assert capsys.readouterr().err.splitlines()[-1] == (
        "keras-attn: error: .: holds the current folder, so it cannot be replaced"
    )
    assert (out / "model.bin").is_file() and (notes / "mine.txt").read_text() == "kept"


@pytest.mark.slow
def test_a_mistake_is_one_line_in_a_new_process(tmp_path):
    """What the user sees: standard error as the command left it
    (TensorFlow's start-up lines held back).
    """
    for argv in (
        ["translate", str(tmp_path / "missing"), "ein hund"],
        ["train", "transformer", "--epoch", "3"],
    ):
        out = subprocess.run(
            [sys.executable, "-m", "keras_attn.cli", *argv],
            capture_output=True,
            text=True,
            cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
            env={k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"},
        )
        assert out.returncode == 2 and not out.stdout, out
        assert out.stderr.startswith("keras-attn: error: ") and out.stderr.count("\n") == 1, (
            out.stderr
        )


def test_evaluate_defaults_to_the_test_split_of_the_run(
    tiny_export, tiny_translator, cli_loads_once, capsys
):
    from keras_attn import evaluation
    from tests.fixtures_export import SOURCES, TARGETS

    assert cli.main(["evaluate", tiny_export, "--beam-width", "1"]) == 0
    printed = capsys.readouterr().out.splitlines()
    out = tiny_translator.translate(np.array(SOURCES, dtype=object), np.int32(1))[
        "translation"
    ].numpy()
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
        f"BLEU on the text as tokenized: {tokenized['bleu_tokenized']:.2f} (signature: "
        "nrefs:1|case:mixed|eff:no|tok:none|smooth:none|version:"
        + tokenized["bleu_tokenized_signature"].split("version:")[1]
        + ")"
    )


def test_plot_attention_creates_missing_folders(tiny_export, cli_loads_once, tmp_path, capsys):
    out = tmp_path / "missing" / "dir" / "attention.png"
    assert cli.main(["plot-attention", tiny_export, "ein hund läuft .", "--out", str(out)]) == 0
    assert out.read_bytes()[:4] == b"\x89PNG"
    assert capsys.readouterr().out.splitlines()[-1].startswith(f"wrote {out} (")
