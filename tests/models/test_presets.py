"""One preset rule for every model: explicit arguments win, the preset fills the rest."""

import pytest

from keras_attn.models import BertBackbone, Seq2SeqBackbone, TransformerBackbone
from keras_attn.presets import PRESETS, architecture


def test_explicit_arguments_win_over_the_preset_in_every_model():
    model = TransformerBackbone(50, 50, preset="tiny", num_layers=1, num_heads=2)
    assert len(model.encoder_blocks) == len(model.decoder_blocks) == 1
    block = model.encoder_blocks[0]
    assert (
        block.num_heads == 2
        and block.intermediate_dim == PRESETS["transformer"]["tiny"]["intermediate_dim"]
    )
    assert model.source_embedding.hidden_dim == PRESETS["transformer"]["tiny"]["hidden_dim"]

    # the tied embeddings follow hidden_dim
    model = Seq2SeqBackbone(50, 50, preset="small", hidden_dim=32)
    assert (model.encoder.num_layers, model.encoder.hidden_dim) == (
        PRESETS["seq2seq"]["small"]["num_layers"],
        32,
    )

    backbone = BertBackbone(50, preset="mini", num_layers=1)
    assert len(backbone.encoder_blocks) == 1
    assert backbone.pooler.units == PRESETS["bert"]["mini"]["hidden_dim"]


def test_without_a_preset_the_model_defaults_fill_what_is_not_given():
    model = TransformerBackbone(50, 50, hidden_dim=32, num_heads=4)
    assert len(model.encoder_blocks) == 3 and model.encoder_blocks[0].intermediate_dim == 512
    assert architecture(
        "seq2seq", None, dict(num_layers=1, hidden_dim=256), hidden_dim=None
    ) == dict(num_layers=1, hidden_dim=256)


@pytest.mark.parametrize(
    "family, build",
    [
        ("transformer", lambda preset: TransformerBackbone(50, 50, preset=preset)),
        ("seq2seq", lambda preset: Seq2SeqBackbone(50, 50, preset=preset)),
        ("bert", lambda preset: BertBackbone(50, preset=preset)),
    ],
)
def test_an_unknown_preset_names_the_presets(family, build):
    names = ", ".join(PRESETS[family])
    with pytest.raises(
        ValueError, match=f"^unknown {family} preset 'huge'; the presets are {names}\\.$"
    ):
        build("huge")
