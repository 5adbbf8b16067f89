"""Hugging Face BERT folders load into our backbone and tasks and give the reference's outputs.

The folders under tests/fixtures/huggingface/ and their `reference.npz` were written by transformers
itself (tests/fixtures/make_huggingface.py): a `BertForPreTraining` (erf GELU, epsilon 1e-12) and a
bare, sharded `BertModel` (tanh GELU, epsilon 1e-3, three segments, no `bert.` prefix). Their
weights are wide enough that the erf GELU in place of the tanh one moves the encoder's output by
1e-3, and epsilon 1e-12 in place of 1e-3 by 4e-3.
"""

import json
import pathlib
import shutil

import numpy as np
import pytest
import tensorflow as tf

from keras_attn.checkpoints.bert import read_checkpoint
from keras_attn.errors import UserError
from keras_attn.models import BertBackbone, BertClassifier, BertMaskedLM, BertPretrainer
from pipelines.preprocessors import BertPreprocessor
from pipelines.special_tokens import CLS_ID, MASK_ID, SEP_ID
from tests.checkpoints.parity import assert_close

FOLDERS = pathlib.Path(__file__).parents[1] / "fixtures" / "huggingface"
PRETRAINING, SHARDED = FOLDERS / "bert", FOLDERS / "bert-model-sharded"


def _reference(folder):
    """The reference's inputs and outputs, token ids and logits
    brought into our vocabulary's order.
    """
    reference = dict(np.load(folder / "reference.npz"))
    order = np.array(read_checkpoint(str(folder)).plan.order)
    ours = np.argsort(order)  # the checkpoint's id → ours
    for ids in ("token_ids", "text_ids"):
        reference[ids] = ours[reference[ids]]
    if "mlm" in reference:
        reference["mlm"] = reference["mlm"][..., order]
    return reference


def _assert_backbone_matches(backbone, reference):
    """The embeddings' and every layer's outputs, then the model's, each named when it differs."""
    token_ids, segment_ids = reference["token_ids"], reference["segment_ids"]
    real = token_ids != 0  # ours also masks padded queries: their rows differ and are never read
    x = backbone.embedding(token_ids, segment_ids)
    assert_close(np.asarray(x)[real], reference["hidden_states"][0][real], "embeddings")
    for i, block in enumerate(backbone.encoder_blocks):
        x = block(x, padding_mask=tf.constant(real))
        assert_close(
            np.asarray(x)[real], reference["hidden_states"][i + 1][real], f"encoder block {i}"
        )
    out = backbone({"token_ids": token_ids, "segment_ids": segment_ids})
    assert_close(
        np.asarray(out["sequence_output"])[real],
        reference["sequence_output"][real],
        "sequence output",
    )
    assert_close(out["pooled_output"], reference["pooled_output"], "pooler")


def test_a_pretraining_checkpoint_gives_the_references_encoder_mlm_and_nsp_outputs():
    reference = _reference(PRETRAINING)
    task = BertPretrainer.from_preset(str(PRETRAINING))
    _assert_backbone_matches(task.backbone, reference)
    out = task({key: reference[key] for key in ("token_ids", "segment_ids", "mask_positions")})
    assert_close(out["mlm"], reference["mlm"], "masked LM")
    assert_close(out["nsp"], reference["nsp"], "next sentence")
    masked_lm = BertMaskedLM.from_preset(str(PRETRAINING))
    inputs = {key: reference[key] for key in ("token_ids", "segment_ids", "mask_positions")}
    assert_close(masked_lm(inputs)["mlm"], reference["mlm"], "BertMaskedLM's masked LM")


