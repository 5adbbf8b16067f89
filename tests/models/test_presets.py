"""One preset rule for every model: explicit arguments win, the preset fills the rest."""

import pytest

from keras_attn.models import bert_backbone, seq2seq, transformer
from keras_attn.models.presets import PRESETS, architecture


def _blocks(model, prefix):
    return [layer for layer in model.layers if layer.name.startswith(prefix)]


def test_explicit_arguments_win_over_the_preset_in_every_model():
    model = transformer(50, 50, preset="tiny", num_layers=1, num_heads=2)
    assert len(_blocks(model, "encoder_block_")) == 1
    block = _blocks(model, "encoder_block_")[0]
    assert block.num_heads == 2 and block.intermediate_dim == PRESETS["transformer"]["tiny"]["intermediate_dim"]
    assert model.get_layer("source_embedding").hidden_dim == PRESETS["transformer"]["tiny"]["hidden_dim"]

    model = seq2seq(50, 50, preset="small", hidden_dim=32)  # the tied embeddings follow hidden_dim
    encoder = model.get_layer("encoder")
    assert (encoder.num_layers, encoder.hidden_dim) == (PRESETS["seq2seq"]["small"]["num_layers"], 32)

    backbone = bert_backbone(50, preset="mini", num_layers=1)
    assert len(_blocks(backbone, "encoder_block_")) == 1
    assert backbone.get_layer("pooler").units == PRESETS["bert"]["mini"]["hidden_dim"]


def test_without_a_preset_the_model_defaults_fill_what_is_not_given():
    model = transformer(50, 50, hidden_dim=32, num_heads=4)
    assert len(_blocks(model, "encoder_block_")) == 3 and _blocks(model, "encoder_block_")[0].intermediate_dim == 512
    assert architecture("seq2seq", None, dict(num_layers=1, hidden_dim=256), hidden_dim=None) == dict(
        num_layers=1, hidden_dim=256)


@pytest.mark.parametrize("family, build", [
    ("transformer", lambda preset: transformer(50, 50, preset=preset)),
    ("seq2seq", lambda preset: seq2seq(50, 50, preset=preset)),
    ("bert", lambda preset: bert_backbone(50, preset=preset)),
])
def test_an_unknown_preset_names_the_presets(family, build):
    names = ", ".join(PRESETS[family])
    with pytest.raises(ValueError, match=f"^unknown {family} preset 'huge'; the presets are {names}\\.$"):
        build("huge")
