"""Tiny untrained translators and a captioner, and one export of each,
shared by the tests that serve models.

Use with `pytest_plugins = ["tests.fixtures_export"]` in a test module: the
session-scoped fixtures are then built once for all the modules that ask.
The translators' exports and the model root are built once for the whole
test run: under pytest-xdist the first process to ask builds them and every
process works on its own copy.
"""

import os
import shutil

import filelock
import keras
import pytest

from keras_attn import serving
from keras_attn.models import (
    BertBackbone,
    BertMaskedLM,
    Seq2SeqBackbone,
    Seq2SeqLM,
    TransformerBackbone,
)
from pipelines import tokenizers
from pipelines.preprocessors import BertPreprocessor, TranslationPreprocessor
from pipelines.special_tokens import SPECIAL_TOKENS

SOURCES = ["ein hund läuft .", "zwei katzen schlafen .", "der mann isst einen apfel ."]
TARGETS = ["a dog runs .", "two cats sleep .", "the man eats an apple ."]


def toy_vocabulary(texts):
    """The special tokens, the texts' words, their other letters, and
    every letter as a continuation piece.

    The same ids in every process, where a learned WordPiece vocabulary
    breaks ties in hash-map order (HuggingFace `tokenizers`), so that a
    process's translator is the model another process exported.
    """
    words = sorted({word for line in texts for word in line.split()})
    letters = sorted(set("".join(texts).replace(" ", "")) - set(words))
    pieces = ["##" + letter for letter in sorted(set("".join(texts)) - {" "})]
    return [*SPECIAL_TOKENS, *words, *letters, *pieces]


def _tokenizers():
    return tuple(
        tokenizers.WordPieceTokenizer(toy_vocabulary(texts)) for texts in (SOURCES, TARGETS)
    )


def _built_once(tmp_path_factory, name, build):
    """A folder `build(folder)` fills, built once for the test run;
    returns this process's copy of it.

    Under pytest-xdist the processes share one build (pytest-xdist's recipe: a folder beside the
    processes' own temporary folders, made under a file lock by the first to ask) and each copies
    it, so a test that adds a version to its copy changes nothing for the other process.
    """
    own = tmp_path_factory.mktemp(name)
    if os.environ.get("PYTEST_XDIST_WORKER") is None:
        build(own)
        return own
    shared = tmp_path_factory.getbasetemp().parent / name
    with filelock.FileLock(f"{shared}.lock"):
        built = shared.with_name(f"{name}.built")
        if not built.exists():
            shutil.rmtree(shared, ignore_errors=True)  # what a failed build left
            shared.mkdir()
            build(shared)  # in place: an export's metadata names files beside it by their paths
            built.touch()
    shutil.copytree(shared, own, symlinks=True, dirs_exist_ok=True)
    return own


@pytest.fixture(scope="session")
def tiny_translator():
    """A seeded one-layer Transformer on a three-sentence vocabulary (its outputs are noise)."""
    source, target = _tokenizers()
    keras.utils.set_random_seed(7)
    model = TransformerBackbone(
        source.vocabulary_size,
        target.vocabulary_size,
        max_sequence_length=12,
        num_layers=1,
        hidden_dim=16,
        num_heads=2,
        intermediate_dim=32,
        dropout=0.0,
    )
    # Without translate_compiled, whose tracing adds seconds to each export: tested on its own
    # (tests/test_compiled_search.py).
    task = Seq2SeqLM(model, TranslationPreprocessor(source, target, max_length=12))
    return serving.Translator(task, compiled_search=False)


@pytest.fixture(scope="session")
def tiny_seq2seq_translator():
    """A seeded Bahdanau GRU Seq2Seq (bidirectional encoder, so with its bridge), untrained."""
    source, target = _tokenizers()
    keras.utils.set_random_seed(7)
    model = Seq2SeqBackbone(
        source.vocabulary_size,
        target.vocabulary_size,
        cell="gru",
        bidirectional=True,
        hidden_dim=16,
        attention="bahdanau",
        dropout=0.0,
    )
    return serving.Translator(
        Seq2SeqLM(model, TranslationPreprocessor(source, target, max_length=12))
    )


def _export_once(translator, root, name):
    split = {"test_src": str(root / "test.src"), "test_ref": str(root / "test.ref")}
    (root / "test.src").write_text("".join(s + "\n" for s in SOURCES))
    (root / "test.ref").write_text("".join(t + "\n" for t in TARGETS))
    path = serving.export(translator, str(root), name, metadata=split)
    assert path == os.path.join(str(root), name, "1")
    return path


@pytest.fixture(scope="session")
def tiny_export(request, tmp_path_factory):
    """`<root>/toy/1`, `tiny_translator` exported once, naming a test
    split of its "run" as the job's exports do.

    Tests may add versions under `<root>/toy` but must remove them again.
    """
    root = _built_once(
        tmp_path_factory,
        "exports",
        lambda root: _export_once(request.getfixturevalue("tiny_translator"), root, "toy"),
    )
    return str(root / "toy" / "1")