def test_the_folders_vocabulary_reads_text_as_the_references_tokenizer_and_fills_masks():
    """Lowercased, accents stripped ("Café" is "cafe", not the vocabulary's "café"), Chinese
    characters one word each, an emoji, control characters, a word of 300 characters, empty texts,
    pairs as `[CLS] A [SEP] B [SEP]`: the same ids, in our vocabulary's order."""
    reference = _reference(PRETRAINING)
    task = BertMaskedLM.from_preset(str(PRETRAINING))
    texts, paired = reference["texts"].tolist(), reference["paired"].tolist()
    rows = task.preprocessor(tf.constant(texts), tf.constant(paired))
    np.testing.assert_array_equal(rows["token_ids"], reference["text_ids"])
    np.testing.assert_array_equal(rows["segment_ids"], reference["text_segments"])
    # as a .keras file keeps it
    rebuilt = BertPreprocessor.from_config(task.preprocessor.get_config())
    np.testing.assert_array_equal(
        rebuilt(tf.constant(texts), tf.constant(paired))["token_ids"], rows["token_ids"]
    )
    vocabulary = task.preprocessor.tokenizer.vocabulary
    assert [vocabulary.index(token) for token in ("[CLS]", "[SEP]", "[MASK]")] == [
        CLS_ID,
        SEP_ID,
        MASK_ID,
    ]
    assert task.preprocessor.max_length == 24  # the checkpoint's positions
    answer = task.fill_mask(["the [MASK] runs ."], top_k=3)[0]
    assert len(answer["masks"]) == 1 and all(token in vocabulary for token, _ in answer["masks"][0])


def test_a_sharded_bare_encoder_with_the_tanh_gelu_loads_its_architecture_and_its_outputs():
    backbone = BertBackbone.from_preset(str(SHARDED))
    settings = backbone.get_config()
    assert (
        settings["activation"],
        settings["layer_norm_epsilon"],
        settings["num_segments"],
        settings["intermediate_dim"],
    ) == ("gelu_tanh", 1e-3, 3, 37)
    _assert_backbone_matches(backbone, _reference(SHARDED))
    rebuilt = BertBackbone.from_config(settings)
    rebuilt.set_weights(backbone.get_weights())
    _assert_backbone_matches(rebuilt, _reference(SHARDED))
    # its output layer is new
    classifier = BertClassifier.from_preset(str(SHARDED), num_classes=3, dropout=0.0)
    assert classifier.predict(classifier.preprocessor(tf.constant(["a dog"])), verbose=0).shape == (
        1,
        3,
    )


def _copy(tmp_path, folder):
    return pathlib.Path(shutil.copytree(folder, tmp_path / folder.name))


def _edit_config(folder, **settings):
    """Rewrites the folder's config.json with `settings` (None: left out)."""
    config = {**json.loads((folder / "config.json").read_text()), **settings}
    (folder / "config.json").write_text(
        json.dumps({k: v for k, v in config.items() if v is not None})
    )


@pytest.mark.parametrize(
    "breakage, message",
    [
        (
            lambda folder: (folder / "config.json").write_text(
                json.dumps({"model_type": "marian"})
            ),
            "a Hugging Face Marian folder, which makes a TransformerBackbone or a Seq2SeqLM, not a "
            "BertPretrainer",
        ),
        (
            lambda folder: (folder / "config.json").write_text("{not json"),
            "config.json: not JSON",
        ),
        (
            lambda folder: (folder / "model.safetensors").unlink(),
            "no model.safetensors or model.safetensors.index.json",
        ),
        (
            lambda folder: (folder / "model.safetensors").write_bytes(b"\x00" * 16),
            "model.safetensors: not a readable safetensors file",
        ),
        (
            lambda folder: (folder / "config.json").write_text(
                (folder / "config.json").read_text().replace('"gelu"', '"quick_gelu"')
            ),
            "config.json: hidden_act 'quick_gelu', where one of gelu, gelu_new",
        ),
        (lambda folder: _edit_config(folder, vocab_size=None), "config.json: no vocab_size"),
        (
            lambda folder: _edit_config(folder, vocab_size="forty"),
            "config.json: vocab_size 'forty', where a whole number from 1",
        ),
        (
            lambda folder: _edit_config(folder, max_position_embeddings=-5),
            "config.json: max_position_embeddings -5,",
        ),
        (
            lambda folder: _edit_config(folder, num_attention_heads=3),
            "does not split into num_attention_heads 3 heads",
        ),
        (
            lambda folder: _edit_config(folder, layer_norm_eps=None),
            "config.json: no layer_norm_eps",
        ),
        (
            lambda folder: (folder / "config.json").write_text("[1, 2]"),
            "config.json: not a JSON object of settings",
        ),
        (
            lambda folder: (folder / "tokenizer_config.json").write_text("{do_lower_case"),
            "tokenizer_config.json: not JSON",
        ),
    ],
)
def test_a_folder_that_is_not_a_readable_bert_checkpoint_is_one_line(tmp_path, breakage, message):
    folder = _copy(tmp_path, PRETRAINING)
    breakage(folder)
    with pytest.raises(UserError) as error:
        BertPretrainer.from_preset(str(folder))
    assert message in str(error.value) and "\n" not in str(error.value)


