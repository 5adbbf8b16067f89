import textwrap

import pytest
import sentencepiece
import tensorflow as tf
from hypothesis import given, settings
from hypothesis import strategies as st

from pipelines.preprocessors import TranslationPreprocessor
from pipelines.sentencepiece_tokenizer import (
    PREFIX,
    SentencePieceTokenizer,
    learn_sentencepiece_model,
)
from pipelines.synthetic import translation_corpus
from pipelines.tokenizers import SPECIAL_TOKENS, UNK_ID
from tests import fresh_process
from tests.pipelines.test_tokenizers import HOSTILE, TRICKY


@pytest.fixture(scope="module")
def training_text():
    text = translation_corpus(seed=0, train_size=2000, valid_size=0, test_size=0)["train"]
    return text.sources + text.targets + TRICKY


@pytest.fixture(scope="module", params=["bpe", "unigram"])
def model(training_text, request):
    return learn_sentencepiece_model(training_text, vocabulary_size=1000, model_type=request.param)


def test_special_tokens_keep_their_ids_and_are_never_made_from_text(model):
    tokenizer = SentencePieceTokenizer(model)
    assert tokenizer.vocabulary[: len(SPECIAL_TOKENS)] == list(SPECIAL_TOKENS)
    assert 900 <= tokenizer.vocabulary_size <= 1000
    ids = tokenizer.tokenize([" ".join(SPECIAL_TOKENS)]).flat_values.numpy().tolist()
    assert not set(ids) & set(range(len(SPECIAL_TOKENS)))


def test_in_graph_tokenization_equals_the_python_librarys_on_hostile_strings(model):
    """The same pieces as `sentencepiece.SentencePieceProcessor.encode`
    of the text with its prefix, for every string (invalid UTF-8 repaired
    to U+FFFD first, as the graph does); none for the empty string."""
    processor = sentencepiece.SentencePieceProcessor(model_proto=model)
    strings = HOSTILE + [text.encode() for text in TRICKY]
    rows = SentencePieceTokenizer(model).tokenize(tf.constant(strings)).to_list()
    for raw, row in zip(strings, rows):
        text = raw.decode("utf-8", errors="replace")
        assert row == (processor.encode(PREFIX + text) if text else []), raw
    assert UNK_ID not in sum(rows, [])  # what the pieces lack is spelled in bytes


@settings(max_examples=150, deadline=None)  # for each model type
@given(
    text=st.text(
        st.characters(blacklist_categories=("Cs",), blacklist_characters="\u2581"), max_size=60
    )
)
@pytest.mark.slow
def test_detokenize_inverts_tokenize_on_any_text(model, text):
    tokenizer = SentencePieceTokenizer(model)
    assert tokenizer.detokenize(tokenizer.tokenize([text]))[0].numpy().decode() == text


def test_the_space_marker_in_text_comes_back_as_a_space(model):
    """The one exception, as documented: SentencePiece reads ▁ (U+2581) as its own space marker."""
    tokenizer = SentencePieceTokenizer(model)
    assert tokenizer.detokenize(tokenizer.tokenize(["a\u2581b"]))[0].numpy().decode() == "a b"


def test_a_vocabulary_too_small_for_the_texts_characters_is_one_line(training_text):
    with pytest.raises(
        ValueError, match=r"^vocabulary_size=200 is below the \d+ pieces the text needs"
    ):
        learn_sentencepiece_model(training_text, 200)


def test_pre_tokenized_text_comes_back_as_it_was_given(model):
    tokenizer = SentencePieceTokenizer(model)
    lines = ["ein mann mit einem &quot; t-shirt &quot; , der &apos;s sagt .", "two  dogs ,run ."]
    assert [t.decode() for t in tokenizer.detokenize(tokenizer.tokenize(lines)).numpy()] == lines


def test_detokenize_drops_special_tokens_and_padding(model):
    tokenizer = SentencePieceTokenizer(model)
    ids = tokenizer.tokenize(["a man"]).to_list()[0]
    padded = tf.constant([[2, *ids, 3, 0, 0, 6, 99999]])
    assert tokenizer.detokenize(padded).numpy().tolist() == [b"a man"]
    assert tokenizer.detokenize(tf.constant(ids)).numpy() == b"a man"  # a 1-D sequence
    assert tokenizer.id_to_token([[0, 99999]]).numpy().tolist() == [[b"[PAD]", b"[UNK]"]]


