import json
import os
import stat
import subprocess
import sys

import numpy as np
import pytest

from keras_attn import export
from keras_attn.models import TransformerStepper, transformer
from pipelines import tokenizers

SOURCES = ["ein hund läuft .", "zwei katzen schlafen .", "der mann isst einen apfel ."]
TARGETS = ["a dog runs .", "two cats sleep .", "the man eats an apple ."]
HOSTILE = [
    "",
    "   \t ",
    "x" * 10_000,
    "ein hund " * 1_111,
    b"caf\xc3\xa9 \xff\xfe invalid \x80 bytes",
    "日本語の文 ☃ never seen",
    "ein hund läuft .",
]


@pytest.fixture(scope="module")
def translator():
    source = tokenizers.WordPieceTokenizer(tokenizers.learn_wordpiece_vocabulary(SOURCES, vocab_size=100))
    target = tokenizers.WordPieceTokenizer(tokenizers.learn_wordpiece_vocabulary(TARGETS, vocab_size=100))
    model = transformer(
        source.vocabulary_size, target.vocabulary_size, max_length=12, num_layers=1,
        hidden_dim=16, num_heads=2, intermediate_dim=32, dropout=0.0,
    )
    return export.Translator(TransformerStepper(model), source, target, max_length=12)


def _translate(translator, texts, beam_width):
    out = translator.translate(np.array(texts, dtype=object), np.int32(beam_width))
    return [t.decode("utf-8") for t in out["translation"].numpy()], out


def test_hostile_input_gives_one_translation_per_element(translator):
    for beam_width in (1, 3):
        translations, out = _translate(translator, HOSTILE, beam_width)
        assert len(translations) == len(HOSTILE)
        assert np.all(np.isfinite(out["score"].numpy()))
        assert out["truncated"].numpy().tolist() == [False, False, False, True, False, False, False]
    attention = translator.attention(np.array(HOSTILE, dtype=object))
    assert attention["cross_attention"].shape[0] == len(HOSTILE)
    assert np.all(np.isfinite(attention["cross_attention"].numpy()))


def test_export_reloads_in_a_fresh_tensorflow_only_process(translator, tmp_path):
    texts = [t if isinstance(t, str) else t.decode("utf-8", "replace") for t in HOSTILE[:4]] + SOURCES
    expected = {beam: _translate(translator, texts, beam)[0] for beam in (1, 3)}
    path = export.export(translator, str(tmp_path), "toy")
    assert path == os.path.join(str(tmp_path), "toy", "1")
    assert export.export(translator, str(tmp_path), "toy").endswith(os.path.join("toy", "2"))
    assert sorted(os.listdir(tmp_path / "toy")) == ["1", "2"]
    (tmp_path / "plain").mkdir()  # versions get the permissions of any new folder
    assert stat.S_IMODE(os.stat(path).st_mode) == stat.S_IMODE((tmp_path / "plain").stat().st_mode)
    assert os.path.exists(os.path.join(path, "assets"))

    script = (
        "import json, sys\n"
        "import tensorflow as tf, tensorflow_text\n"
        "m = tf.saved_model.load(sys.argv[1])\n"
        "texts = tf.constant(json.loads(sys.argv[2]))\n"
        "out = {b: [t.decode() for t in m.signatures['translate'](text=texts, beam_width=tf.constant(b))['translation'].numpy()] for b in (1, 3)}\n"
        "assert not [k for k in sys.modules if k.split('.')[0] in ('keras_attn', 'keras_hub', 'pipelines')]\n"
        "print(json.dumps(out))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script, path, json.dumps(texts)],
        capture_output=True, text=True, timeout=300,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"},
    )
    assert result.returncode == 0, result.stderr[-2000:]
    reloaded = json.loads(result.stdout.strip().splitlines()[-1])
    assert reloaded == {str(beam): expected[beam] for beam in (1, 3)}

    cli = os.path.join(os.path.dirname(sys.executable), "saved_model_cli")
    shown = subprocess.run([cli, "show", "--dir", path, "--all"], capture_output=True, text=True, timeout=300)
    assert "signature_def['translate']" in shown.stdout
    assert "signature_def['attention']" in shown.stdout


def test_decoding_and_tokenizers_share_the_special_token_ids():
    from keras_attn import decoding

    assert (decoding.PAD_ID, decoding.UNK_ID, decoding.BOS_ID, decoding.EOS_ID) == (
        tokenizers.PAD_ID, tokenizers.UNK_ID, tokenizers.BOS_ID, tokenizers.EOS_ID,
    )
