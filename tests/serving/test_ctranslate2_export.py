"""CTranslate2 export: the converted model scores and decodes as the backbone does."""

import json
import os

import ctranslate2
import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_attn import decoding
from keras_attn.errors import UserError
from keras_attn.models import Seq2SeqBackbone, Seq2SeqLM, TransformerBackbone
from keras_attn.serving.ctranslate2_export import (
    SEARCH_OPTIONS,
    ctranslate2_spec,
    export_ctranslate2,
)
from pipelines.special_tokens import BOS_ID, EOS_ID, PAD_ID, SPECIAL_TOKENS, UNK_ID  # noqa: E402

pytest_plugins = ["tests.fixtures_export"]

TINY = dict(
    preset="tiny",
    hidden_dim=32,
    num_heads=4,
    intermediate_dim=64,
    dropout=0.0,
    max_sequence_length=16,
)
# name: (source vocabulary size, target vocabulary size or None for
# one shared vocabulary, backbone arguments)
CONFIGS = {
    "shared-tied": (40, None, dict(share_embeddings=True, tie_output=True)),
    "separate-untied": (40, 36, dict(tie_output=False)),
    "pre_norm-shared-untied": (
        40,
        None,
        dict(norm_first=True, share_embeddings=True, tie_output=False),
    ),
    # Marian's (OPUS-MT's) choices: swish, the sinusoids in halves, a bias on the tied logits.
    "marian": (
        40,
        None,
        dict(
            share_embeddings=True,
            tie_output=True,
            activation="silu",
            position="sinusoidal_halves",
            output_bias=True,
        ),
    ),
    "gelu_tanh-untied-biased": (
        40,
        36,
        dict(tie_output=False, activation="gelu_tanh", output_bias=True),
    ),
}


def _vocabulary(prefix, size):
    return [*SPECIAL_TOKENS, *(f"{prefix}{i}" for i in range(size - len(SPECIAL_TOKENS)))]


def _sharpen(backbone):
    """Random weights with peaked next-token distributions, so outputs differ from source to source.

    An output bias also makes [EOS] likely and gives [PAD] and [BOS]
    no probability (see the beam test).
    """
    tables = {
        id(e.token_embedding.embeddings): e.token_embedding.embeddings
        for e in (backbone.source_embedding, backbone.target_embedding)
    }
    for table in tables.values():
        table.assign(table * 3.0)
    if backbone.output_projection is not None:
        backbone.output_projection.kernel.assign(backbone.output_projection.kernel * 3.0)
        bias = np.zeros(backbone.output_projection.bias.shape, "float32")
        bias[EOS_ID], bias[PAD_ID], bias[BOS_ID] = 2.0, -1e4, -1e4
        backbone.output_projection.bias.assign(bias)
    if backbone.output_bias is not None:  # a bias of its own on the logits, beside the projection's
        bias = (
            np.random.default_rng(3)
            .normal(0, 0.5, backbone.output_bias.bias.shape)
            .astype("float32")
        )
        bias[[PAD_ID, BOS_ID, EOS_ID]] = 0.0, 0.0, 1.5
        backbone.output_bias.bias.assign(bias)


class Converted:
    """A random tiny backbone, its CTranslate2 translator and random
    sources and targets as ids and tokens.
    """

    def __init__(self, name, folder):
        source_size, target_size, arguments = CONFIGS[name]
        self.untied = not arguments["tie_output"]
        keras.utils.set_random_seed(7)
        self.backbone = TransformerBackbone(
            source_size, target_size or source_size, **TINY, **arguments
        )
        _sharpen(self.backbone)
        self.source_vocabulary = _vocabulary("s", source_size)
        self.target_vocabulary = (
            self.source_vocabulary if target_size is None else _vocabulary("t", target_size)
        )
        self.folder = export_ctranslate2(
            self.backbone, self.source_vocabulary, self.target_vocabulary, folder
        )
        self.translator = ctranslate2.Translator(self.folder, device="cpu", compute_type="float32")
        self.task = Seq2SeqLM(self.backbone)
        rng = np.random.default_rng(0)
        first = len(SPECIAL_TOKENS)
        self.sources = [rng.integers(first, source_size, rng.integers(1, 9)) for _ in range(16)]
        self.targets = [
            rng.integers(first, len(self.target_vocabulary), rng.integers(0, 9)) for _ in range(16)
        ]

    def source_ids(self):
        """The sources as one `(B, S)` batch padded with [PAD]."""
        batch = np.full((len(self.sources), max(map(len, self.sources))), PAD_ID, "int32")
        for row, source in zip(batch, self.sources):
            row[: len(source)] = source
        return batch

    def source_tokens(self):
        return [[self.source_vocabulary[i] for i in source] for source in self.sources]

    def target_tokens(self, ids):
        """Our output ids as CTranslate2 gives them: the tokens before [EOS]."""
        ids = [i for i in ids if i != PAD_ID]
        return [
            self.target_vocabulary[i]
            for i in ids[: ids.index(EOS_ID) if EOS_ID in ids else len(ids)]
        ]


