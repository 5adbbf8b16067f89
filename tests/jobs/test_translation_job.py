"""The main job end to end through the CLI: train, export, translate, evaluate, plot."""

import contextlib
import dataclasses
import io
import json
import os
import re
import shutil
import types

import pytest

from keras_attn import cli
from keras_attn.config import TranslationConfig
from keras_attn.training.precision import describe_precision

pytest_plugins = ["tests.fixtures_export"]


ARGV = [  # float32 pinned: --precision auto would differ from machine to machine
    "train",
    "transformer",
    "--builtin-size",
    "6000",
    "--epochs",
    "5",
    "--batch-size",
    "64",
    "--warmup-steps",
    "50",
    "--beam-width",
    "2",
    "--precision",
    "float32",
    # Tracing translate_compiled adds seconds to each export (tests/test_compiled_search.py).
    "--no-compiled-search",
]


EVAL_SIZE = 200  # sentences in the built-in validation and test splits here (the job's: 500)


@contextlib.contextmanager
def _job_with_small_splits(results):
    """`keras-attn train` runs with EVAL_SIZE-sentence splits; each
    job's result goes to `results`.
    """
    from keras_attn.jobs import translation

    run = translation.run
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(
            translation,
            "run",
            lambda config, *a, **k: (
                results.append(
                    run(dataclasses.replace(config, builtin_eval_size=EVAL_SIZE), *a, **k)
                )
                or results[-1]
            ),
        )
        yield


def _test_split():
    from pipelines import synthetic

    return synthetic.translation_corpus(
        seed=0, train_size=6000, valid_size=EVAL_SIZE, test_size=EVAL_SIZE
    )["test"]


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """One CLI training run and its rerun: the folder, what they printed, the job's results."""
    root = tmp_path_factory.mktemp("job")
    argv = [*ARGV, "--run-dir", str(root / "run"), "--export", str(root / "saved_models")]
    results, printed = [], []
    with _job_with_small_splits(results):
        for _ in range(2):
            output = io.StringIO()
            with contextlib.redirect_stdout(output):  # not a terminal, as in a log file
                assert cli.main(argv) == 0
            printed.append(output.getvalue())
    return types.SimpleNamespace(
        root=root,
        printed=printed[0],
        result=results[0],
        rerun_printed=printed[1],
        rerun=results[1],
    )


@pytest.mark.slow
def test_the_job_learns_the_builtin_corpus_and_exports(trained):
    metrics = trained.result.metrics
    # 470 steps from scratch: an untrained model scores BLEU ~0 and no exact
    # match. Three orders of the data (seeds) gave 15-32% exact match and
    # BLEU 35-62, and a run under pytest-xdist 9.8%: the run stops on the steep
    # part of the learning curve, and the WordPiece vocabularies differ from
    # process to process (HuggingFace `tokenizers` breaks ties in hash-map order).
    assert trained.result.steps == 470 and len(trained.result.history["loss"]) == 5
    assert metrics["exact_match"] >= 0.05
    assert metrics["bleu"] >= 30 and metrics["chrf"] >= 50
    assert trained.result.new_export
    assert os.path.isfile(trained.root / "saved_models" / "transformer" / "1" / "saved_model.pb")


@pytest.mark.slow
def test_the_job_says_what_it_chose_and_logs_one_line_per_epoch(trained):
    lines = trained.printed.splitlines()
    assert lines[:5] == [
        "strategy: default (no tf.distribute strategy), 1 replica(s) on /device:CPU:0",
        f"precision: {describe_precision(False)}",
        "XLA: off (--jit-compile compiles the train step with XLA)",
        "global batch: 64 (64 per replica)",
        f"run folder: {trained.root / 'run'} (a new run)",
    ]
    epochs = [line for line in lines if line.startswith("epoch ")]
    assert [line.split(" - ")[0] for line in epochs] == [f"epoch {n}/5" for n in range(1, 6)]
    assert all(" - 94 steps in " in line and " - val_loss: " in line for line in epochs)
    assert (
        "\r" not in trained.printed
        and "\x1b" not in trained.printed
        and "\b" not in trained.printed
    )
    assert f"exported to {trained.root / 'saved_models' / 'transformer' / '1'}" in lines


