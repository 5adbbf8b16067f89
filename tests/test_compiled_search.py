"""The search compiled by XLA (`decoding.CompiledSearch`) and the exports
that run it: the same outputs as the searches in TensorFlow's graph, one
program per bucket, and a SavedModel that reloads without keras_attn."""

import json
import os

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_attn import decoding, graph, serving
from keras_attn.decoding import CompiledSearch, Stepper, max_decode_length
from keras_attn.models import Seq2SeqLM, TransformerBackbone
from keras_attn.serving.compiled_routes import COMPILED_ROWS
from pipelines.preprocessors import TranslationPreprocessor
from tests import fresh_process
from tests.fixtures_export import SOURCES, TARGETS, toy_vocabulary

MAX_LENGTH = 40  # source buckets 16, 32, 40; caches of 34, 40, 40 steps
VOCABULARY = 30


@pytest.fixture(scope="module")
def stepper():
    keras.utils.set_random_seed(11)
    return Stepper(
        TransformerBackbone(  # tied output: beams multiply by the table transposed before the loop
            VOCABULARY,
            VOCABULARY,
            max_sequence_length=MAX_LENGTH,
            num_layers=1,
            hidden_dim=16,
            num_heads=2,
            intermediate_dim=32,
            dropout=0.0,
        )
    )


def _sources(lengths, seed=0):
    """`(B, max(lengths))` random ids, row `b` with `lengths[b]` tokens, then [PAD]."""
    rng = np.random.default_rng(seed)
    source = rng.integers(4, VOCABULARY, size=(len(lengths), max(lengths))).astype("int32")
    return np.where(np.arange(max(lengths)) < np.array(lengths)[:, None], source, 0).astype("int32")


@pytest.fixture(scope="module")
def eos_id(stepper):
    """A token that ends some rows mid-way and not others."""
    source = _sources([3, 17, 33, 9])
    tokens = np.asarray(
        decoding.greedy_search(stepper, source, max_decode_length(source), eos_id=-1)["tokens"]
    )
    for token in np.unique(tokens[:, 1:-1]):
        if 0 < sum(token in row[1:-1] for row in tokens) < len(tokens):
            return int(token)
    pytest.fail(f"no token ends some rows but not all: {tokens}")


# Batches of 1 to 4 sources across the source buckets' bounds (16 |
# 17, 32 | 33, up to 40), in programs of (rows, source bucket) (1,
# 16), (2, 32) and (4, 40); then batches that need no other program.
BATCHES = [[16], [17, 3], [33, 1, 32, 40]]
SAME_PROGRAMS = [[3], [32, 20], [40, 2, 35]]


@pytest.mark.parametrize("width", [1, 3])
@pytest.mark.slow
def test_compiled_search_equals_the_search_in_the_graph_with_one_program_per_bucket(
    stepper, eos_id, width
):
    in_graph = graph.function(
        lambda source: decoding.search(
            stepper, source, max_decode_length(source, cap=MAX_LENGTH), width, eos_id=eos_id
        ),
        input_signature=[tf.TensorSpec([None, None], tf.int32)],
    )
    compiled = CompiledSearch(stepper, MAX_LENGTH, eos_id=eos_id)
    ended = []
    for seed, lengths in enumerate(BATCHES + SAME_PROGRAMS):
        source = _sources(lengths, seed)
        expected, found = in_graph(source), compiled(source, width)
        np.testing.assert_array_equal(found["tokens"], expected["tokens"])
        np.testing.assert_allclose(found["scores"], expected["scores"], rtol=1e-5)
        ended += [eos_id in row for row in np.asarray(found["tokens"])]
    assert any(ended) and not all(ended)  # some outputs end at [EOS], others at their budgets
    # Called eagerly, a program is traced once per shape, as XLA
    # compiles it: once per (rows, source bucket).
    program = compiled.greedy_program if width == 1 else compiled.beam_program
    assert program.experimental_get_tracing_count() == len(BATCHES)
    # each source bucket's budget: one cache length a bucket
    assert compiled.cache_lengths == (
        34,
        40,
        40,
    )


@pytest.fixture(scope="module")
def task():
    """A seeded one-layer Transformer translator on a fixed vocabulary
    of the toy sentences' words and letters.
    """
    from pipelines.tokenizers import WordPieceTokenizer

    vocabulary = toy_vocabulary(SOURCES + TARGETS)
    tokenizer = WordPieceTokenizer(vocabulary)
    keras.utils.set_random_seed(7)
    model = TransformerBackbone(
        len(vocabulary),
        len(vocabulary),
        max_sequence_length=12,
        num_layers=1,
        hidden_dim=16,
        num_heads=2,
        intermediate_dim=32,
        dropout=0.0,
    )
    return Seq2SeqLM(model, TranslationPreprocessor(tokenizer, tokenizer, max_length=12))


