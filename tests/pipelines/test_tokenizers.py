import textwrap
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf
from hypothesis import given, settings
from hypothesis import strategies as st

from pipelines import tokenizers
from pipelines.synthetic import translation_corpus
from pipelines.text import read_parallel
from pipelines.tokenizers import (
    BOS_ID,
    EOS_ID,
    PAD_ID,
    SPECIAL_TOKENS,
    UNK_ID,
    WordPieceTokenizer,
    huggingface_tokenizer,
    learn_wordpiece_vocabulary,
)
from tests import fresh_process

MULTI30K = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "multi30k"

WORDS = [
    "A",
    "man",
    "in",
    "a",
    "blue",
    "shirt",
    "is",
    "standing",
    "on",
    "ladder",
    "Two",
    "dogs",
    "play",
    "with",
    "ball",
    "The",
    "woman",
    "wears",
    "t-shirt",
    "It",
    "man's",
    "don't",
    "they're",
    "Männer",
    "über",
    "Straße",
    "café",
    "well-known",
    "and/or",
    "naïve",
    "Zürich",
    "e-mail",
]
ENDING_IN_DIGITS = ["3.5", "1,000", "19", "10:30", "covid-19"]
PUNCTUATION = [".", ",", "!", "?", ";", ":"]
TRICKY = [
    "Hello,world!How's it going?",
    "Tabs\tand\nnewlines  and\u00a0no-break\u3000spaces",
    "zero\u200bwidth\u200djoiner\u00adsoft-hyphen\ufeffbom",
    "control\x01\x02\x7f\x85chars",
    "漢字とかなの文章。中文，标点！",
    "emoji 🙂👍🏽 and symbols © ® ™ € $ 5% #1 @home ~tilde ^caret `tick`",
    "«Guillemets» „Anführung“ “curly” ‘single’ — dash – en-dash … ellipsis",
    "Ünïcödé àccents ÉCOLE naïve façade Øresund ΣΟΦΙΑ σοφια",
    "(brackets) [square] {curly} <angle> a/b a\\b a|b a_b a+b=c",
    "[SEP] [PAD] [MASK] ## ### #hashtag",
]
HOSTILE = [
    b"",
    b"   \t  \n ",
    b"x" * 10_000,
    b"man " * 2_000,
    b"\xff\xfe broken \xc3 utf-8 \xed\xa0\x80 surrogate",
    b"\x00\x01\x02 nul and controls",
    "never seen: ☃ Ω ж 𝔘𝔫𝔦𝔠𝔬𝔡𝔢 漢".encode(),
    b"[PAD] [BOS] [EOS] [SEP]",
    "\u200b\u200b\u200b".encode(),
]


@pytest.fixture(scope="module")
def training_text():
    text = translation_corpus(seed=0, train_size=2000, valid_size=0, test_size=0)["train"]
    every_word = " ".join(WORDS + ENDING_IN_DIGITS + PUNCTUATION + ['"'])
    return text.sources + text.targets + TRICKY + [every_word] * 3


@pytest.fixture(scope="module")
def tokenizer(training_text):
    return WordPieceTokenizer(learn_wordpiece_vocabulary(training_text, vocabulary_size=3000))


def test_special_tokens_have_fixed_ids(tokenizer):
    assert SPECIAL_TOKENS == ("[PAD]", "[UNK]", "[BOS]", "[EOS]", "[CLS]", "[SEP]", "[MASK]")
    ids = (
        tokenizers.PAD_ID,
        tokenizers.UNK_ID,
        tokenizers.BOS_ID,
        tokenizers.EOS_ID,
        tokenizers.CLS_ID,
        tokenizers.SEP_ID,
        tokenizers.MASK_ID,
    )
    assert ids == tuple(range(7))
    assert tuple(tokenizer.vocabulary[:7]) == SPECIAL_TOKENS
    assert tokenizer.tokens(list(range(7))) == list(SPECIAL_TOKENS)


def test_vocabulary_must_start_with_the_special_tokens():
    with pytest.raises(ValueError, match="must start with"):
        WordPieceTokenizer(["[UNK]", "[PAD]", "a", "b"])


def test_vocabulary_learning_uses_subwords_and_respects_the_size(training_text):
    vocabulary = learn_wordpiece_vocabulary(training_text, vocabulary_size=300)
    assert len(vocabulary) <= 300
    assert any(token.startswith("##") for token in vocabulary)
    assert len(set(vocabulary)) == len(vocabulary)


def test_in_graph_tokenization_matches_the_trainers_tokenizer(training_text):
    # Same word splitting and WordPiece as the HuggingFace tokenizer that
    # learned the vocabulary, with and without lowercasing.
    for lowercase in (False, True):
        vocabulary = learn_wordpiece_vocabulary(training_text, 3000, lowercase=lowercase)
        ours = WordPieceTokenizer(vocabulary, lowercase=lowercase)
        reference = huggingface_tokenizer(vocabulary, lowercase=lowercase)
        texts = TRICKY + training_text[:200]
        for text, ids in zip(texts, ours.tokenize(texts).to_list()):
            assert ids == reference.encode(text).ids, text


