"""The BERT jobs end to end through the CLI: pretrain, export, fill-mask, finetune, classify."""

import contextlib
import io
import json
import os
import re
import shutil
import types

import numpy as np
import pytest
import tensorflow as tf

from keras_attn import cli
from keras_attn.config import PretrainConfig
from keras_attn.errors import UserError
from pipelines import synthetic_documents, text
from tests import fresh_process

pytest_plugins = ["tests.fixtures_export"]

PRETRAIN = [  # float32 pinned: --precision auto would differ from machine to machine
    "pretrain",
    "bert",
    "--builtin-documents",
    "200",
    "--max-length",
    "32",
    "--max-predictions",
    "4",
    "--epochs",
    "2",
    "--batch-size",
    "16",
    "--pairs-per-epoch",
    "160",
    "--vocab-size",
    "600",
    "--warmup-steps",
    "5",
    "--dropout",
    "0",
    "--precision",
    "float32",
]
# The same run as a `PretrainConfig` (for the killed process), backed up every 4 steps.
CONFIG = dict(
    builtin_documents=200,
    max_sequence_length=32,
    max_predictions=4,
    epochs=2,
    batch_size=16,
    pairs_per_epoch=160,
    vocabulary_size=600,
    warmup_steps=5,
    dropout=0.0,
    verbose=2,
    backup_every=4,
    export=False,
)
HOSTILE = [
    "the [MASK] sees the [mask] .",
    "",
    "   ",
    "no mask at all",
    "[MASK]" * 40,
    "\u200b\u200d",
    b"\xff\xfe broken [MASK] bytes",
    "word " * 500 + "[MASK]",
    "[MASK] " + "x" * 300,
    "日本語 [MASK] ☃",
]


def _run(argv):
    output = io.StringIO()
    with contextlib.redirect_stdout(output):  # not a terminal, as in a log file
        code = cli.main(argv)
    return code, output.getvalue()


@pytest.fixture(scope="module")
def pretrained(tmp_path_factory):
    """One CLI pretraining run: its folder, what it printed, the job's result."""
    from keras_attn.jobs import bert

    root = tmp_path_factory.mktemp("bert")
    argv = [*PRETRAIN, "--run-dir", str(root / "run"), "--export", str(root / "saved_models")]
    results = []
    with pytest.MonkeyPatch.context() as patch:
        run = bert.pretrain
        patch.setattr(bert, "pretrain", lambda *a, **k: results.append(run(*a, **k)) or results[-1])
        code, printed = _run(argv)
    assert code == 0, printed
    return types.SimpleNamespace(
        root=root,
        printed=printed,
        result=results[0],
        export=str(root / "saved_models" / "bert" / "1"),
    )


@pytest.mark.slow
def test_pretraining_reports_both_tasks_and_exports(pretrained):
    lines = pretrained.printed.splitlines()
    assert (
        lines[0] == "strategy: default (no tf.distribute strategy), 1 replica(s) on /device:CPU:0"
    )
    assert lines[3] == "global batch: 16 (16 per replica)"
    assert lines[5].startswith("data: 200 documents, ") and lines[5].endswith(
        "190 training, 10 validation documents"
    )
    epochs = [line for line in lines if line.startswith("epoch ")]
    assert [line.split(" - ")[0] for line in epochs] == ["epoch 1/2", "epoch 2/2"]
    for name in (
        "mlm_loss",
        "mlm_accuracy",
        "mlm_perplexity",
        "nsp_loss",
        "nsp_accuracy",
        "val_mlm_accuracy",
    ):
        assert f" - {name}: " in epochs[-1]
    assert pretrained.result.steps == 20
    metrics = pretrained.result.metrics
    assert metrics["mlm_perplexity"] == pytest.approx(np.exp(metrics["mlm_loss"]), rel=1e-5)
    assert f"exported to {pretrained.export}" in lines
    names = sorted(os.listdir(os.path.join(pretrained.export, "assets.extra")))
    assert names == [
        "bert_backbone.json",
        "bert_backbone.weights.h5",
        "keras_attn.json",
        "vocab.txt",
    ]