_BUILT = {}


def _converted(name, tmp_path_factory):
    """The `Converted` of a configuration, built once per process."""
    if name not in _BUILT:
        _BUILT[name] = Converted(name, str(tmp_path_factory.mktemp("ct2") / name))
    return _BUILT[name]


@pytest.fixture(params=list(CONFIGS))
def converted(request, tmp_path_factory):
    return _converted(request.param, tmp_path_factory)


@pytest.mark.slow
def test_scores_equal_the_teacher_forced_log_probabilities(converted):
    tokens = [[converted.target_vocabulary[i] for i in target] for target in converted.targets]
    results = converted.translator.score_batch(converted.source_tokens(), tokens)
    for source, target, result in zip(converted.sources, converted.targets, results):
        logits = converted.backbone(
            {"source": source[None], "target_in": np.array([[BOS_ID, *target]])}
        )
        log_probs = tf.nn.log_softmax(logits[0]).numpy()
        target_out = [*target, EOS_ID]  # CTranslate2 scores the target and [EOS], not normalized
        assert result.tokens == [converted.target_vocabulary[i] for i in target_out]
        np.testing.assert_allclose(
            result.log_probs, log_probs[np.arange(len(target_out)), target_out], atol=1e-4
        )


def test_greedy_decoding_equals_generate(converted, max_length=12):
    ours = converted.task.generate(converted.source_ids(), max_length=max_length)
    theirs = converted.translator.translate_batch(
        converted.source_tokens(), beam_size=1, max_decoding_length=max_length, **SEARCH_OPTIONS
    )
    assert [result.hypotheses[0] for result in theirs] == [
        converted.target_tokens(ids) for ids in ours
    ]
    if converted.untied:  # some outputs end with [EOS], some are cut off
        assert any(EOS_ID in ids for ids in ours) and not all(EOS_ID in ids for ids in ours)


# CTranslate2 renormalizes what [PAD] and [BOS] leave and we do not: only without their probability
# (`_sharpen`'s output bias, so untied outputs) do both rank alike; and with α = 0 (its length
# penalty is length^α, ours GNMT's).
@pytest.mark.parametrize(
    "name", [name for name, (_, _, arguments) in CONFIGS.items() if not arguments["tie_output"]]
)
def test_beam_search_finds_our_best_hypothesis_without_length_penalty(
    name, tmp_path_factory, max_length=12
):
    converted = _converted(name, tmp_path_factory)
    ours = decoding.beam_search(
        converted.task.stepper,
        converted.source_ids(),
        max_length,
        beam_width=4,
        length_penalty=0.0,
        return_all_beams=True,
    )
    theirs = converted.translator.translate_batch(
        converted.source_tokens(),
        beam_size=4,
        max_decoding_length=max_length,
        length_penalty=0.0,
        return_scores=True,
        num_hypotheses=2,
        **SEARCH_OPTIONS,
    )
    for beams, log_probs, result in zip(
        ours["beam_tokens"].numpy(), ours["beam_log_probs"].numpy(), theirs
    ):
        if len(result.scores) > 1 and abs(result.scores[0] - result.scores[1]) < 1e-4:
            continue  # a tie: either is right
        # Not `ours["tokens"]`: at the step budget we rank those that
        # emitted [EOS] first, CTranslate2 all alike.
        best = np.argmax(log_probs)
        assert result.hypotheses[0] == converted.target_tokens(beams[best])
        np.testing.assert_allclose(result.scores[0], log_probs[best], atol=1e-4)


def test_the_folder_holds_our_vocabularies_and_special_tokens(converted):
    names = sorted(
        name for name in os.listdir(converted.folder) if name.endswith("vocabulary.json")
    )
    shared = converted.source_vocabulary is converted.target_vocabulary
    assert names == (
        ["shared_vocabulary.json"]
        if shared
        else ["source_vocabulary.json", "target_vocabulary.json"]
    )
    with open(os.path.join(converted.folder, names[-1])) as file:
        assert json.load(file) == converted.target_vocabulary
    with open(os.path.join(converted.folder, "config.json")) as file:
        config = json.load(file)
    names = ("unk_token", "bos_token", "eos_token", "decoder_start_token")
    assert [config[name] for name in names] == [
        SPECIAL_TOKENS[i] for i in (UNK_ID, BOS_ID, EOS_ID, BOS_ID)
    ]
    assert config["layer_norm_epsilon"] == pytest.approx(1e-5)