@pytest.mark.slow
def test_a_rerun_of_a_finished_run_trains_and_exports_nothing(trained):
    printed = trained.rerun_printed
    assert f"run folder: {trained.root / 'run'} (continues from its backup ckpt-470)" in printed
    assert (
        f"{trained.root / 'run'} had already finished (5 of 5 epochs done, 470 steps): nothing to "
        "train" in printed
    )
    assert "nothing trained: the run had already finished after 470 steps" in printed
    assert "epoch 1/5" not in printed and not re.search(
        r"^trained [\d,]+ parameters", printed, re.M
    )
    version_1 = trained.root / "saved_models" / "transformer" / "1"
    assert f"not exported: {version_1} already holds this model" in printed
    assert os.listdir(trained.root / "saved_models" / "transformer") == ["1"]
    assert (
        trained.rerun.already_finished
        and trained.rerun.history == {}
        and not trained.rerun.new_export
    )
    assert trained.rerun.metrics["hypotheses"] == trained.result.metrics["hypotheses"]


@pytest.mark.slow
def test_force_export_exports_an_unchanged_model_again(trained, tmp_path, capsys):
    from keras_attn import serving

    # copies: the fixture's stay as they are
    run, root = (
        tmp_path / "run",
        tmp_path / "saved_models",
    )
    shutil.copytree(trained.root / "run", run)
    shutil.copytree(trained.root / "saved_models", root)
    argv = [
        *ARGV,
        "--run-dir",
        str(run),
        "--export",
        str(root),
        "--beam-width",
        "1",
        "--force-export",
    ]
    capsys.readouterr()
    with _job_with_small_splits([]):
        assert cli.main(argv) == 0
    printed = capsys.readouterr().out
    assert "nothing trained: the run had already finished after 470 steps" in printed
    assert f"exported to {root / 'transformer' / '2'}" in printed.splitlines()
    assert sorted(os.listdir(root / "transformer")) == ["1", "2"]
    fingerprints = {
        serving.read_metadata(str(root / "transformer" / v))["fingerprint"] for v in ("1", "2")
    }
    assert len(fingerprints) == 1  # the same model


@pytest.mark.slow
def test_the_run_writes_its_test_split_and_the_export_scores_as_the_job(
    trained, cli_loads_once, tmp_path, capsys
):
    from keras_attn import evaluation, serving

    test = _test_split()
    assert (trained.root / "run" / "test.src").read_text().splitlines() == test.sources
    assert (trained.root / "run" / "test.ref").read_text().splitlines() == test.targets
    model_dir = str(trained.root / "saved_models" / "transformer" / "1")
    assert serving.read_metadata(model_dir)["test_src"] == str(trained.root / "run" / "test.src")

    hypotheses = trained.result.metrics["hypotheses"]
    # The export scores the job's first batch of 64 as the in-process model did (beam 2).
    (tmp_path / "src.txt").write_text("\n".join(test.sources[:64]) + "\n")
    (tmp_path / "ref.txt").write_text("\n".join(test.targets[:64]) + "\n")
    capsys.readouterr()
    argv = [
        "evaluate",
        model_dir,
        "--src",
        str(tmp_path / "src.txt"),
        "--ref",
        str(tmp_path / "ref.txt"),
    ]
    assert cli.main([*argv, "--beam-width", "2"]) == 0
    expected = evaluation.translation_scores(hypotheses[:64], test.targets[:64])
    assert capsys.readouterr().out.splitlines()[0] == evaluation.format_scores(expected)


@pytest.mark.slow
def test_plot_attention_of_the_trained_model(trained, cli_loads_once, tmp_path, capsys):
    sentence = _test_split().sources[0]
    model_dir = str(trained.root / "saved_models" / "transformer" / "1")
    assert cli.main(["translate", model_dir, sentence, "--beam-width", "1"]) == 0
    greedy = capsys.readouterr().out.strip()
    assert greedy
    out = tmp_path / "plots" / "attention.png"
    assert cli.main(["plot-attention", model_dir, sentence, "--out", str(out)]) == 0
    assert capsys.readouterr().out.splitlines() == [
        greedy,
        f"wrote {out} (the attention of greedy decoding, as translate --beam-width 1)",
    ]
    assert out.read_bytes()[:4] == b"\x89PNG" and out.stat().st_size > 10_000


