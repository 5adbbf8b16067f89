"""keras-hub BERT preset folders (what `save_to_preset` writes) load into our `BertBackbone` with
keras-hub's outputs, and their tokenizer reads text as keras-hub's does."""

import json
import pathlib
import shutil

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_attn.checkpoints.keras_hub import read_bert
from keras_attn.errors import UserError
from keras_attn.models import BertBackbone, BertClassifier, BertMaskedLM
from tests.checkpoints.parity import assert_close

keras_hub = pytest.importorskip("keras_hub")

# keras-hub's layout of a BERT vocabulary (two [unused] slots for our [BOS] and [EOS]).
VOCABULARY = [
    "[PAD]",
    "[unused0]",
    "[unused1]",
    "[UNK]",
    "[CLS]",
    "[SEP]",
    "[MASK]",
    "the",
    "dog",
    "runs",
    "##s",
    ".",
    "a",
    "cat",
    "café",
    "cafe",
    "big",
    "red",
]
TEXTS = ["The DOG runs.", "a big red cat", "Café dogs"]


@pytest.fixture(scope="module")
def preset(tmp_path_factory):
    """A keras-hub BertBackbone with wide, perturbed weights (so that
    a GELU or an epsilon read wrong shows) and its tokenizer, saved as
    a preset folder; with keras-hub's outputs on `TEXTS`."""
    keras.utils.set_random_seed(0)
    backbone = keras_hub.models.BertBackbone(
        vocabulary_size=len(VOCABULARY),
        num_layers=2,
        num_heads=2,
        hidden_dim=16,
        intermediate_dim=24,
        max_sequence_length=16,
        num_segments=3,
    )
    rng = np.random.default_rng(1)
    for weight in backbone.weights:
        weight.assign(weight.numpy() + rng.normal(0, 0.3, weight.shape))
    tokenizer = keras_hub.models.BertTokenizer(vocabulary=VOCABULARY, lowercase=True)
    folder = tmp_path_factory.mktemp("keras-hub") / "bert"
    backbone.save_to_preset(str(folder))
    tokenizer.save_to_preset(str(folder))
    token_ids = np.asarray(
        keras_hub.layers.StartEndPacker(8, start_value=4, end_value=5, pad_value=0)(
            tokenizer(tf.constant(TEXTS))
        )
    )
    segment_ids = np.zeros_like(token_ids)
    segment_ids[:, 4:] = 2
    out = backbone(
        {"token_ids": token_ids, "segment_ids": segment_ids, "padding_mask": token_ids != 0}
    )
    return folder, {
        "token_ids": token_ids,
        "segment_ids": segment_ids,
        "sequence_output": np.asarray(out["sequence_output"]),
        "pooled_output": np.asarray(out["pooled_output"]),
    }


def test_a_keras_hub_preset_folder_gives_keras_hubs_outputs(preset):
    folder, reference = preset
    backbone = BertBackbone.from_preset(str(folder))
    # theirs → ours
    ours = np.argsort(read_bert(str(folder)).plan.order)
    out = backbone(
        {"token_ids": ours[reference["token_ids"]], "segment_ids": reference["segment_ids"]}
    )
    # ours also masks padded queries: their rows differ and are never read
    real = reference["token_ids"] != 0
    assert_close(
        np.asarray(out["sequence_output"])[real],
        reference["sequence_output"][real],
        "sequence output",
    )
    assert_close(out["pooled_output"], reference["pooled_output"], "pooler")


def test_its_tokenizer_reads_text_as_keras_hubs(preset):
    folder, reference = preset
    preprocessor = BertClassifier.from_preset(str(folder), num_classes=2).preprocessor
    vocabulary = preprocessor.tokenizer.vocabulary
    token_ids = preprocessor(tf.constant(TEXTS))["token_ids"].numpy()
    theirs = [[VOCABULARY[i] for i in row if i] for row in reference["token_ids"]]
    # lowercased, "café" kept
    assert [[vocabulary[i] for i in row if i] for row in token_ids] == theirs


def test_what_a_keras_hub_folder_lacks_or_is_not_is_refused_in_one_line(preset, tmp_path, capsys):
    folder, _ = preset
    with pytest.raises(
        UserError, match=r"bert: no masked-LM head in its checkpoint, which BertMaskedLM needs"
    ):
        BertMaskedLM.from_preset(str(folder))
    from keras_attn import cli

    # no masked-LM head to export
    assert cli.main(["import", str(folder), str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert (
        "a keras-hub preset folder, which holds no masked-LM head" in err and err.count("\n") == 1
    )
    other = tmp_path / "gpt"
    other.mkdir()
    (other / "config.json").write_text(
        json.dumps({"registered_name": "keras_hub>GPT2Backbone", "config": {}})
    )
    with pytest.raises(UserError) as error:
        BertBackbone.from_preset(str(other))
    assert "config.json: registered_name 'keras_hub>GPT2Backbone'; only keras-hub's" in str(
        error.value
    )
    assert "\n" not in str(error.value)


def _pooler_bias_rewritten(folder, **dataset):
    """The preset's weights file with the pooler's bias dataset made anew from `dataset`."""
    import h5py

    with h5py.File(folder / "model.weights.h5", "r+") as file:
        del file["layers/dense/vars/1"]
        file.create_dataset("layers/dense/vars/1", **dataset)


@pytest.mark.parametrize(
    "dataset, message",
    [
        (  # its data in another file, at an absolute path
            dict(shape=(16,), dtype="float32", external=[("/etc/hostname", 0, 64)]),
            "keeps its data in other files",
        ),
        (  # a shape the file holds no data for: building would allocate it
            dict(shape=(2**28, 16), dtype="float32"),
            "claims 17,179,869,184 bytes of data and the file holds 0",
        ),
    ],
)
def test_a_weights_file_whose_data_is_elsewhere_or_nowhere_is_refused(
    preset, tmp_path, dataset, message
):
    folder = pathlib.Path(shutil.copytree(preset[0], tmp_path / "bert"))
    _pooler_bias_rewritten(folder, **dataset)
    with pytest.raises(UserError, match=message):
        BertBackbone.from_preset(str(folder))


def test_a_broken_bert_export_is_refused_in_one_line(tmp_path):
    """An export's `assets.extra/` of another shape: its settings are read as any other file's."""
    extra = tmp_path / "export" / "assets.extra"
    extra.mkdir(parents=True)
    for name in ("bert_backbone.weights.h5", "vocab.txt"):
        (extra / name).write_text("")
    for settings, message in (
        ("[1, 2]", "not a JSON object of settings"),
        ('{"vocabulary_size": 10}', "no lowercase"),
        ('{"vocabulary_size": "ten", "lowercase": true, "max_length": 8}', "vocabulary_size 'ten'"),
        ('{"layers": 2, "lowercase": true, "max_length": 8}', "'layers': no BERT setting"),
    ):
        (extra / "bert_backbone.json").write_text(settings)
        with pytest.raises(UserError, match=message) as error:
            BertBackbone.from_preset(str(tmp_path / "export"))
        assert "\n" not in str(error.value)