def _tiny_transformer(**arguments):
    keras.utils.set_random_seed(7)
    return TransformerBackbone(20, 20, **TINY, **arguments)


def _refusal(backbone, source=None, target=None, folder="unused"):
    vocabulary = _vocabulary("w", 20)
    with pytest.raises(UserError) as error:
        export_ctranslate2(backbone, source or vocabulary, target or vocabulary, folder)
    message = str(error.value)
    assert "\n" not in message
    return message


def test_what_ctranslate2_cannot_represent_is_refused_in_one_line():
    assert "Seq2SeqBackbone" in _refusal(Seq2SeqBackbone(20, 20, preset="tiny", hidden_dim=16))
    backbone = _tiny_transformer()
    backbone.encoder_blocks[0].feed_forward_norm.layer_norm.epsilon = 1e-6
    assert "epsilon" in _refusal(backbone)


def test_vocabularies_that_do_not_fit_are_refused_in_one_line():
    backbone = _tiny_transformer()
    vocabulary = _vocabulary("w", 20)
    assert "target vocabulary has 21 tokens, the model 20" in _refusal(
        backbone, target=vocabulary + ["extra"]
    )
    assert "duplicate" in _refusal(backbone, source=vocabulary[:-1] + ["w0"])
    swapped = [vocabulary[1], vocabulary[0], *vocabulary[2:]]
    assert "must start with [PAD] [UNK]" in _refusal(backbone, source=swapped)


def test_an_existing_folder_is_replaced_only_when_forced(tmp_path):
    backbone = _tiny_transformer()
    vocabulary = _vocabulary("w", 20)
    folder = str(tmp_path / "model")
    export_ctranslate2(backbone, vocabulary, vocabulary, folder)
    assert "already exists" in _refusal(backbone, folder=folder)
    export_ctranslate2(backbone, vocabulary, vocabulary, folder, quantization="int8", force=True)
    assert ctranslate2.Translator(folder, device="cpu").translate_batch(
        [["w3", "w4"]], max_decoding_length=3
    )
    assert sorted(os.listdir(tmp_path)) == ["model"]
    other = tmp_path / "other"  # not a CTranslate2 model: never replaced
    other.mkdir()
    (other / "mine.txt").write_text("kept")
    with pytest.raises(UserError, match="not a CTranslate2 model folder"):
        export_ctranslate2(backbone, vocabulary, vocabulary, str(other), force=True)
    assert (other / "mine.txt").read_text() == "kept"