_FRESH_PROCESS = """
import json, os, sys
os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
import tensorflow as tf
import tensorflow_text  # noqa: F401
model = tf.saved_model.load(sys.argv[1])
texts = tf.constant([bytes.fromhex(h) for h in json.loads(sys.argv[2])])
fill = model.signatures["fill_mask"](text=texts, top_k=tf.constant(3))
encode = model.signatures["encode_pair"](text_a=texts, text_b=texts[::-1])
empty = model.signatures["fill_mask"](text=tf.constant([], tf.string), top_k=tf.constant(0))
print(json.dumps({
    "signatures": sorted(model.signatures),
    "tokens": fill["tokens"].numpy().astype(str).tolist(),
    "scores": fill["scores"].numpy().tolist(),
    "num_masks": fill["num_masks"].numpy().tolist(),
    "truncated": fill["truncated"].numpy().tolist(),
    "pooled": encode["pooled_output"].numpy().tolist(),
    "empty": {k: list(v.shape) for k, v in empty.items()},
    "imported": sorted(m for m in sys.modules if m.split(".")[0] in ("keras_attn", "pipelines")),
}))
"""


@pytest.mark.slow
def test_the_export_serves_hostile_strings_in_a_fresh_process(pretrained):
    encoded = [t if isinstance(t, bytes) else t.encode() for t in HOSTILE]
    done = fresh_process.run(
        _FRESH_PROCESS, pretrained.export, json.dumps([t.hex() for t in encoded]), timeout=180
    )
    assert done.returncode == 0, done.stderr[-2000:]
    served = json.loads(done.stdout.splitlines()[-1])
    assert served["imported"] == []  # TensorFlow and tensorflow-text only
    assert served["signatures"] == [
        "attention",
        "encode",
        "encode_pair",
        "fill_mask",
        "serving_default",
    ]
    server = pretrained.result.server
    expected = server.fill_mask(tf.constant(encoded), tf.constant(3))
    assert served["tokens"] == expected["tokens"].numpy().astype(str).tolist()
    np.testing.assert_allclose(served["scores"], expected["scores"].numpy(), atol=1e-5)
    assert served["num_masks"] == [2, 0, 0, 0, 40, 0, 1, 1, 1, 1]
    assert served["truncated"] == [
        False,
        False,
        False,
        False,
        True,
        False,
        False,
        True,
        False,
        False,
    ]
    tokens = np.array(served["tokens"])  # (B, 4 = max_predictions, 3)
    assert tokens.shape == (10, 4, 3)
    assert all(t != "" for t in tokens[0, :2].ravel()) and (tokens[0, 2:] == "").all()
    assert (tokens[[1, 2, 3, 5]] == "").all()  # no mask: nothing predicted
    # no special token
    assert not any(t.startswith("[") and t.endswith("]") for t in tokens.ravel())
    assert np.array(served["pooled"]).shape == (10, 128)
    assert served["empty"] == {
        "filled": [0],
        "num_masks": [0],
        "scores": [0, 0, 1],
        "tokens": [0, 0, 1],
        "truncated": [0],
    }


@pytest.mark.slow
def test_fill_mask_command(pretrained, cli_loads_saved_models_once, capsys):
    """Every text is answered in order; one whose masks cannot all be answered is said in a line,
    an error (exit 2) where none is: no [MASK], or each past the length limit."""
    past_the_limit = "the dog " * 200 + "[MASK] ."
    texts = ["the [MASK] sees it .", "nothing to fill", past_the_limit, "the [MASK] runs ."]
    assert cli.main(["fill-mask", pretrained.export, *texts, "--top-k", "2"]) == 2
    captured = capsys.readouterr()
    lines = captured.out.splitlines()
    assert len(lines) == 6 and lines[1].startswith("  [MASK] 1: ") and lines[1].count(",") == 1
    assert lines[2] == "nothing to fill" and lines[5].startswith("  [MASK] 1: ")
    assert captured.err.splitlines() == [
        "keras-attn: error: input 2: no [MASK] to fill",
        "keras-attn: error: input 3: 1 of its 1 [MASK]s lie past the model's length limit, where "
        "the text was cut",
    ]
    assert cli.main(["fill-mask", pretrained.export, "the [MASK] sees it ."]) == 0