def test_no_unknown_tokens_on_training_text(tokenizer, training_text):
    ids = tokenizer.tokenize(training_text).flat_values.numpy()
    assert UNK_ID not in ids
    assert ids.min() >= len(SPECIAL_TOKENS)


def test_synthetic_sentences_round_trip(tokenizer):
    sentences = translation_corpus(seed=3, train_size=300, valid_size=0, test_size=0)["train"]
    for texts in (sentences.sources, sentences.targets):
        back = tokenizer.detokenize(tokenizer.tokenize(texts)).numpy()
        assert [b.decode() for b in back] == texts


# Normal text: words (with inner hyphens, slashes, apostrophes, accents),
# numbers, punctuation attached to the word before it, brackets and double
# quotes around phrases. Not covered, because the tokens alone cannot tell:
# punctuation between digits ("version 3. 4" comes back "version 3.4"),
# spaced dashes, single quotes used as quotation marks.
word = st.sampled_from(WORDS)
phrase = st.lists(st.one_of(word, st.sampled_from(ENDING_IN_DIGITS)), min_size=1, max_size=4).map(
    " ".join
)
piece = st.one_of(
    phrase,
    phrase.map(lambda p: f"({p})"),
    phrase.map(lambda p: f'"{p}"'),
    st.tuples(phrase, st.just(" "), word, st.sampled_from(PUNCTUATION)).map("".join),
)


@pytest.fixture(scope="module")
def round_trip(tokenizer):
    @tf.function(input_signature=[tf.TensorSpec([], tf.string)])
    def round_trip(text):
        ids = tokenizer.tokenize(text)
        return tokenizer.detokenize(ids), tf.reduce_any(tf.equal(ids, UNK_ID))

    return round_trip


@settings(max_examples=300, deadline=None)
@given(st.lists(piece, min_size=1, max_size=8).map(" ".join))
def test_detokenize_inverts_tokenize_on_normal_text(round_trip, sentence):
    text, has_unknown = round_trip(tf.constant(sentence))
    assert not has_unknown
    assert text.numpy().decode() == sentence


def test_detokenize_joins_subwords_and_fixes_punctuation_spacing(tokenizer):
    vocabulary = list(SPECIAL_TOKENS) + [
        "A",
        "man",
        ",",
        "in",
        "a",
        "blue",
        "sh",
        "##irt",
        ".",
        "(",
        ")",
        "t",
        "-",
        "'",
        "s",
        "3",
        "5",
        "!",
    ]
    small = WordPieceTokenizer(vocabulary)
    text = "A man, in a (blue) t-shirt. A man's 3.5 shirt!"
    ids = small.tokenize(text)
    assert small.tokens(ids)[5:8] == ["(", "blue", ")"]
    assert small.detokenize(ids).numpy().decode() == text


def test_detokenize_drops_special_tokens_but_shows_unknown(tokenizer):
    ids = tokenizer.tokenize(["The dog sleeps."]).to_list()[0]
    padded = [[BOS_ID] + ids + [EOS_ID, PAD_ID, PAD_ID], [BOS_ID, UNK_ID] + ids + [EOS_ID, 0, 0, 0]]
    texts = tokenizer.detokenize(np.array([row[:7] + [0] * (7 - len(row[:7])) for row in padded]))
    assert texts.shape == (2,)
    assert tokenizer.detokenize(tf.ragged.constant(padded)).numpy().tolist() == [
        b"The dog sleeps.",
        b"[UNK] The dog sleeps.",
    ]
    assert tokenizer.detokenize(ids + [10**6, -5]).numpy() == b"The dog sleeps."


def test_scalar_and_batch_inputs(tokenizer):
    scalar = tokenizer.tokenize("The dog sleeps.")
    batch = tokenizer.tokenize(["The dog sleeps.", ""])
    assert isinstance(scalar, tf.Tensor) and scalar.dtype == tf.int32
    assert isinstance(batch, tf.RaggedTensor) and batch.dtype == tf.int32
    assert scalar.numpy().tolist() == batch.to_list()[0]
    assert batch.to_list()[1] == []
    assert tokenizer.id_to_token(scalar).numpy().tolist() == [
        t.encode() for t in tokenizer.tokens(scalar)
    ]