@pytest.mark.slow
def test_the_run_converts_to_ctranslate2_and_translates_greedily_as_its_export(
    trained, cli_loads_once, tmp_path, capsys
):
    """`keras-attn export-ct2` of the run (and of its export), then
    `translate` and `evaluate` with the folder: CTranslate2 (float32, greedy)
    writes the export's translations, each sentence given our step budget."""
    import ctranslate2
    import tensorflow as tf

    run, out = str(trained.root / "run"), str(tmp_path / "ct2")
    assert cli.main(["export-ct2", run, out]) == 0
    assert capsys.readouterr().out.startswith(
        f"{out}: a CTranslate2 model (float32) of {run}'s weights"
    )
    sentences = (trained.root / "run" / "test.src").read_text().splitlines()[:40]
    ours = (
        cli.load_translation_export(trained.result.export_path)
        .signatures["translate"](
            text=tf.constant(["", " ", *sentences]), beam_width=tf.constant(1)
        )["translation"]
        .numpy()
    )
    assert cli.main(["translate", out, "--beam-width", "1", "", " ", *sentences]) == 0
    assert capsys.readouterr().out.splitlines() == [t.decode() for t in ours]
    references = tmp_path / "ref.txt"
    references.write_text("\n".join(t.decode() for t in ours[2:]) + "\n")
    (tmp_path / "src.txt").write_text("\n".join(sentences) + "\n")
    assert (
        cli.main(
            [
                "evaluate",
                out,
                "--src",
                str(tmp_path / "src.txt"),
                "--ref",
                str(references),
                "--beam-width",
                "1",
            ]
        )
        == 0
    )
    assert "BLEU 100.00" in capsys.readouterr().out
    assert cli.main(["export-ct2", run, out]) == 2 and "already exists" in capsys.readouterr().err
    # the README's second line
    assert cli.main(["export-ct2", run, out, "--quantization", "int8", "--force"]) == 0
    assert "(int8)" in capsys.readouterr().out
    assert ctranslate2.Translator(out, device="cpu").translate_batch(
        [["[UNK]"]], max_decoding_length=3
    )
    assert cli.main(["translate", out, sentences[0]]) == 0 and capsys.readouterr().out.strip()
    # the export's weights and tokenizers: the same translations
    from_export = str(tmp_path / "ct2-of-export")
    assert (
        cli.main(["export-ct2", trained.result.export_path, from_export]) == 0
        and capsys.readouterr()
    )
    assert cli.main(["translate", from_export, "--beam-width", "1", "", " ", *sentences]) == 0
    assert capsys.readouterr().out.splitlines() == [t.decode() for t in ours]


def test_a_rerun_with_other_data_or_settings_is_refused(tmp_path):
    from keras_attn.errors import UserError
    from keras_attn.jobs import translation
    from pipelines import synthetic

    def start(config, train):  # what the job does before training
        translation.bind_run_folder(config, train)
        return translation.build_tokenizers(config, train)

    train = synthetic.translation_corpus(seed=0, train_size=300)["train"]
    config = TranslationConfig(run_dir=str(tmp_path), vocabulary_size=200)
    learned = start(config, train)
    reused = start(dataclasses.replace(config, epochs=20), train)
    for old, new, texts in zip(learned, reused, (train.sources[:20], train.targets[:20])):
        assert new.tokenize(texts).to_list() == old.tokenize(texts).to_list()
    with pytest.raises(UserError, match="--vocab-size 200 \\(now 300\\)"):
        start(dataclasses.replace(config, vocabulary_size=300), train)
    with pytest.raises(
        UserError, match="--shared-vocab False \\(now True\\), --preset tiny \\(now small\\)"
    ):
        start(dataclasses.replace(config, shared_vocab=True, preset="small"), train)
    # A folder from before the fields' renaming recorded the shorter names of their flags.
    settings = tmp_path / "settings.json"
    kept = json.loads(settings.read_text())
    kept["vocab_size"], kept["max_length"] = (
        kept.pop("vocabulary_size"),
        kept.pop("max_sequence_length"),
    )
    settings.write_text(json.dumps(kept))
    start(config, train)
    with pytest.raises(UserError, match="--vocab-size 200 \\(now 300\\)"):
        start(dataclasses.replace(config, vocabulary_size=300), train)
    # A folder from before a setting existed ran with the setting's default.
    del kept["preset"]
    settings.write_text(json.dumps(kept))
    start(config, train)
    with pytest.raises(UserError, match="--preset tiny \\(now small\\)"):
        start(dataclasses.replace(config, preset="small"), train)
    # another number of steps an epoch
    with pytest.raises(UserError, match="--batch-tokens None \\(now 2048\\)"):
        start(dataclasses.replace(config, batch_tokens=2048), train)
    other = synthetic.translation_corpus(seed=1, train_size=300)["train"]
    with pytest.raises(UserError, match="other training data"):
        start(config, other)