@pytest.mark.slow
def test_a_run_folder_gives_the_exported_backbone(pretrained, tmp_path):
    from keras_attn.checkpoints.pretrained_bert import load_backbone, read_pretrained

    run = str(pretrained.root / "run")
    (from_run, run_settings), (from_export, export_settings) = (
        read_pretrained(run),
        read_pretrained(pretrained.export),
    )
    # the run folder's preset written out as the export writes it
    assert run_settings == export_settings
    assert from_run.vocabulary == from_export.vocabulary
    backbone_of_run, backbone_of_export = load_backbone(run), load_backbone(pretrained.export)
    assert backbone_of_run.get_config() == backbone_of_export.get_config()
    for a, b in zip(backbone_of_run.weights, backbone_of_export.weights, strict=True):
        # the export holds the run's best weights
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    unfinished = tmp_path / "unfinished"
    unfinished.mkdir()
    for name in ("settings.json", "vocab.txt"):
        shutil.copy(os.path.join(run, name), unfinished / name)
    with pytest.raises(ValueError, match="no best.weights.h5 yet"):
        read_pretrained(str(unfinished))
    # a captioner's
    for settings in (
        '{"model_dir": "x"}',  # a fine-tuning run folder
        '{"vocabulary_size": 200, "preset": "tiny", "image_size": 32}',
    ):
        (unfinished / "settings.json").write_text(settings)
        with pytest.raises(ValueError, match="not a BERT pretraining run folder"):
            read_pretrained(str(unfinished))


def _stream_above_0_mb(monkeypatch):
    from keras_attn.jobs import bert

    monkeypatch.setattr(bert, "STREAM_ABOVE_MB", 0)
    monkeypatch.setattr(bert, "STREAMED_VALID_DOCUMENTS", 20)


@pytest.fixture(scope="module")
def streamed(tmp_path_factory):
    """A pre-norm pretraining, exported, on a folder of two files of documents read as a stream: the
    documents' folder, the run's config, what it logged, the job's result."""
    from keras_attn.jobs import bert

    root = tmp_path_factory.mktemp("streamed")
    docs = synthetic_documents.document_corpus(200, seed=1)
    (root / "docs").mkdir()
    for number in range(2):
        (root / "docs" / f"{number}.txt").write_text(
            "\n\n".join(" ".join(d) for d in docs[number::2]) + "\n"
        )
    config = dict(
        CONFIG,
        data=[str(root / "docs")],
        run_dir=str(root / "run"),
        epochs=2,
        backup_every=0,
        norm_first=True,
        export=True,
        export_root=str(root / "saved_models"),
    )
    lines = []
    with pytest.MonkeyPatch.context() as patch:
        _stream_above_0_mb(patch)
        result = bert.pretrain(PretrainConfig(**config), log=lines.append)
    return types.SimpleNamespace(docs=root / "docs", config=config, lines=lines, result=result)


@pytest.mark.slow
def test_a_pre_norm_pretraining_reloads_as_pre_norm(streamed, monkeypatch):
    from keras_attn.checkpoints.pretrained_bert import load_backbone, read_pretrained
    from keras_attn.jobs import bert

    run, result = streamed.config["run_dir"], streamed.result
    trained = result.model.backbone
    ids = np.array([[4, 9, 12, 5, 30, 5]], "int32")
    inputs = {"token_ids": ids, "segment_ids": np.array([[0, 0, 0, 0, 1, 1]], "int32")}
    for source in (run, result.export_path):
        assert read_pretrained(source)[1]["norm_first"] is True
        backbone = load_backbone(source, dropout=0.0)
        assert backbone.final_norm is not None and backbone.encoder_blocks[0].norm_first
        np.testing.assert_allclose(
            backbone(inputs)["pooled_output"], trained(inputs)["pooled_output"], atol=1e-6
        )
    # The same run folder is bound to pre-norm: a post-norm rerun (of
    # the same data, read as a stream) is refused.
    _stream_above_0_mb(monkeypatch)
    with pytest.raises(UserError, match="--norm-first True \\(now False\\)"):
        bert.pretrain(
            PretrainConfig(**dict(streamed.config, norm_first=False)), log=lambda line: None
        )