def test_a_scalar_string_gives_the_row_of_a_batch(model):
    tokenizer = SentencePieceTokenizer(model)
    assert (
        tokenizer.tokenize("a man").numpy().tolist() == tokenizer.tokenize(["a man"]).to_list()[0]
    )


def test_tokenizers_outlive_set_random_seed_in_a_pipeline(model):
    """tf.random.set_seed empties the eager kernel cache; a resource
    made eagerly once (tensorflow_text's SentencepieceTokenizer) was
    gone for the graphs using it ("Resource ... does not exist")."""
    import keras

    first, second = SentencePieceTokenizer(model), SentencePieceTokenizer(model)
    pipeline = tf.data.Dataset.from_tensor_slices(["a man", "two dogs"]).map(first.tokenize)
    before = [row.tolist() for row in pipeline.as_numpy_iterator()]
    keras.utils.set_random_seed(1)
    assert [row.tolist() for row in pipeline.as_numpy_iterator()] == before
    assert second.tokenize(["a man", "two dogs"]).to_list() == before


def test_lowercase_lowercases_before_the_pieces(training_text):
    tokenizer = SentencePieceTokenizer(
        learn_sentencepiece_model(training_text, 1000, lowercase=True), lowercase=True
    )
    assert tokenizer.tokenize(["A MAN"]).to_list() == tokenizer.tokenize(["a man"]).to_list()


def test_save_load_and_the_preprocessors_config_round_trip(model, tmp_path):
    tokenizer = SentencePieceTokenizer(model)
    tokenizer.save(tmp_path / "source.model")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["source.model"]
    assert SentencePieceTokenizer.load(tmp_path / "source.model").model == model
    preprocessor = TranslationPreprocessor(tokenizer, max_length=16)
    again = TranslationPreprocessor.from_config(preprocessor.get_config())
    assert (
        isinstance(again.source_tokenizer, SentencePieceTokenizer)
        and again.source_tokenizer.model == model
    )
    assert again.target_tokenizer is again.source_tokenizer


def test_a_model_without_our_special_tokens_is_refused(training_text, tmp_path):
    import io

    plain = io.BytesIO()
    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=iter(training_text), model_writer=plain, vocab_size=500, minloglevel=2
    )
    with pytest.raises(ValueError, match=r"first pieces must be \['\[PAD\]'"):
        SentencePieceTokenizer(plain.getvalue())


@pytest.mark.slow
def test_saved_model_tokenizes_in_a_process_with_only_tensorflow_text(training_text, tmp_path):
    module = tf.Module()
    # BPE: the kernels are one
    module.tokenizer = SentencePieceTokenizer(learn_sentencepiece_model(training_text, 1000))

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
    def round_trip(strings):
        ids = module.tokenizer.tokenize(strings)
        return {"ids": ids.to_tensor(), "text": module.tokenizer.detokenize(ids)}

    module.round_trip = round_trip
    tf.saved_model.save(module, str(tmp_path / "saved"), signatures={"round_trip": round_trip})
    inputs = tf.constant(HOSTILE + [text.encode() for text in TRICKY])
    tf.io.write_file(str(tmp_path / "inputs.pb"), tf.io.serialize_tensor(inputs))
    script = textwrap.dedent(f"""
        import sys
        import tensorflow as tf
        import tensorflow_text  # registers the ops
        assert "pipelines" not in sys.modules and "sentencepiece" not in sys.modules
        out = tf.saved_model.load({str(tmp_path / "saved")!r}).signatures["round_trip"](
            tf.io.parse_tensor(tf.io.read_file({str(tmp_path / "inputs.pb")!r}), tf.string))
        tf.io.write_file({str(tmp_path / "ids.pb")!r}, tf.io.serialize_tensor(out["ids"]))
        tf.io.write_file({str(tmp_path / "text.pb")!r}, tf.io.serialize_tensor(out["text"]))
    """)
    process = fresh_process.run(script)
    assert process.returncode == 0, process.stderr[-3000:]

    def read(name, dtype):
        return tf.io.parse_tensor(tf.io.read_file(str(tmp_path / name)), dtype).numpy()

    expected = round_trip(inputs)
    assert (read("ids.pb", tf.int32) == expected["ids"].numpy()).all()
    assert read("text.pb", tf.string).tolist() == expected["text"].numpy().tolist()
    assert [t.decode() for t in expected["text"].numpy()[len(HOSTILE) :]] == TRICKY