@pytest.mark.slow
def test_the_job_streams_shards_in_batches_by_tokens_with_sentencepiece_and_exports(
    tmp_path, capfd, monkeypatch, cli_loads_once
):
    """Through the CLI with the README's recipe flags (--subword, --shared-vocab, --batch-tokens),
    the training pairs read as a stream from a folder of TSV shards, tokenized once (--prepared)."""
    # Uneven batches on two replicas are the runner's
    # test_two_replicas_give_the_losses_of_one_device.
    import tensorflow as tf

    from keras_attn.jobs import translation
    from pipelines.sentencepiece_tokenizer import SentencePieceTokenizer
    from pipelines.synthetic import translation_corpus
    from tests.streams import write_shards

    data = write_shards(
        tmp_path, translation_corpus(seed=0, train_size=600, valid_size=20, test_size=0), 3
    )
    results, run = [], translation.run
    monkeypatch.setattr(
        translation, "run", lambda config, **kw: results.append(run(config, **kw)) or results[-1]
    )
    assert (
        cli.main(
            [
                "train",
                "transformer",
                "--data",
                data["data"],
                "--valid-src",
                data["valid_src"],
                "--valid-tgt",
                data["valid_tgt"],
                "--epochs",
                "2",
                "--batch-size",
                "1000",
                "--batch-tokens",
                "700",
                "--warmup-steps",
                "5",
                "--beam-width",
                "1",
                "--subword",
                "unigram",
                "--shared-vocab",
                "--vocab-size",
                "500",
                "--run-dir",
                str(tmp_path / "run"),
                "--export",
                str(tmp_path / "saved_models"),
                "--prepared",
                str(tmp_path / "prepared"),
                "--no-compiled-search",
            ]
        )
        == 0
    )
    printed, result = capfd.readouterr().out.splitlines(), results[0]
    assert (
        f"prepared: 600 pairs of 3 shards tokenized in {tmp_path / 'prepared'} (3 shards written "
        "now)" in printed
    )
    assert "global batch: up to 700 ids (700 per replica), at most 1000 examples" in printed
    estimated = re.findall(
        r"data: about (\d+) training pairs \(from the files' sizes\) read as a stream from "
        rf"3 shards \({re.escape(str(tmp_path / 'shards' / 'train-0.tsv'))}, ...\), 20 validation",
        "\n".join(printed),
    )
    assert estimated and abs(int(estimated[0]) - 600) < 30, printed
    # Without the budget, one batch an epoch; with it, every pair counts at least 8 columns.
    assert result.steps % 2 == 0 and result.steps // 2 >= -(-600 * 8 // 700)
    losses = result.history["loss"]
    assert len(losses) == 2 and losses[1] < losses[0]
    assert sorted(p.name for p in (tmp_path / "run").glob("vocab.*")) == [
        "vocab.source.model",
        "vocab.target.model",
    ]
    capfd.readouterr()
    attention = cli.load_translation_export(result.export_path).signatures[
        "attention"
    ]  # as `translate` loads it
    # SentencePiece's native log line on making a kernel is held back
    assert capfd.readouterr().err == ""
    # blank: no-break, ideographic spaces
    out = attention(text=tf.constant(["\u00a0\u3000 ", "  two  spaces "]))
    tokenizer = SentencePieceTokenizer.load(tmp_path / "run" / "vocab.target.model")
    ids = [tokenizer.vocabulary.index(piece.decode()) for piece in out["output_tokens"].numpy()[1]]
    assert out["translation"].numpy().tolist() == [b"", tokenizer.detokenize(ids).numpy()]
    capfd.readouterr()
    assert cli.main(["translate", result.export_path, "two dogs"]) == 0
    assert capfd.readouterr().err == ""


