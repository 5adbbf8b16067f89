import base64
import json
import os
import shutil
import stat

import numpy as np
import pytest

from keras_attn import serving
from tests import fresh_process

pytest_plugins = ["tests.fixtures_export"]

HOSTILE = [
    "",
    "   \t ",
    "\u200b\u00ad",  # invisible characters only: no tokens
    "x" * 10_000,
    "ein hund " * 1_111,
    b"caf\xc3\xa9 \xff\xfe invalid \x80 bytes",
    "日本語の文 ☃ never seen",
    "ein hund läuft .",
]
NO_TOKENS = [True, True, True, False, False, False, False, False]


MODELS = {  # the translator fixture and the export fixture of each model
    "transformer": ("tiny_translator", "tiny_export"),
    "seq2seq": ("tiny_seq2seq_translator", "tiny_seq2seq_export"),
}


def _as_bytes(texts):
    return [t if isinstance(t, bytes) else t.encode("utf-8") for t in texts]


def _translate(translator, texts, beam_width):
    out = translator.translate(np.array(_as_bytes(texts), dtype=object), np.int32(beam_width))
    return {key: value.numpy() for key, value in out.items()}


@pytest.mark.parametrize("model", sorted(MODELS))
def test_an_export_keeps_its_task_which_load_task_rebuilds_with_the_exports_weights(
    model, request, tmp_path
):
    from keras_attn.errors import UserError
    from keras_attn.serving.translator import load_task

    translator, export = (request.getfixturevalue(name) for name in MODELS[model])
    task = load_task(export)
    assert type(task.backbone) is type(translator.model)
    assert len(task.backbone.weights) == len(translator.model.weights)
    for ours, loaded in zip(translator.model.weights, task.backbone.weights):
        np.testing.assert_array_equal(loaded.numpy(), ours.numpy())
    # Vocabularies, max_length; not the layer's name, numbered in the process that exported (one
    # built once per test run, maybe by another pytest-xdist process).
    unnamed = lambda config: {key: value for key, value in config.items() if key != "name"}  # noqa: E731
    assert unnamed(task.preprocessor.get_config()) == unnamed(translator.preprocessor.get_config())
    with pytest.raises(UserError, match="no translator_task.json in assets.extra"):
        load_task(str(tmp_path))


@pytest.mark.parametrize("model", sorted(MODELS))
@pytest.mark.slow
def test_hostile_input_gives_one_translation_per_element(model, request):
    tiny_translator = request.getfixturevalue(MODELS[model][0])
    for beam_width in (1, 3):
        out = _translate(tiny_translator, HOSTILE, beam_width)
        assert len(out["translation"]) == len(HOSTILE)
        assert np.all(np.isfinite(out["score"]))
        assert out["truncated"].tolist() == [False, False, False, False, True, False, False, False]
        # No tokens: an empty translation with score 0.0 (certain);
        # any decoded output scores below 0.
        assert [s == 0.0 for s in out["score"]] == NO_TOKENS
        assert all(t == b"" for t, empty in zip(out["translation"], NO_TOKENS) if empty)
    attention = {
        k: v.numpy()
        for k, v in tiny_translator.attention(np.array(_as_bytes(HOSTILE), dtype=object)).items()
    }
    assert attention["cross_attention"].shape[0] == len(HOSTILE)
    assert np.all(np.isfinite(attention["cross_attention"]))
    for row, empty in enumerate(NO_TOKENS):  # no output and no attention for no tokens
        assert np.any(attention["output_tokens"][row] != b"[PAD]") != empty
        assert np.any(attention["cross_attention"][row] != 0) != empty


def test_empty_batches_give_empty_results_of_the_right_shapes(tiny_translator):
    nothing = _translate(tiny_translator, [], 4)
    assert {key: value.shape for key, value in nothing.items()} == {
        "translation": (0,),
        "score": (0,),
        "truncated": (0,),
    }
    blanks = _translate(tiny_translator, ["", " "], 4)
    assert blanks["translation"].tolist() == [b"", b""]
    assert blanks["score"].tolist() == [0.0, 0.0] and blanks["truncated"].tolist() == [False, False]
    attention = tiny_translator.attention(np.array([], dtype=object))
    assert attention["cross_attention"].shape[0] == 0 and attention["output_tokens"].shape[0] == 0