def test_a_task_whose_head_the_checkpoint_lacks_is_refused_in_one_line():
    with pytest.raises(
        UserError,
        match=r"bert-model-sharded: no masked-LM head in its checkpoint, which "
        r"BertMaskedLM needs",
    ):
        BertMaskedLM.from_preset(str(SHARDED))


# A fresh process with TensorFlow alone: the export's tokenizer and heads need nothing of ours.
FILL_ALONE = """
import sys
import tensorflow as tf, tensorflow_text
fill_mask = tf.saved_model.load(sys.argv[1]).signatures["fill_mask"]
out = fill_mask(text=tf.constant(["The [MASK] runs."]), top_k=tf.constant(1))
assert not any(name.startswith(("keras_attn", "pipelines")) for name in sys.modules)
print(out["filled"].numpy()[0].decode())
"""


@pytest.fixture(scope="module")
def imported(tmp_path_factory):
    """`keras-attn import` of the pretraining folder: what it printed, and the export's folder."""
    import contextlib
    import io

    from keras_attn import cli

    root, printed = tmp_path_factory.mktemp("saved"), io.StringIO()
    with contextlib.redirect_stdout(printed):
        assert cli.main(["import", str(PRETRAINING), str(root / "hf-bert")]) == 0
    return printed.getvalue(), root / "hf-bert" / "1"


@pytest.mark.slow
def test_import_exports_a_pretraining_folder_filling_masks_as_the_task_and_refuses_the_rest(
    imported, tmp_path, capsys
):
    from keras_attn import cli

    printed, export = imported
    assert printed.startswith(f"{export}: BertPretrainer of ")
    assert cli.main(["fill-mask", str(export), "The [MASK] runs."]) == 0
    # read as the folder's tokenizer reads: lowercased
    filled, candidates = capsys.readouterr().out.splitlines()
    best = candidates.split(": ", 1)[1].split(" ")[0]
    vocabulary = (PRETRAINING / "vocab.txt").read_text().split("\n")
    assert (
        filled == f"the {best} runs."
        and best in vocabulary
        and best not in ("[CLS]", "[SEP]", "[MASK]")
    )
    # In a fresh process with TensorFlow alone, the export fills the mask alike.
    from tests import fresh_process

    alone = fresh_process.run(FILL_ALONE, export)
    assert alone.returncode == 0, alone.stderr[-2000:]
    assert alone.stdout.splitlines()[-1] == filled
    for folder, message in (
        (SHARDED, "bert-model-sharded: no masked-LM head in its weights"),
        (tmp_path / "missing", "missing: no such folder"),
    ):
        assert cli.main(["import", str(folder), str(tmp_path / "other")]) == 2
        err = capsys.readouterr().err
        assert message in err and err.count("\n") == 1
    assert not (tmp_path / "other").exists()