@pytest.mark.parametrize("subword", ["wordpiece", "bpe"])
@pytest.mark.slow
def test_a_shared_vocabulary_gives_a_word_one_id_and_the_model_one_embedding(tmp_path, subword):
    """fairseq's --share-all-embeddings: one table for the encoder's
    input, the decoder's input and its output.
    """
    from keras_attn.jobs import translation
    from pipelines.preprocessors import TranslationPreprocessor
    from pipelines.synthetic import translation_corpus

    train = translation_corpus(seed=0, train_size=300, valid_size=0, test_size=0)["train"]
    tables = {}
    for shared, separate in ((True, False), (False, False), (True, True)):
        config = TranslationConfig(
            run_dir=str(tmp_path / f"{shared}{separate}"),
            shared_vocab=shared,
            separate_embeddings=separate,
            subword=subword,
            vocabulary_size=400,
        )
        os.makedirs(config.run_dir)
        source, target = translation.build_tokenizers(config, train)
        model = translation.build_task(
            config, TranslationPreprocessor(source, target, max_length=16), dropout=0.0
        )
        tables[shared, separate] = [w.path for w in model.backbone.weights if "embedding" in w.path]
        assert model.backbone.output_projection is None  # the output reads the target's table
        if shared:
            words = ["man", "Mann", "the", "der"]  # a word of either language: one id on both sides
            assert source.tokenize(words).to_list() == target.tokenize(words).to_list()
    assert [len(tables[key]) for key in ((True, False), (False, False), (True, True))] == [1, 2, 2]


def test_the_architecture_flags_win_over_the_preset_and_must_fit_together(tmp_path, capsys):
    from keras_attn.jobs import translation
    from pipelines.preprocessors import TranslationPreprocessor
    from pipelines.tokenizers import SPECIAL_TOKENS, WordPieceTokenizer

    config = TranslationConfig(
        preset="small", num_layers=4, hidden_dim=128, num_heads=4, intermediate_dim=256
    )
    words = WordPieceTokenizer([*SPECIAL_TOKENS, "a", "b"])
    settings = translation.build_task(
        config, TranslationPreprocessor(words, words, 8), 0.0
    ).backbone.get_config()
    assert {k: settings[k] for k in config.ARCHITECTURE} == config.architecture()
    assert set(config.ARCHITECTURE) <= set(config.bound_settings())
    assert cli.main(["train", "transformer", "--num-heads", "3", "--run-dir", str(tmp_path)]) == 2
    assert (
        capsys.readouterr()
        .err.strip()
        .endswith(
            "--num-heads 3 does not divide --hidden-dim 128 (with the preset's values for what is "
            "not given)"
        )
    )
    with pytest.raises(SystemExit, match="2"):
        cli.main(["train", "seq2seq", "--intermediate-dim", "64", "--run-dir", str(tmp_path)])
    assert (
        "train seq2seq: --intermediate-dim: for train transformer only" in capsys.readouterr().err
    )


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--epochs", "0"], "argument --epochs: must be >= 1, got 0"),
        (["--batch-size", "-1"], "argument --batch-size: must be >= 1, got -1"),
        (["--dropout", "1.5"], "argument --dropout: must be in [0, 1), got 1.5"),
        (["--learning-rate", "0"], "argument --learning-rate: must be > 0, got 0.0"),
        (["--beam-width", "two"], "argument --beam-width: not a whole number: 'two'"),
    ],
)
def test_bad_flag_values_are_refused_before_any_work(flags, message, capsys):
    with pytest.raises(SystemExit) as exit:
        cli.main(["train", "transformer", *flags])
    assert exit.value.code == 2
    assert message in capsys.readouterr().err