# Fine-tuning, its export against the job's model, and `classify`: tests/test_cli_new_user.py, on
# the fine-tuning its tests run (finetune from an export:
# tests/checkpoints/test_huggingface_bert.py).


def _written(path, text):
    path.write_text(text)
    return str(path)


@pytest.mark.parametrize(
    "argv, message",
    [
        (lambda p, t: ["fill-mask", str(t / "missing"), "x"], "missing: no such folder"),
        (
            lambda p, t: ["classify", p.export, "x"],
            "not a fine-tuned BERT export (keras-attn finetune)",
        ),
        (
            lambda p, t: ["export-ct2", p.export, str(t / "ct2")],
            "a BERT export, not a translation one (keras-attn fill-mask or classify reads it)",
        ),
        (  # said before a test split is asked for
            lambda p, t: ["evaluate", p.export],
            "a BERT export, not a translation one (keras-attn fill-mask or classify reads it)",
        ),
        (
            lambda p, t: ["finetune", p.export, "--train", str(t / "none.tsv")],
            "none.tsv: file not found",
        ),
        (
            lambda p, t: ["finetune", str(t), "--train", "x.tsv"],
            "not a SavedModel folder (no saved_model.pb)",
        ),
        (
            lambda p, t: [
                "finetune",
                p.export,
                "--train",
                _written(t / "unlabelled.tsv", "pos\tA fine film.\n\tDull.\n"),
            ],
            "unlabelled.tsv:2: an empty label (label<TAB>text...)",
        ),
        (
            lambda p, t: [
                "finetune",
                p.export,
                "--train",
                _written(t / "train.tsv", "pos\tGood.\nneg\tBad.\n" * 20),
                "--valid",
                _written(t / "pairs.tsv", "pos\tGood.\tFine.\n"),
                "--run-dir",
                str(t / "run"),
            ],
            "pairs.tsv: pairs (label<TAB>text_a<TAB>text_b), but ",
        ),
        # said before training, not after it
        (
            lambda p, t: [
                "finetune",
                p.export,
                "--train",
                _written(t / "train.tsv", "pos\tGood.\nneg\tBad.\n" * 20),
                "--test",
                _written(t / "test.tsv", "neutral\tSo so.\n"),
                "--run-dir",
                str(t / "run"),
            ],
            "test.tsv: labels not in the training data: neutral",
        ),
        (
            lambda p, t: [
                "pretrain",
                "bert",
                "--data",
                str(t / "none.txt"),
                "--run-dir",
                str(t / "r"),
            ],
            "none.txt: file not found",
        ),
    ],
)
@pytest.mark.slow
def test_mistakes_are_one_line(
    pretrained, cli_loads_saved_models_once, tmp_path, capsys, argv, message
):
    assert cli.main(argv(pretrained, tmp_path)) == 2
    error = capsys.readouterr().err.strip()
    assert len(error.splitlines()) == 1 and message in error, error
    assert not (tmp_path / "run").exists()  # refused before any run began


@pytest.mark.slow
def test_finetune_on_fewer_examples_than_a_batch_names_the_flag(
    pretrained, cli_loads_saved_models_once, tmp_path, capsys
):
    argv = [
        "finetune",
        pretrained.export,
        "--train",
        _written(tmp_path / "train.tsv", "pos\tGood.\nneg\tBad.\n" * 6),
        "--valid",
        _written(tmp_path / "dev.tsv", "pos\tFine.\nneg\tPoor.\n"),
        "--run-dir",
        str(tmp_path / "run"),
    ]
    assert cli.main(argv) == 2
    error = capsys.readouterr().err.strip()
    assert len(error.splitlines()) == 1, error
    assert re.search(
        r"12 examples, fewer than the global batch \d+: give more examples or a smaller "
        r"--batch-size$",
        error,
    ), error