def test_import_refuses_an_out_that_is_not_a_models_folder_before_reading_the_checkpoint(
    tmp_path, monkeypatch, capsys
):
    from keras_attn import cli

    version = tmp_path / "saved_models" / "model" / "1"
    version.mkdir(parents=True)
    (version / "saved_model.pb").write_bytes(b"")
    (tmp_path / "notes.txt").write_text("mine")
    monkeypatch.chdir(tmp_path)
    for out, message in (
        ("", "OUT '': its last part '.': a model's folder name under the export root"),
        ("saved_models/<img src=x>", "its last part '<img src=x>': a model's folder name"),
        (str(PRETRAINING / "sub"), "(OUT): holds or lies in the imported folder"),
        (str(version), "(OUT): a version's folder; give the model's folder, "),
        (
            "saved_models/other-name/1",
            "saved_models/other-name/1 (OUT): a version's folder; give the model's folder, "
            "saved_models/other-name: the export is its next version",
        ),
        (str(version / "assets"), "(OUT): lies in the export"),
        (
            "saved_models",
            "saved_models (OUT): holds folders other than versions (an export root?); give "
            "ROOT/<name>",
        ),
        ("notes.txt", "notes.txt (OUT): cannot be a folder, "),
        ("/proc/keras-attn-import", "/proc/keras-attn-import (OUT): cannot write in /proc ("),
    ):
        assert cli.main(["import", str(PRETRAINING), out]) == 2
        err = capsys.readouterr().err
        assert message in err and err.count("\n") == 1, err
    assert sorted(p.name for p in (tmp_path / "saved_models" / "model").iterdir()) == ["1"]
    assert not (tmp_path / "1").exists() and not (PRETRAINING / "sub").exists()


def test_finetune_reads_a_folder_as_its_backbone_and_tokenizer():
    """What `keras-attn finetune FOLDER` starts from: the checkpoint's weights (not a new backbone)
    and its vocabulary and text settings."""
    from keras_attn.checkpoints.pretrained_bert import load_backbone, read_pretrained

    tokenizer, settings = read_pretrained(str(PRETRAINING))
    reference = BertMaskedLM.from_preset(str(PRETRAINING))
    assert tokenizer.vocabulary == reference.preprocessor.tokenizer.vocabulary
    assert (settings["lowercase"], settings["strip_accents"], settings["max_length"]) == (
        True,
        True,
        24,
    )
    text = tf.constant(["Café über the mats!"])
    np.testing.assert_array_equal(
        tokenizer.tokenize(text).to_list(),
        reference.preprocessor.tokenizer.tokenize(text).to_list(),
    )
    backbone = load_backbone(str(PRETRAINING), dropout=0.2)
    assert backbone.get_config()["dropout"] == 0.2 and backbone.get_config()["activation"] == "gelu"
    for ours, theirs in zip(backbone.weights, reference.backbone.weights):
        np.testing.assert_array_equal(ours.numpy(), theirs.numpy(), err_msg=ours.path)


def test_finetune_takes_the_folder_itself(tmp_path, capsys):
    """The command accepts the folder (what it says next is about the
    training file, read before training).
    """
    from keras_attn import cli

    assert cli.main(["finetune", str(PRETRAINING), "--train", str(tmp_path / "none.tsv")]) == 2
    assert (
        capsys.readouterr().err == f"keras-attn: error: {tmp_path / 'none.tsv'}: file not found\n"
    )


@pytest.mark.slow
def test_finetune_trains_a_classifier_from_an_imported_bert_that_classify_serves(
    imported, tmp_path, capsys
):
    from keras_attn import cli

    train = tmp_path / "train.tsv"
    train.write_text(
        "".join(
            f"{noun}\tthe {noun} {verb} on the mat .\n"
            for noun in ("dog", "cat")
            for verb in ("runs", "sleeps", "runs", "sleeps") * 4
        )
    )
    argv = [
        "finetune",
        str(imported[1]),
        "--train",
        str(train),
        "--epochs",
        "1",
        "--batch-size",
        "8",
        "--precision",
        "float32",
        "--run-dir",
        str(tmp_path / "run"),
        "--export",
        str(tmp_path / "saved"),
    ]
    assert cli.main(argv) == 0
    export = tmp_path / "saved" / "bert-classifier" / "1"
    assert f"exported to {export}" in capsys.readouterr().out
    assert cli.main(["classify", str(export), "the dog runs"]) == 0
    assert capsys.readouterr().out.split("\t")[0] in ("cat", "dog")