def test_beam_width_below_one_is_greedy_and_a_huge_one_is_capped(tiny_translator):
    from tests.fixtures_export import SOURCES

    texts = SOURCES + ["zwei hund"]
    greedy = _translate(tiny_translator, texts, 1)
    cap = min(tiny_translator.max_beam_width, tiny_translator.target_tokenizer.vocabulary_size)
    widest = _translate(tiny_translator, texts, cap)
    # the widths differ here
    assert widest["translation"].tolist() != greedy["translation"].tolist()
    for width, reference in ((0, greedy), (-5, greedy), (10_000, widest)):
        out = _translate(tiny_translator, texts, width)
        assert out["translation"].tolist() == reference["translation"].tolist(), width
        np.testing.assert_allclose(out["score"], reference["score"], rtol=1e-6)


_FRESH_PROCESS = """
import base64, json, sys
import tensorflow as tf, tensorflow_text
texts = tf.constant([base64.b64decode(t) for t in json.load(sys.stdin)])
def decode(x):
    if isinstance(x, list):
        return [decode(y) for y in x]
    return x.decode() if isinstance(x, bytes) else x
results = []
for path in sys.argv[1:]:
    m = tf.saved_model.load(path)
    out = {}
    for b in (1, 3):
        r = m.signatures["translate"](text=texts, beam_width=tf.constant(b))
        out[b] = {k: v.numpy().tolist() for k, v in r.items() if k != "translation"}
        out[b]["translation"] = [t.decode() for t in r["translation"].numpy()]
    attention = m.signatures["attention"](text=texts)
    out["attention"] = {k: decode(v.numpy().tolist()) for k, v in attention.items()}
    results.append(out)
assert not [k for k in sys.modules if k.split(".")[0] in ("keras_attn", "keras_hub", "pipelines")]
print(json.dumps(results))
"""


@pytest.mark.slow
def test_exports_reload_in_a_fresh_tensorflow_only_process(request, tmp_path):
    """Both models' exports, in one process (starting TensorFlow costs seconds)."""
    from tests.fixtures_export import SOURCES

    texts = HOSTILE[:6] + SOURCES
    translators = [request.getfixturevalue(translator) for translator, _ in MODELS.values()]
    exports = [request.getfixturevalue(path) for _, path in MODELS.values()]
    (tmp_path / "plain").mkdir()  # versions get the permissions of any new folder
    for path in exports:
        assert stat.S_IMODE(os.stat(path).st_mode) == stat.S_IMODE(
            (tmp_path / "plain").stat().st_mode
        )
        assert os.path.exists(os.path.join(path, "assets"))

    result = fresh_process.run(  # raw bytes, invalid UTF-8 too
        _FRESH_PROCESS,
        *exports,
        input=json.dumps([base64.b64encode(t).decode() for t in _as_bytes(texts)]),
    )
    assert result.returncode == 0, result.stderr[-2000:]
    for translator, reloaded in zip(
        translators, json.loads(result.stdout.strip().splitlines()[-1])
    ):
        for beam in ("1", "3"):
            expected = _translate(translator, texts, int(beam))
            assert reloaded[beam]["translation"] == [t.decode() for t in expected["translation"]]
            assert reloaded[beam]["truncated"] == expected["truncated"].tolist()
            np.testing.assert_allclose(
                reloaded[beam]["score"], expected["score"], rtol=1e-5, atol=1e-6
            )
        attention = {
            k: v.numpy()
            for k, v in translator.attention(np.array(_as_bytes(texts), dtype=object)).items()
        }
        served = reloaded["attention"]
        np.testing.assert_allclose(
            served["cross_attention"], attention["cross_attention"], rtol=1e-5, atol=1e-6
        )
        for key in ("source_tokens", "output_tokens"):
            assert served[key] == [[t.decode() for t in row] for row in attention[key]]
        assert served["translation"] == [t.decode() for t in attention["translation"]]


def test_an_unchanged_model_is_not_exported_again(tiny_translator, tiny_export):
    root = os.path.dirname(os.path.dirname(tiny_export))
    assert serving.read_metadata(tiny_export)["fingerprint"] == tiny_translator.fingerprint()
    assert serving.export_if_changed(tiny_translator, root, "toy") == (tiny_export, False)
    assert sorted(os.listdir(os.path.join(root, "toy"))) == ["1"]
    weight = tiny_translator.model.weights[-1]
    kept = weight.numpy()
    weight.assign(kept + 1.0)
    try:
        path, new = serving.export_if_changed(tiny_translator, root, "toy")
        assert (path, new) == (os.path.join(root, "toy", "2"), True)
        assert serving.newest_version(root, "toy") == path
    finally:
        weight.assign(kept)
        shutil.rmtree(os.path.join(root, "toy", "2"), ignore_errors=True)
    assert serving.export_if_changed(tiny_translator, root, "toy") == (tiny_export, False)