_KILLED_PROCESS = """
import json, os, signal, sys
os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
import keras
from keras_attn.config import PretrainConfig
from keras_attn.jobs import bert

class Kill(keras.callbacks.Callback):  # a real SIGKILL: no handler, no cleanup
    def on_train_batch_end(self, batch, logs=None):
        if int(self.model.optimizer.iterations.numpy()) >= 7:
            sys.stdout.flush()
            os.kill(os.getpid(), signal.SIGKILL)

train = bert.train


def train_killed(*args, callbacks=(), **kwargs):
    return train(*args, callbacks=[*callbacks, Kill()], **kwargs)


bert.train = train_killed
bert.pretrain(PretrainConfig(**json.loads(sys.argv[1])))
"""


@pytest.mark.slow
def test_a_killed_pretraining_resumes_to_the_uninterrupted_weights(pretrained, tmp_path):
    from keras_attn.jobs import bert

    run = tmp_path / "run"
    run.mkdir()
    # The fixture's vocabulary: learning one is not deterministic across processes.
    (run / "vocab.txt").write_text((pretrained.root / "run" / "vocab.txt").read_text())
    config = dict(CONFIG, run_dir=str(run))
    killed = fresh_process.run(_KILLED_PROCESS, json.dumps(config), timeout=240)
    assert killed.returncode == -9, killed.stderr[-2000:]
    # backed up at step 4, killed after step 7
    assert "ckpt-4.index" in os.listdir(run / "checkpoints")
    lines = []
    resumed = bert.pretrain(PretrainConfig(**config), log=lines.append)
    assert f"run folder: {run} (continues from its backup ckpt-4)" in lines
    assert resumed.steps == pretrained.result.steps == 20
    # A resumed run says the steps in all and those of this run, with this run's time.
    (trained,) = [line for line in lines if line.startswith("trained ")]
    assert re.fullmatch(
        r"trained [\d,]+ parameters for 20 steps in all on 1 replica\(s\), global batch 16; "
        r"this run resumed after 4 and trained 16 steps in \d+ s",
        trained,
    ), trained
    for a, b in zip(resumed.model.get_weights(), pretrained.result.model.get_weights()):
        np.testing.assert_allclose(a, b, atol=1e-5)


@pytest.mark.parametrize("mask_rate", [0.15, 0.3, 0.4])
@pytest.mark.parametrize(
    "data, max_length", [(None, None), (["docs"], None), (None, 32), (["docs"], 512)]
)
def test_the_default_max_predictions_never_cuts_the_mask_rate(data, max_length, mask_rate):
    from keras_attn.config import PretrainConfig
    from keras_attn.jobs.bert import with_lengths

    config = with_lengths(
        PretrainConfig(data=data, max_sequence_length=max_length, mask_rate=mask_rate)
    )
    assert config.max_sequence_length == (max_length or (128 if data else 64))
    # The masker's budget for a full pair (all but [CLS] and two [SEP]) fits under the cap.
    assert (
        round((config.max_sequence_length - 3) * mask_rate)
        <= config.max_predictions
        <= config.max_sequence_length
    )
    if mask_rate == 0.15 and config.max_sequence_length == 128:
        assert config.max_predictions == 20  # BERT's max_predictions_per_seq
    given = with_lengths(
        PretrainConfig(max_sequence_length=max_length, max_predictions=4, mask_rate=mask_rate)
    )
    assert given.max_predictions == 4