# Requests of 3 and 4 texts (COMPILED_ROWS: one program of 4 rows a width): blank ones, one with no
# tokens, one cut to max_length, unseen and control characters.
REQUESTS = [["", "ein hund " * 20, "日本語 ☃ \x00\x01 zwei hund läuft"], SOURCES + ["\u200b  "]]
WIDTHS = (1, 4)


def _translate_all(translate):
    """`{(request, width): (translations, scores)}` of `translate(texts, width)`."""
    results = {}
    for index, texts in enumerate(REQUESTS):
        for width in WIDTHS:
            out = translate(tf.constant(texts), tf.constant(width))
            results[index, width] = out["translation"].numpy().tolist(), out["score"].numpy()
    return results


def _programs_in(path):
    """The names of the functions that XLA must compile in the SavedModel at `path`."""
    from tensorflow.core.protobuf import saved_model_pb2

    saved = saved_model_pb2.SavedModel()
    with open(os.path.join(path, "saved_model.pb"), "rb") as file:
        saved.ParseFromString(file.read())
    library = saved.meta_graphs[0].graph_def.library.function
    return sorted(
        f.signature.name.split("__inference_")[1].rsplit("_", 1)[0]
        for f in library
        if "_XlaMustCompile" in f.attr and f.attr["_XlaMustCompile"].b
    )


# In a TensorFlow-only process: `warm_up` compiles the programs of each width at 4 rows; the
# requests' calls of `translate_compiled` then compile nothing (XLA dumps each module it compiles).
_FRESH_PROCESS = """
import glob, json, os, sys
import tensorflow as tf, tensorflow_text
signatures = tf.saved_model.load(sys.argv[1]).signatures
widths = json.loads(sys.argv[3])
compiled = lambda: len(glob.glob(os.path.join(os.environ["DUMP"], "*after_optimizations.txt")))
for width in widths:
    signatures["warm_up"](beam_width=tf.constant(width), rows=tf.constant(4))
warmed = compiled()
translate = signatures["translate_compiled"]
def translated(texts, width):
    out = translate(text=tf.constant(texts), beam_width=tf.constant(width))
    return [t.decode() for t in out["translation"].numpy()]
out = [[translated(texts, w) for w in widths] for texts in json.loads(sys.argv[2])]
assert not [k for k in sys.modules if k.split(".")[0] in ("keras_attn", "keras_hub", "pipelines")]
print(json.dumps([warmed, compiled(), out]))
"""


@pytest.fixture(scope="module")
def exported(task, tmp_path_factory):
    """A compiled translator of `task` and its export (model root, path)."""
    root = tmp_path_factory.mktemp("compiled_root")
    translator = serving.Translator(task)
    return translator, root, serving.export(translator, str(root), "toy")


@pytest.mark.slow
def test_export_translates_small_requests_compiled_as_in_the_graph_and_reloads_without_keras_attn(
    task, exported, tmp_path
):
    assert max(len(texts) for texts in REQUESTS) == COMPILED_ROWS
    (compiled, _, path), in_graph = exported, serving.Translator(task, compiled_search=False)
    assert compiled.compiled is not None and in_graph.compiled is None
    expected, found = (
        _translate_all(in_graph.translate),
        _translate_all(compiled.translate_compiled),
    )
    # greedy at width 1 finds what beam search of width 1 does, and scores it alike
    for key in expected:
        assert found[key][0] == expected[key][0], key
        np.testing.assert_allclose(found[key][1], expected[key][1], rtol=1e-5)
    assert found[0, 1][0][0] == b"" and found[0, 1][1][0] == 0.0 and found[1, 4][0][-1] == b""
    assert len({text for key in found for text in found[key][0]}) >= 3  # outputs that differ
    assert serving.read_metadata(path)["compiled_search"] is True
    # for every shape: XLA compiles each once per shape
    assert _programs_in(path) == [
        "_beam",
        "_greedy",
    ]

    # Weights changed after the export object was made: both paths
    # read them (no copy of the table is kept).
    embeddings = task.backbone.target_embedding.token_embedding.embeddings
    original = embeddings.numpy()
    embeddings.assign(original[::-1] * 3.0)
    try:
        changed, expected_changed = (
            _translate_all(compiled.translate_compiled),
            _translate_all(in_graph.translate),
        )
    finally:
        embeddings.assign(original)
    assert [changed[key][0] for key in changed] != [found[key][0] for key in found]
    for key in expected_changed:
        assert changed[key][0] == expected_changed[key][0], key
        np.testing.assert_allclose(changed[key][1], expected_changed[key][1], rtol=1e-5)

    reloaded = fresh_process.run(
        _FRESH_PROCESS,
        path,
        json.dumps(REQUESTS),
        json.dumps(WIDTHS),
        env=dict(DUMP=str(tmp_path), XLA_FLAGS=f"--xla_dump_to={tmp_path}"),
    )
    assert reloaded.returncode == 0, reloaded.stderr[-3000:]
    warmed, after, strings = json.loads(reloaded.stdout.splitlines()[-1])
    assert warmed > 0 and after == warmed  # the warmed-up programs are the ones the requests run
    assert strings == [
        [[t.decode() for t in found[index, width][0]] for width in WIDTHS]
        for index in range(len(REQUESTS))
    ]