@pytest.mark.parametrize("subword", ["wordpiece", "bpe"])
@pytest.mark.slow
def test_the_translator_writes_the_saved_model_signatures_greedy_translations_of_hostile_strings(
    subword, tmp_path
):
    """Strings in, strings out: blank, unknown, overlong and malformed texts as the export's
    `translate` gives them, each sentence cut at its own step budget."""
    from keras_attn.serving import Translator
    from keras_attn.serving.ctranslate2_translator import CTranslate2Translator
    from pipelines.preprocessors import TranslationPreprocessor
    from pipelines.sentencepiece_tokenizer import SentencePieceTokenizer, learn_sentencepiece_model
    from pipelines.tokenizers import WordPieceTokenizer

    if subword == "wordpiece":
        tokenizer = WordPieceTokenizer([*SPECIAL_TOKENS, *"abcdefgh", ".", "##s"])
    else:  # SentencePiece keeps spaces as tokens: blank text is not empty of them
        tokenizer = SentencePieceTokenizer(
            learn_sentencepiece_model(["a b c d e f g h ."] * 50, 280, "bpe")
        )
    words = tokenizer.vocabulary
    keras.utils.set_random_seed(3)
    backbone = TransformerBackbone(
        len(words), len(words), share_embeddings=True, tie_output=False, **TINY
    )
    _sharpen(backbone)
    # some outputs end, some run to their budgets
    backbone.output_projection.bias[EOS_ID].assign(-1.0)
    preprocessor = TranslationPreprocessor(tokenizer, max_length=16)  # budgets of 11-16 steps
    # (its own tests)
    export = Translator(Seq2SeqLM(backbone, preprocessor=preprocessor), compiled_search=False)
    folder = export_ctranslate2(backbone, words, words, str(tmp_path / "ct2"))
    translator = CTranslate2Translator(folder, preprocessor, compute_type="float32")
    # control characters
    texts = [
        "a b c",
        "",
        "   ",
        "\u200b",
        "as bs",
        "z q",
        " ".join("abcdefgh" * 3),
        "h g .",
        b"\xff\xfe a",
        "e",
        "\x00\x01 a b",
        "a\x00b c",
        "\x1b[31m d e",
        "\x85 f \x7f g",
        "\x00",
        "h\x01g\x02f",
    ]
    expected = export.translate(tf.constant(texts), tf.constant(1))
    translations, truncated = translator.translate(texts, beam_width=1)
    assert translations == [t.decode() for t in expected["translation"].numpy()]
    # one at a time: the same
    alone = [translator.translate([text], beam_width=1)[0][0] for text in texts]
    served_alone = [
        export.translate(tf.constant([text]), tf.constant(1))["translation"].numpy()[0].decode()
        for text in texts
    ]
    assert alone == served_alone == translations
    assert truncated == list(expected["truncated"].numpy()) and truncated[6]
    assert translations[1] == translations[2] == "" and any(translations)
    assert translator.translate([], beam_width=4) == ([], [])
    assert len(translator.translate(texts, beam_width=4)[0]) == len(texts)

    # what translate hands CTranslate2
    tokens, budgets, cut, empty = translator.search_inputs(texts)
    ids, _ = preprocessor.tokenize_source(tf.constant(texts))
    assert tokens == [[words[i] for i in row if i != PAD_ID] for row in ids.numpy().tolist()]
    assert list(cut) == truncated and list(empty[:3]) == [False, True, True]
    assert list(budgets) == list(decoding.max_decode_length(ids, cap=16).numpy())


@pytest.mark.slow
def test_a_fresh_process_loads_the_folder_and_the_exports_task_with_their_modules_alone(
    tiny_export, tmp_path
):
    """`load_ctranslate2` and `load_task` import the classes the configs they deserialize name."""
    from keras_attn.serving.ctranslate2_translator import load_ctranslate2
    from keras_attn.serving.translator import load_task
    from tests import fresh_process

    task = load_task(tiny_export)
    source, target = task.preprocessor.source_tokenizer, task.preprocessor.target_tokenizer
    folder = export_ctranslate2(
        task.backbone,
        source.vocabulary,
        target.vocabulary,
        str(tmp_path / "ct2"),
        preprocessor=task.preprocessor,
    )
    expected = load_ctranslate2(folder, compute_type="float32").translate(
        ["ein hund"], beam_width=1
    )[0]
    script = (
        "import sys\n"
        "from keras_attn.serving.ctranslate2_translator import load_ctranslate2\n"
        "from keras_attn.serving.translator import load_task\n"
        "print(load_ctranslate2(sys.argv[1], compute_type='float32').translate(['ein hund'], "
        "beam_width=1)[0])\nprint(load_task(sys.argv[2]).backbone.count_params())\n"
    )
    out = fresh_process.run(script, folder, tiny_export)  # keras_attn not imported yet
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.splitlines() == [str(expected), str(task.backbone.count_params())]


def test_a_mixed_bfloat16_backbone_converts_to_the_model_of_its_float32_twin():
    """CTranslate2 computes in float32 on CPU (it refuses bfloat16 there): a backbone built under
    mixed_bfloat16 converts to what its float32 twin converts to, the position table included (a
    bfloat16 layer hands it out rounded), so the folder translates as the twin's SavedModel does
    (the test of hostile strings above)."""
    words = _vocabulary("w", 20)
    keras.utils.set_random_seed(3)
    policy = keras.mixed_precision.global_policy()
    keras.mixed_precision.set_global_policy("mixed_bfloat16")
    try:
        mixed = TransformerBackbone(len(words), len(words), tie_output=False, **TINY)
    finally:
        keras.mixed_precision.set_global_policy(policy)
    assert mixed.source_embedding.position_embedding.compute_dtype == "bfloat16"
    twin = TransformerBackbone(len(words), len(words), tie_output=False, **TINY)
    twin.set_weights(mixed.get_weights())
    ours, theirs = (
        ctranslate2_spec(backbone, words, words).variables() for backbone in (mixed, twin)
    )
    assert sorted(ours) == sorted(theirs)
    for name in theirs:
        np.testing.assert_array_equal(ours[name], theirs[name], err_msg=name)