def test_an_export_that_names_its_preset_reads_as_one_that_writes_it_out(tmp_path):
    """Exports made before the backbone's config was saved whole keep
    `preset`: the same settings come back.
    """
    from keras_attn.checkpoints.pretrained_bert import read_pretrained
    from keras_attn.models import BERT_PRESETS
    from keras_attn.serving.bert import BACKBONE_SETTINGS, BACKBONE_WEIGHTS, VOCABULARY
    from pipelines.special_tokens import SPECIAL_TOKENS

    extra = tmp_path / "assets.extra"
    extra.mkdir()
    (extra / VOCABULARY).write_text("".join(f"{token}\n" for token in [*SPECIAL_TOKENS, "a", "b"]))
    (extra / BACKBONE_WEIGHTS).write_text("")
    (extra / BACKBONE_SETTINGS).write_text(
        json.dumps(
            dict(
                vocabulary_size=9,
                preset="mini",
                max_sequence_length=32,
                norm_first=False,
                lowercase=True,
                max_length=32,
            )
        )
    )
    _, settings = read_pretrained(str(tmp_path))
    mini = BERT_PRESETS["mini"]
    assert settings == dict(
        vocabulary_size=9,
        max_sequence_length=32,
        num_segments=2,
        num_layers=mini["num_layers"],
        hidden_dim=mini["hidden_dim"],
        num_heads=mini["num_heads"],
        intermediate_dim=4 * mini["hidden_dim"],
        norm_first=False,
        activation="gelu",
        layer_norm_epsilon=1e-12,
        lowercase=True,
        strip_accents=False,
        max_length=32,
    )


def test_a_pretraining_run_folder_started_before_the_settings_renaming_still_loads(tmp_path):
    """Its settings.json says max_length and vocab_size (the flags'
    names); read_pretrained reads them.
    """
    from keras_attn import run_folder
    from keras_attn.checkpoints.pretrained_bert import read_pretrained
    from pipelines.special_tokens import SPECIAL_TOKENS

    (tmp_path / run_folder.VOCABULARY).write_text(
        "".join(f"{token}\n" for token in [*SPECIAL_TOKENS, "a", "b"])
    )
    (tmp_path / run_folder.BEST_WEIGHTS).write_text("")
    (tmp_path / run_folder.SETTINGS).write_text(
        json.dumps(
            dict(training_data="0", vocab_size=9, preset="tiny", norm_first=False, max_length=48)
        )
    )
    _, settings = read_pretrained(str(tmp_path))
    assert (
        settings["max_sequence_length"] == settings["max_length"] == 48
        and settings["vocabulary_size"] == 9
    )


@pytest.mark.slow
def test_pretraining_streams_a_folder_of_documents_and_reports_a_bad_line_met_by_training(
    streamed, tmp_path, monkeypatch
):
    """Over `STREAM_ABOVE_MB` of text (here: over 0) the documents are
    read as a stream: the first documents of the first file validate,
    the rest train; a bad line comes out as one line of ours."""
    from keras_attn.jobs import bert

    lines, result = streamed.lines, streamed.result
    assert any(
        re.match(
            rf"data: 2 files, 0 MB of text, read as a stream; the first 20 documents of "
            rf"{re.escape(str(streamed.docs / '0.txt'))} validate",
            line,
        )
        for line in lines
    ), lines
    assert result.steps == 2 * 160 // 16
    losses = result.history["loss"]
    assert losses[1] < losses[0], losses
    shutil.copytree(streamed.docs, tmp_path / "docs")
    bad = tmp_path / "docs" / "1.txt"
    bad.write_bytes(bad.read_bytes() + b"A last \xff sentence.\n")
    # with the vocabulary learned, the bad line is met by training's stream
    (tmp_path / "again").mkdir()
    shutil.copy(
        os.path.join(streamed.config["run_dir"], "vocab.txt"), tmp_path / "again" / "vocab.txt"
    )
    config = dict(
        streamed.config,
        data=[str(tmp_path / "docs")],
        run_dir=str(tmp_path / "again"),
        export=False,
    )
    _stream_above_0_mb(monkeypatch)
    with pytest.raises(
        text.DataError,
        match=rf"^{re.escape(str(bad))}:\d+: invalid UTF-8 \(byte 0xff at column 8\)$",
    ):
        bert.pretrain(PretrainConfig(**config), log=lambda line: None)