@pytest.mark.parametrize(
    "texts, width", [(["ein hund"] * (COMPILED_ROWS + 1), 1), ([], 1), (["ein hund"], 9)]
)
def test_translate_compiled_refuses_what_it_was_not_made_for_in_one_line(exported, texts, width):
    translator = exported[0]
    with pytest.raises(tf.errors.InvalidArgumentError) as refused:
        translator.translate_compiled(tf.constant(texts, tf.string), tf.constant(width))
    assert (
        f"translate_compiled takes 1 to {COMPILED_ROWS} texts at beam widths up to 8, not "
        f"{len(texts)} at {width} (translate takes any)"
    ) in refused.value.message


@pytest.mark.slow
def test_the_server_runs_one_text_compiled_once_its_width_is_compiled_and_the_rest_in_the_graph(
    exported,
):
    import asyncio

    import httpx

    from keras_attn.config import ServeConfig
    from keras_attn.serving.server import create_app

    translator, root, _ = exported
    app = create_app(ServeConfig(str(root), compiled_widths=(1,), max_batch_size=1, poll_seconds=0))
    routed = []
    signature = app.state.routes.signature
    app.state.routes.signature = lambda *args: routed.append(signature(*args)) or routed[-1]
    requests = [(["ein hund läuft"], 1), (["ein hund läuft"], 2), (SOURCES[:2], 1)]

    async def serve():
        async with app.router.lifespan_context(app):
            found = app.state.store.find("toy")
            for _ in range(600):
                if app.state.routes.ready(found):
                    break
                await asyncio.sleep(0.1)
            async with httpx.AsyncClient(
                transport=httpx.ASGITransport(app=app), base_url="http://test"
            ) as client:
                asked = [("translate", texts, width) for texts, width in requests]
                asked.append(("translate_compiled", ["ein hund"] * (COMPILED_ROWS + 1), 1))
                bodies = [
                    {"signature_name": name, "inputs": {"text": texts, "beam_width": width}}
                    for name, texts, width in asked
                ]
                return [await client.post("/v1/models/toy:predict", json=body) for body in bodies]

    *answers, refused = asyncio.run(serve())
    # (the last as asked)
    assert routed == [
        "translate_compiled",
        "translate",
        "translate",
        "translate_compiled",
    ]
    for answer, (texts, width) in zip(answers, requests):
        expected = translator.translate(tf.constant(texts), tf.constant(width))
        assert answer.json()["outputs"]["translation"] == [
            t.decode() for t in expected["translation"].numpy()
        ]
    assert refused.status_code == 400
    assert refused.json()["error"].startswith(
        "assertion failed: [translate_compiled takes 1 to 4 texts"
    )


@pytest.mark.parametrize(
    "given, widths",
    [([], (1, 4)), (["--compiled-widths"], []), (["--compiled-widths", "1", "8"], [1, 8])],
)
def test_serve_takes_the_compiled_widths_as_numbers_and_none_when_given_empty(given, widths):
    from keras_attn import cli, config

    args = cli.build_parser().parse_args(["serve", "saved_models", *given])
    assert cli.config_from(args, config.ServeConfig).compiled_widths == widths
    with pytest.raises(SystemExit):  # argparse's one-line refusal
        cli.build_parser().parse_args(["serve", "--compiled-widths", "0"])
    args = cli.build_parser().parse_args(["serve", "--compiled-widths", "4", "100"])
    with pytest.raises(
        ValueError, match=r"^--compiled-widths 100: the compiled search takes beam "
    ):
        cli.config_from(args, config.ServeConfig)


def test_a_backbone_without_preallocated_caches_exports_without_the_compiled_search(task):
    from keras_attn.models import Seq2SeqBackbone

    size = task.preprocessor.source_tokenizer.vocabulary_size
    translator = serving.Translator(
        Seq2SeqLM(Seq2SeqBackbone(size, size, hidden_dim=8), task.preprocessor)
    )
    assert translator.compiled is None and translator.export_metadata() == {
        "compiled_search": False
    }