@pytest.fixture(scope="session")
def tiny_seq2seq_export(request, tmp_path_factory):
    """`<root>/toy_seq2seq/1`, as `tiny_export`."""
    root = _built_once(
        tmp_path_factory,
        "seq2seq_exports",
        lambda root: _export_once(
            request.getfixturevalue("tiny_seq2seq_translator"), root, "toy_seq2seq"
        ),
    )
    return str(root / "toy_seq2seq" / "1")


_LOADED = {}  # (loader's name, folder) → what it loaded, for this test run


def _load_each_folder_once(monkeypatch, loader):
    """Replaces `keras_attn.cli`'s function `loader` (a folder → what it
    loads) with one that loads each folder once per test run. Refusals
    are not cached: a folder that fails to load fails every time."""
    from keras_attn import cli

    real = getattr(cli, loader)

    def load(model_dir):
        key = (loader, os.path.realpath(model_dir))
        if key not in _LOADED:
            _LOADED[key] = real(model_dir)
        return _LOADED[key]

    monkeypatch.setattr(cli, loader, load)
    return load


@pytest.fixture
def cli_loads_once(monkeypatch):
    """Makes `keras_attn.cli` load each translation export once per
    test run (loading and its first calls cost seconds)."""
    _load_each_folder_once(monkeypatch, "load_translation_export")


@pytest.fixture
def cli_loads_saved_models_once(monkeypatch):
    """Makes `keras_attn.cli` load each SavedModel folder once per test run; returns the loader, so
    that a test reads an export as the commands do. What a command checks after loading (its
    signatures, the files beside the SavedModel) it checks every time."""
    return _load_each_folder_once(monkeypatch, "_load_saved_model")


@pytest.fixture(scope="session")
def model_root(tiny_export, tiny_seq2seq_export, tmp_path_factory):
    """A model root as `keras-attn serve` finds one: toy/1 (a Transformer translator), ct2/1 (toy/1
    converted for CTranslate2), rnn/1 (a Bahdanau Seq2Seq translator), bert/1 (fill-mask), broken/1
    (no SavedModel in it) and escape -> a folder outside the root holding a good export. Tests may
    add versions but must remove them again."""
    return (
        _built_once(
            tmp_path_factory,
            "model_root",
            lambda folder: _fill_model_root(
                folder / "root", folder / "outside", tiny_export, tiny_seq2seq_export
            ),
        )
        / "root"
    )


def _fill_model_root(root, outside, tiny_export, tiny_seq2seq_export):
    from keras_attn.jobs.translation import export_to_ctranslate2

    shutil.copytree(tiny_export, root / "toy" / "1")
    (root / "ct2").mkdir()
    export_to_ctranslate2(tiny_export, str(root / "ct2" / "1"))
    shutil.copytree(tiny_seq2seq_export, root / "rnn" / "1")
    keras.utils.set_random_seed(3)
    words = [*SPECIAL_TOKENS, "the", "cat", "sat", "on", "mat", ".", "no", "mask", "here"]
    preprocessor = BertPreprocessor(words, max_length=16, lowercase=True)
    task = BertMaskedLM(
        BertBackbone(
            len(words),
            max_sequence_length=16,
            num_layers=1,
            hidden_dim=16,
            num_heads=2,
            intermediate_dim=32,
        ),
        preprocessor=preprocessor,
    )
    serving.export(serving.BertServer(task), str(root), "bert")
    (root / "broken" / "1").mkdir(parents=True)
    (root / "broken" / "1" / "saved_model.pb").write_bytes(b"not a SavedModel")
    shutil.copytree(tiny_export, outside / "1")
    os.symlink(outside, root / "escape")


@pytest.fixture(scope="session")
def tiny_captioner(tmp_path_factory):
    """An untrained tiny captioner (weights fixed by the seed) on a vocabulary of generated scenes,
    a few test scenes and the captioner's export's path."""
    from keras_attn.models import Captioner
    from pipelines.preprocessors import CaptionPreprocessor
    from pipelines.scenes import scenes_corpus

    keras.utils.set_random_seed(4)
    scenes = scenes_corpus(seed=1, train_size=40, valid_size=2, test_size=3, held_out_size=2)
    preprocessor = CaptionPreprocessor(
        tokenizers.learn_wordpiece_vocabulary(scenes["train"].captions, 60), max_length=10
    )
    task = Captioner.from_preset("tiny", preprocessor)
    path = serving.export(
        serving.CaptionServer(task), str(tmp_path_factory.mktemp("exports")), "captioner"
    )
    return task, scenes["test"], path
