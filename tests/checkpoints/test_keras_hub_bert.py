"""keras-hub BERT preset folders (what `save_to_preset` writes) load into our `BertBackbone` with
keras-hub's outputs, and their tokenizer reads text as keras-hub's does."""

import json

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
