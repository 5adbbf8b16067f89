"""Backbones and BERT's tasks: complete configs, parts as attributes,
one stepper, no lookup by name.
"""

import re
from pathlib import Path

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_attn.decoding import Stepper, beam_search, greedy_search
from keras_attn.models import (
    BertBackbone,
    BertClassifier,
    BertMaskedLM,
    BertPretrainer,
    Captioner,
    CaptionerBackbone,
    Seq2SeqBackbone,
    TransformerBackbone,
)
from pipelines.preprocessors import BertPreprocessor
from pipelines.special_tokens import BOS_ID, PAD_ID, SPECIAL_TOKENS

SOURCE = np.array([[5, 6, 7, 8, 3], [9, 10, 3, 0, 0]], "int32")
TARGET_IN = np.array([[BOS_ID, 11, 12, 13], [BOS_ID, 14, 15, PAD_ID]], "int32")
TOKENS = {
    "token_ids": np.array([[4, 9, 6, 5, 10, 5]]),
    "segment_ids": np.array([[0, 0, 0, 0, 1, 1]]),
}
SMALL = dict(num_layers=1, hidden_dim=16)
# a 40-token vocabulary
WORDS = [
    *SPECIAL_TOKENS,
    *(f"w{index}" for index in range(40 - len(SPECIAL_TOKENS))),
]

MODELS = {
    "transformer": lambda: TransformerBackbone(
        40,
        30,
        max_sequence_length=16,
        num_heads=2,
        intermediate_dim=32,
        num_decoder_layers=2,
        norm_first=True,
        tie_output=False,
        **SMALL,
    ),
    "transformer_shared": lambda: TransformerBackbone(
        40,
        40,
        max_sequence_length=16,
        num_heads=2,
        share_embeddings=True,
        intermediate_dim=32,
        **SMALL,
    ),
    "seq2seq_bahdanau": lambda: Seq2SeqBackbone(40, 30, attention="bahdanau", **SMALL),
    "seq2seq_luong_local_m": lambda: Seq2SeqBackbone(
        40, 30, cell="gru", attention="luong", local="monotonic", window=2, **SMALL
    ),
    "seq2seq_none": lambda: Seq2SeqBackbone(40, 30, attention="none", bidirectional=True, **SMALL),
    "bert": lambda: BertBackbone(40, max_sequence_length=16, num_heads=2, norm_first=True, **SMALL),
    "bert_pretrainer": lambda: BertPretrainer(
        BertBackbone(40, max_sequence_length=16, num_heads=2, **SMALL)
    ),
    "bert_masked_lm": lambda: BertMaskedLM(
        BertBackbone(40, max_sequence_length=16, num_heads=2, **SMALL),
        preprocessor=BertPreprocessor(WORDS, max_length=16),
    ),
    "bert_classifier": lambda: BertClassifier(
        BertBackbone(40, max_sequence_length=16, num_heads=2, **SMALL), num_classes=3, dropout=0.2
    ),
    "captioner": lambda: CaptionerBackbone(
        40, image_size=8, filters=(4,), feature_dim=8, hidden_dim=16
    ),
    "captioner_task": lambda: Captioner(
        CaptionerBackbone(40, image_size=8, filters=(4,), attention="none", hidden_dim=16)
    ),
}
ENCODER_DECODERS = [name for name in MODELS if name.startswith(("transformer", "seq2seq"))]


def _inputs(name):
    if name.startswith("captioner"):
        return {
            "image": np.random.default_rng(0).random((2, 8, 8, 3)).astype("float32"),
            "target_in": TARGET_IN,
        }
    if name.startswith("bert"):
        masked = name in ("bert_pretrainer", "bert_masked_lm")
        return dict(TOKENS, mask_positions=np.array([[2, 4]])) if masked else TOKENS
    return {"source": SOURCE, "target_in": TARGET_IN}


def _outputs(model, inputs):
    return tf.nest.map_structure(np.asarray, model(inputs, training=False))


@pytest.mark.parametrize("name", MODELS)
@pytest.mark.slow
def test_the_config_rebuilds_the_model_and_the_keras_file_round_trips(name, tmp_path):
    model = MODELS[name]()
    config = model.get_config()
    rebuilt = model.__class__.from_config(config)
    assert rebuilt.get_config() == config
    assert [w.shape for w in rebuilt.weights] == [w.shape for w in model.weights]
    rebuilt.set_weights(model.get_weights())
    expected = _outputs(model, _inputs(name))
    tf.nest.map_structure(np.testing.assert_array_equal, _outputs(rebuilt, _inputs(name)), expected)
    model.save(tmp_path / "model.keras")
    loaded = keras.saving.load_model(tmp_path / "model.keras")
    assert type(loaded) is type(model) and loaded.get_config() == config
    tf.nest.map_structure(np.testing.assert_array_equal, _outputs(loaded, _inputs(name)), expected)


def test_parts_are_attributes():
    model = MODELS["transformer"]()
    assert len(model.encoder_blocks) == 1 and len(model.decoder_blocks) == 2
    assert model.encoder_norm is not None and model.output_projection is not None
    shared = MODELS["transformer_shared"]()
    assert shared.target_embedding is shared.source_embedding and shared.output_projection is None
    pretrainer = MODELS["bert_pretrainer"]()
    assert pretrainer.backbone.token_embedding is pretrainer.backbone.embedding.token_embedding


@pytest.mark.parametrize("name", ENCODER_DECODERS)
def test_one_stepper_decodes_every_encoder_decoder_as_the_teacher_forced_model(name):
    """Each cached step's logits equal the full model's at that position (greedy's tokens fed)."""
    keras.utils.set_random_seed(1)
    model = MODELS[name]()
    stepper = Stepper(model)
    greedy = np.asarray(greedy_search(stepper, SOURCE, 5, eos_id=-1)["tokens"])
    target_in = np.concatenate([np.full((2, 1), BOS_ID), greedy[:, :-1]], axis=1).astype("int32")
    full = np.asarray(model({"source": SOURCE, "target_in": target_in}, training=False))
    allowed = full.copy()
    allowed[..., [PAD_ID, BOS_ID]] = -np.inf  # never emitted
    np.testing.assert_array_equal(greedy, allowed.argmax(-1))
    state = stepper.initial_state(SOURCE)
    for index in range(5):
        logits, state = stepper.step(tf.constant(target_in[:, index]), state, index)
        np.testing.assert_allclose(logits, full[:, index], atol=1e-5)
    # Beam search keeps each source's encoder side once: the state's "encoded" part has B rows.
    beams = beam_search(stepper, SOURCE, 5, beam_width=3, eos_id=-1)
    assert np.asarray(beams["tokens"]).shape[:2] == (2, 5)


def test_no_code_finds_a_layer_by_its_name():
    root = Path(__file__).resolve().parents[2]
    lookups = re.compile(r"get_layer\(|\.name\.startswith\(|\.name ==")
    found = [
        f"{path.relative_to(root)}:{number}"
        for folder in ("keras_attn", "pipelines", "examples")
        for path in sorted((root / folder).rglob("*.py"))
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if lookups.search(line)
    ]
    assert not found, found
