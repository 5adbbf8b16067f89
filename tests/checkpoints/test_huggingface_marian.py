"""Hugging Face Marian folders (OPUS-MT) load into our Transformer and
translator, with the reference's outputs.

The folder tests/fixtures/huggingface/marian and its `reference.npz` were written by
transformers itself (tests/fixtures/make_huggingface.py): a `MarianMTModel` (swish,
2+2 layers, `final_logits_bias`, wide weights), its `MarianTokenizer` (an NFKC source
SentencePiece model, an identity target one, one `vocab.json` with a language code),
texts that try it (a language code, full-width letters, an accent, a character
neither model has, an emoji, control characters, a word of 300 characters, nothing),
every layer's teacher-forced outputs, greedy and beam search, and the decoded texts.
"""

import json
import pathlib
import shutil

import numpy as np
import pytest
import tensorflow as tf

from keras_attn.checkpoints.marian import read_checkpoint
from keras_attn.errors import UserError
from keras_attn.models import BertBackbone, Seq2SeqLM, TransformerBackbone
from pipelines.preprocessors import TranslationPreprocessor
from pipelines.special_tokens import BOS_ID, EOS_ID, PAD_ID
from tests.checkpoints.parity import assert_close

FOLDER = pathlib.Path(__file__).parents[1] / "fixtures" / "huggingface" / "marian"


@pytest.fixture(scope="module")
def task():
    return Seq2SeqLM.from_preset(str(FOLDER))


@pytest.fixture(scope="module")
def reference():
    """The reference's ids brought into our vocabulary's order (its `<pad>` is our [PAD], and [BOS]
    where decoding starts), its logits' columns too."""
    reference = dict(np.load(FOLDER / "reference.npz"))
    reference["texts"], reference["targets"] = (
        reference["texts"].tolist(),
        reference["targets"].tolist(),
    )
    order = read_checkpoint(str(FOLDER)).plan.order
    theirs_to_ours = {
        their: ours for ours, their in reversed(list(enumerate(order))) if their is not None
    }
    ours = np.vectorize(theirs_to_ours.get)
    for ids in ("source", "target_in", "greedy", "beam", "target_ids"):
        reference[ids] = ours(reference[ids])
    reference["target_in"][:, 0] = BOS_ID
    columns = [ours_id for ours_id in range(len(order)) if order[ours_id] is not None]
    reference["columns"] = columns  # our ids of the reference's logits, in its order
    reference["logits_order"] = [order[i] for i in columns]
    return reference


@pytest.mark.slow
def test_a_marian_folder_gives_the_references_outputs_layer_by_layer(task, reference):
    backbone = task.backbone
    source, target_in = reference["source"], reference["target_in"]
    real = source != PAD_ID  # ours also masks padded queries: their rows differ and are never read
    x = backbone.source_embedding(source)
    assert_close(
        np.asarray(x)[real], reference["encoder_hidden_states"][0][real], "source embedding"
    )
    for i, block in enumerate(backbone.encoder_blocks):
        x = block(x, padding_mask=tf.constant(real))
        assert_close(
            np.asarray(x)[real],
            reference["encoder_hidden_states"][i + 1][real],
            f"encoder block {i}",
        )
    y = backbone.target_embedding(target_in)
    assert_close(y, reference["decoder_hidden_states"][0], "target embedding")
    for i, block in enumerate(backbone.decoder_blocks):
        y = block(
            y,
            x,
            decoder_padding_mask=tf.constant(target_in != PAD_ID),
            encoder_padding_mask=tf.constant(real),
        )
        assert_close(y, reference["decoder_hidden_states"][i + 1], f"decoder block {i}")
    logits = np.asarray(backbone({"source": source, "target_in": target_in}))
    ours = np.empty_like(reference["logits"])
    ours[..., reference["logits_order"]] = logits[..., reference["columns"]]
    assert_close(ours, reference["logits"], "logits")
    never = [i for i in range(logits.shape[-1]) if i not in reference["columns"]]
    assert (logits[..., never] < -1e8).all()  # [CLS], [SEP], [MASK], which Marian lacks


@pytest.mark.slow
def test_its_tokenizers_read_text_as_the_references_and_the_searches_write_its_translations(
    task, reference
):
    texts = reference["texts"]
    source = task.preprocessor(tf.constant(texts))["source"].numpy()
    # the 300-character word cut, </s> kept
    np.testing.assert_array_equal(source, reference["source"])
    # sources end with </s>
    assert (source[np.arange(len(texts)), (source != PAD_ID).sum(1) - 1] == EOS_ID).all()
    targets = reference["targets"]
    target_out = task.preprocessor(tf.constant(targets), tf.constant(targets))["target_out"].numpy()
    # the target ... </s>, as text_target gives
    np.testing.assert_array_equal(target_out, reference["target_ids"])
    np.testing.assert_array_equal(task.generate(source, max_length=10), reference["greedy"])
    assert task.generate(texts, max_length=10) == reference["greedy_text"].tolist()
    # Beam search ranked by the sum of log-probabilities: length penalty 0 ranks alike under GNMT's
    # ((5 + length) / 6)^α and Hugging Face's length^α.
    np.testing.assert_array_equal(
        task.generate(source, beam_width=4, max_length=10, length_penalty=0.0), reference["beam"]
    )