@pytest.mark.slow
def test_data_flags_without_their_partner_or_without_pairs_are_refused(tmp_path, capsys):
    (tmp_path / "a.txt").write_text("eins\nzwei\n")
    (tmp_path / "b.txt").write_text("one\ntwo\n")
    (tmp_path / "blank.tsv").write_text("\t\n  \t \n")
    # Shards (a glob): the first file is bad.tsv, its bad line beyond
    # the first 1,024 (the reader's first batch).
    (tmp_path / "bad.tsv").write_bytes(b"a\tb\n" * 1100 + b"\xff\te\n")
    pair = ["--src", str(tmp_path / "a.txt"), "--tgt", str(tmp_path / "b.txt")]
    for flags, message in [
        (
            [*pair, "--valid-src", str(tmp_path / "a.txt")],
            "--valid-src and --valid-tgt must be given together",
        ),
        ([*pair, "--data", str(tmp_path / "blank.tsv")], "either as --data or as --src/--tgt"),
        (
            ["--data", str(tmp_path / "blank.tsv")],
            "blank.tsv: no usable pairs (2 empty ones skipped)",
        ),
        (
            ["--data", str(tmp_path / "*.tsv")],
            "bad.tsv, ...): a corpus read as a stream holds nothing out; give --valid-src",
        ),
        # met by the vocabulary's sample
        (
            [
                "--data",
                str(tmp_path / "*.tsv"),
                "--valid-src",
                str(tmp_path / "a.txt"),
                "--valid-tgt",
                str(tmp_path / "b.txt"),
            ],
            f"{tmp_path / 'bad.tsv'}:1101: invalid UTF-8 (byte 0xff at column 1)",
        ),
        # met by training
        (
            [
                "--data",
                str(tmp_path / "*.tsv"),
                "--valid-src",
                str(tmp_path / "a.txt"),
                "--valid-tgt",
                str(tmp_path / "b.txt"),
                "--vocab-sample",
                "2",
                "--vocab-size",
                "40",
            ],
            f"{tmp_path / 'bad.tsv'}:1101: invalid UTF-8 (byte 0xff at column 1)",
        ),
    ]:
        code = cli.main(
            ["train", "transformer", *flags, "--run-dir", str(tmp_path / f"run{len(flags)}")]
        )
        error = capsys.readouterr().err.strip()
        assert code == 2 and len(error.splitlines()) == 1 and message in error, error


@pytest.mark.parametrize("schedule", ["cosine", "inverse_sqrt"])
@pytest.mark.slow
def test_the_job_compiles_its_schedule_with_the_peak_after_the_warm_up(schedule):
    import keras

    from keras_attn.jobs import translation
    from pipelines.preprocessors import TranslationPreprocessor
    from pipelines.tokenizers import SPECIAL_TOKENS, WordPieceTokenizer

    config = TranslationConfig(
        schedule=schedule, learning_rate=3e-3, warmup_steps=40, preset="small"
    )
    words = WordPieceTokenizer([*SPECIAL_TOKENS, "a", "b"])
    model = translation.build_task(
        config, TranslationPreprocessor(words, words, max_length=8), dropout=0.0
    )
    translation.compile_task(model, config, total_steps=400)
    rate = keras.saving.deserialize_keras_object(model.optimizer.get_config()["learning_rate"])
    by_step = [float(rate(step)) for step in range(200)]
    peak = max(by_step)
    assert peak == pytest.approx(3e-3, rel=1e-5)
    assert abs(by_step.index(peak) - 40) <= 1  # warm-up, then decay
    assert by_step[0] < 3e-4 and by_step[199] < 0.8 * peak
    # Then each its own decay: cosine to 2% of the peak at the run's
    # end, inverse_sqrt as 1/sqrt(step).
    end = {"cosine": 0.02 * 3e-3, "inverse_sqrt": 3e-3 * (40 / 400) ** 0.5}[schedule]
    assert float(rate(399)) == pytest.approx(end, rel=0.05)