def test_hostile_input_never_raises(tokenizer):
    ids = tokenizer.tokenize(tf.constant(HOSTILE))
    rows = ids.to_list()
    assert len(rows) == len(HOSTILE)
    assert rows[0] == [] and rows[1] == [] and rows[-1] == []
    assert rows[2] == [UNK_ID]  # one word longer than MAX_BYTES_PER_WORD
    assert len(rows[3]) == 2_000
    special = set(range(len(SPECIAL_TOKENS))) - {UNK_ID}
    assert not special & set(ids.flat_values.numpy().tolist())
    texts = tokenizer.detokenize(ids).numpy()
    assert texts.shape == (len(HOSTILE),)
    for text in texts:
        text.decode("utf-8")  # always valid UTF-8

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
    def round_trip(strings):
        return tokenizer.detokenize(tokenizer.tokenize(strings))

    assert round_trip(tf.constant(HOSTILE)).numpy().tolist() == texts.tolist()
    dataset = tf.data.Dataset.from_tensor_slices(HOSTILE).map(tokenizer.tokenize)
    assert [row.numpy().tolist() for row in dataset] == rows


def test_save_and_load(tokenizer, tmp_path):
    path = tmp_path / "vocab.txt"
    tokenizer.save(path)
    lines = path.read_text("utf-8").split("\n")
    assert lines[:-1] == tokenizer.vocabulary and lines[-1] == ""
    assert list(tmp_path.iterdir()) == [path]
    loaded = WordPieceTokenizer.load(path)
    assert loaded.vocabulary == tokenizer.vocabulary
    assert loaded.vocabulary_size == tokenizer.vocabulary_size
    text = ["A man's blue t-shirt, in Zürich."]
    assert loaded.tokenize(text).to_list() == tokenizer.tokenize(text).to_list()


@pytest.mark.slow
def test_saved_model_reloads_in_a_process_with_only_tensorflow_text(tokenizer, tmp_path):
    tokenizer.save(tmp_path / "vocab.txt")
    module = tf.Module()
    module.tokenizer = WordPieceTokenizer.load(tmp_path / "vocab.txt")

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
    def tokenize(strings):
        return {"ids": module.tokenizer.tokenize(strings).to_tensor()}

    @tf.function(input_signature=[tf.TensorSpec([None, None], tf.int32)])
    def detokenize(ids):
        return {"text": module.tokenizer.detokenize(ids)}

    module.tokenize, module.detokenize = tokenize, detokenize
    export = tmp_path / "saved"
    tf.saved_model.save(
        module, str(export), signatures={"tokenize": tokenize, "detokenize": detokenize}
    )
    assert (export / "assets" / "vocab.txt").read_text("utf-8") == (
        tmp_path / "vocab.txt"
    ).read_text("utf-8")

    inputs = tf.constant([b"The dog sleeps.", b"A man's t-shirt, (blue)!"] + HOSTILE)
    tf.io.write_file(str(tmp_path / "inputs.pb"), tf.io.serialize_tensor(inputs))
    script = textwrap.dedent(
        f"""
        import sys
        import tensorflow as tf
        import tensorflow_text  # registers the ops
        assert "pipelines" not in sys.modules and "keras_hub" not in sys.modules
        loaded = tf.saved_model.load({str(export)!r})
        inputs = tf.io.parse_tensor(tf.io.read_file({str(tmp_path / "inputs.pb")!r}), tf.string)
        ids = loaded.signatures["tokenize"](inputs)["ids"]
        text = loaded.detokenize(ids)["text"]
        tf.io.write_file({str(tmp_path / "ids.pb")!r}, tf.io.serialize_tensor(ids))
        tf.io.write_file({str(tmp_path / "text.pb")!r}, tf.io.serialize_tensor(text))
        """
    )
    process = fresh_process.run(script)
    assert process.returncode == 0, process.stderr[-3000:]

    def read(name, dtype):
        return tf.io.parse_tensor(tf.io.read_file(str(tmp_path / name)), dtype).numpy()

    expected_ids = tokenize(inputs)["ids"]
    np.testing.assert_array_equal(read("ids.pb", tf.int32), expected_ids.numpy())
    expected_text = detokenize(expected_ids)["text"].numpy()
    assert read("text.pb", tf.string).tolist() == expected_text.tolist()
    assert expected_text[:2].tolist() == [b"The dog sleeps.", b"A man's t-shirt, (blue)!"]


def test_multi30k_vocabulary_covers_its_training_text():
    if not MULTI30K.exists():
        pytest.skip(f"{MULTI30K} not present")
    corpus = read_parallel(MULTI30K / "raw" / "train.de.gz", MULTI30K / "raw" / "train.en.gz")
    german = corpus.sources[:5000]
    tokenizer = WordPieceTokenizer(learn_wordpiece_vocabulary(german, vocabulary_size=8000))
    ids = tokenizer.tokenize(german)
    assert UNK_ID not in ids.flat_values.numpy()
    back = [b.decode() for b in tokenizer.detokenize(ids).numpy()]
    same = sum(b == " ".join(t.split()) for b, t in zip(back, german))
    assert same / len(german) > 0.99