def test_the_translator_round_trips_through_its_config(task, reference):
    # as a .keras file keeps it
    rebuilt = TranslationPreprocessor.from_config(task.preprocessor.get_config())
    np.testing.assert_array_equal(
        rebuilt(tf.constant(reference["texts"]))["source"], reference["source"]
    )
    backbone = TransformerBackbone.from_config(task.backbone.get_config())
    backbone.set_weights(task.backbone.get_weights())
    inputs = {"source": reference["source"], "target_in": reference["target_in"]}
    np.testing.assert_allclose(backbone(inputs), task.backbone(inputs), atol=1e-6)


def _copy(tmp_path):
    return pathlib.Path(shutil.copytree(FOLDER, tmp_path / "marian"))


def _edit_config(folder, **changes):
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, **changes}))


@pytest.mark.parametrize(
    "breakage, message",
    [
        (
            lambda folder: _edit_config(folder, decoder_attention_heads=4),
            "config.json: decoder_attention_heads 4; read only when equal to "
            "encoder_attention_heads 2",
        ),
        (
            lambda folder: _edit_config(folder, activation_function="quick_gelu"),
            "config.json: activation_function 'quick_gelu', where one of swish",
        ),
        (
            lambda folder: _edit_config(folder, share_encoder_decoder_embeddings=False),
            "config.json: share_encoder_decoder_embeddings False; only Marian's one table",
        ),
        (
            lambda folder: (folder / "vocab.json").write_text('{"</s>": 0}'),
            "vocab.json: 1 tokens, where the token table has 38 rows",
        ),
        (lambda folder: (folder / "source.spm").unlink(), "source.spm: no such file"),
        (
            lambda folder: (folder / "model.safetensors").unlink(),
            "no model.safetensors or model.safetensors.index.json",
        ),
    ],
)
def test_a_folder_that_is_not_a_readable_marian_checkpoint_is_one_line(tmp_path, breakage, message):
    folder = _copy(tmp_path)
    breakage(folder)
    with pytest.raises(UserError) as error:
        Seq2SeqLM.from_preset(str(folder))
    assert message in str(error.value) and "\n" not in str(error.value)


def test_a_folder_of_the_other_family_is_refused_in_one_line():
    with pytest.raises(UserError, match=r"marian: a Hugging Face Marian folder, which makes a "):
        BertBackbone.from_preset(str(FOLDER))
    with pytest.raises(UserError, match=r"bert: a Hugging Face BERT folder, which makes a "):
        TransformerBackbone.from_preset(str(FOLDER.parent / "bert"))


# A fresh process with TensorFlow alone: the export's tokenizers and search need nothing of ours.
TRANSLATE_ALONE = """
import json, sys
import tensorflow as tf, tensorflow_text
translator = tf.saved_model.load(sys.argv[1])
texts = json.loads(sys.stdin.read())
out = translator.signatures["translate"](text=tf.constant(texts), beam_width=tf.constant(1))
print(json.dumps([text.decode() for text in out["translation"].numpy()]))
assert not any(name.startswith(("keras_attn", "pipelines")) for name in sys.modules)
"""


@pytest.mark.slow
def test_import_exports_a_translator_that_translates_as_the_task_and_converts_for_ctranslate2(
    tmp_path, capsys, task, reference
):
    import json

    from keras_attn import cli
    from tests import fresh_process

    # (its own tests)
    assert cli.main(["import", str(FOLDER), str(tmp_path / "opus"), "--no-compiled-search"]) == 0
    assert capsys.readouterr().out.startswith(f"{tmp_path / 'opus' / '1'}: Seq2SeqLM of ")
    # a blank text translates to "" (the export's rule)
    texts = [text for text in reference["texts"] if text]
    expected = task.generate(texts)  # the export's greedy search, its default length budget
    alone = fresh_process.run(TRANSLATE_ALONE, tmp_path / "opus" / "1", input=json.dumps(texts))
    assert alone.returncode == 0, alone.stderr[-2000:]
    assert json.loads(alone.stdout.splitlines()[-1]) == expected
    plain = reference["texts"][:4]  # what a command line can pass (no NUL)
    # evaluate scores it on a user's split: its own greedy translations as references match exactly
    (tmp_path / "test.src").write_text("".join(text + "\n" for text in plain), encoding="utf-8")
    (tmp_path / "test.ref").write_text(
        "".join(text + "\n" for text in expected[:4]), encoding="utf-8"
    )
    capsys.readouterr()
    assert (
        cli.main(
            [
                "evaluate",
                str(tmp_path / "opus" / "1"),
                "--src",
                str(tmp_path / "test.src"),
                "--ref",
                str(tmp_path / "test.ref"),
                "--beam-width",
                "1",
            ]
        )
        == 0
    )
    assert capsys.readouterr().out.startswith("exact match 100.0%, BLEU 100.00")
    assert cli.main(["export-ct2", str(tmp_path / "opus" / "1"), str(tmp_path / "ct2")]) == 0
    capsys.readouterr()
    assert cli.main(["translate", str(tmp_path / "ct2"), "--beam-width", "1", *plain]) == 0
    # swish, halves, the logits' bias, the tokenizers
    assert capsys.readouterr().out.splitlines() == expected[:4]
    # serve answers with it, as with our own exports
    from starlette.testclient import TestClient

    from keras_attn.config import ServeConfig
    from keras_attn.serving.server import create_app

    with TestClient(create_app(ServeConfig(str(tmp_path), poll_seconds=0.2))) as client:
        answer = client.post(
            "/v1/models/opus:predict",
            json={"signature_name": "translate", "inputs": {"text": plain[:2], "beam_width": 1}},
        )
    assert answer.status_code == 200 and answer.json()["outputs"]["translation"] == expected[:2]
