"""What a new user trips on, each through `keras_attn.cli.main`: the commands as documented."""

import contextlib
import io
import json
import os
import re
import shutil
import types

import pytest

from keras_attn import cli
from pipelines import synthetic_documents

pytest_plugins = ["tests.fixtures_export"]

# The tiniest pretraining that leaves a run folder with best weights, in mixed_bfloat16: where
# the final validation drifted from the epoch's when it was computed another way.
PRETRAIN = [
    "pretrain",
    "bert",
    "--builtin-documents",
    "200",
    "--max-length",
    "32",
    "--max-predictions",
    "4",
    "--epochs",
    "1",
    "--batch-size",
    "16",
    "--pairs-per-epoch",
    "64",
    "--vocab-size",
    "600",
    "--warmup-steps",
    "2",
    "--precision",
    "mixed_bfloat16",
    "--no-export",
]


def _run(argv):
    """`(exit code, standard output, standard error)` of one command (argparse's exits included)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = cli.main(argv)
        except SystemExit as exit:
            code = exit.code
    return code, out.getvalue(), err.getvalue()


def _topic_tsv(path, labelled_documents):
    """label<TAB>sentence: the 8-label task of the built-in documents
    (each first sentence's topic).
    """
    path.write_text("".join(f"{topic}\t{document[0]}\n" for topic, document in labelled_documents))
    return str(path)


def _epochs(printed):
    """`[{name: value}]` of the `epoch N/M - ...` lines."""
    return [
        {k: float(v) for k, v in re.findall(r" - (\w+): ([\d.]+)", line)}
        for line in printed.splitlines()
        if line.startswith("epoch ")
    ]


@pytest.fixture(scope="module")
def bert_runs(tmp_path_factory):
    """A tiny pretraining run folder, and a fine-tuning from it with finetune's defaults, exported;
    the fine-tuning job's result."""
    from keras_attn.jobs import bert

    root = tmp_path_factory.mktemp("new_user")
    code, pretrained, err = _run([*PRETRAIN, "--run-dir", str(root / "bert")])
    assert code == 0, err
    train = _topic_tsv(root / "train.tsv", synthetic_documents.labelled_documents(1000, seed=11))
    with open(train, "a", encoding="utf-8") as file:
        file.write("unread\t \n")  # a label without a text: skipped, and said
    finetune = [
        "finetune",
        str(root / "bert"),
        "--train",
        train,
        "--precision",
        "float32",
        "--run-dir",
        str(root / "classifier"),
        "--export",
        str(root / "saved_models"),
    ]
    results = []
    with pytest.MonkeyPatch.context() as patch:
        run = bert.finetune
        patch.setattr(bert, "finetune", lambda *a, **k: results.append(run(*a, **k)) or results[-1])
        code, finetuned, err = _run(finetune)
    assert code == 0, err
    return types.SimpleNamespace(
        root=root,
        pretrained=pretrained,
        finetuned=finetuned,
        train=train,
        result=results[0],
        export=str(root / "saved_models" / "bert-classifier" / "1"),
    )


# 1. Options anywhere: `translate MODEL --beam-width 4 "A cat sleeps."`.


@pytest.mark.slow
def test_options_may_come_before_the_texts(
    tiny_export, cli_loads_once, cli_loads_saved_models_once, bert_runs
):
    last = _run(["translate", tiny_export, "ein hund", "--beam-width", "1"])
    first = _run(["translate", tiny_export, "--beam-width", "1", "ein hund"])
    assert first == last and last[0] == 0
    classified = _run(
        ["classify", bert_runs.export, "--top-k", "2", "Anna washes the sharp knife."]
    )
    assert classified[0] == 0 and len(classified[1].split("\t")) == 4, classified
    parsed = cli.build_parser().parse_args(["translate", "M", "--beam-width", "4", "A cat sleeps."])
    assert (parsed.beam_width, parsed.text) == (4, ["A cat sleeps."])
    parsed = cli.build_parser().parse_args(
        ["fill-mask", "M", "--top-k", "3", "the [MASK] knife", "x"]
    )
    assert (parsed.top_k, parsed.text) == (3, ["the [MASK] knife", "x"])
    parsed = cli.build_parser().parse_args(
        ["train", "--epochs", "2", "seq2seq", "--attention", "luong"]
    )
    assert (parsed.job, parsed.epochs, parsed.attention) == ("seq2seq", 2, "luong")


# 9. No abbreviations; `translate` without a text reads standard input.


def test_abbreviated_options_are_refused_with_the_right_name():
    for argv, command, given, right in [
        (["train", "transformer", "--epoch", "3"], "train transformer", "--epoch 3", "--epochs"),
        (["pretrain", "bert", "--batch", "8"], "pretrain", "--batch 8", "--batch-size"),
        (["translate", "model", "--beam", "2"], "translate", "--beam 2", "--beam-width"),
    ]:
        code, out, err = _run(argv)
        assert code == 2 and not out and len(err.splitlines()) == 1, err
        assert err == (
            f"keras-attn: error: {command}: unrecognized arguments: {given}; did you mean {right}? "
            f"(see keras-attn {command} --help)\n"
        ), err


def test_translate_without_arguments_asks_for_the_model_only():
    code, _, err = _run(["translate"])
    assert (
        code == 2
        and "the following arguments are required: model_dir (see keras-attn translate --help)"
        in err
    )


# 9. A data error stops a job before it prints its setup (which names a run folder it never makes).


@pytest.mark.slow
def test_a_data_error_comes_before_the_setup_lines(bert_runs, tmp_path):
    missing = str(tmp_path / "missing.txt")
    for argv in [
        [
            "train",
            "transformer",
            "--src",
            missing,
            "--tgt",
            missing,
            "--run-dir",
            str(tmp_path / "t"),
        ],
        ["pretrain", "bert", "--data", missing, "--run-dir", str(tmp_path / "b")],
        [
            "finetune",
            str(bert_runs.root / "bert"),
            "--train",
            missing,
            "--run-dir",
            str(tmp_path / "c"),
        ],
    ]:
        code, out, err = _run(argv)
        assert code == 2 and "missing.txt: file not found" in err, err
        assert out == "", out  # no "strategy: ...", no "run folder: ..."
        assert not os.listdir(tmp_path)


# 2. `finetune runs/bert` (a pretraining run folder), as README and --help document it.


@pytest.mark.slow
def test_finetune_from_a_pretraining_run_folder(bert_runs):
    lines = bert_runs.finetuned.splitlines()
    assert f"exported to {bert_runs.export}" in lines
    assert os.path.isfile(os.path.join(bert_runs.export, "saved_model.pb"))
    code, _, err = _run(["finetune", str(bert_runs.root), "--train", bert_runs.train])
    assert (
        code == 2
        and "not a SavedModel folder (no saved_model.pb) nor a pretraining run folder" in err
    ), err


# 5. finetune's defaults learn the 8-label task (its old 1e-4 for 3 epochs stayed near chance).


@pytest.mark.slow
def test_finetune_defaults_learn_an_eight_label_task(bert_runs):
    data = next(line for line in bert_runs.finetuned.splitlines() if line.startswith("data: "))
    assert (
        data.startswith("data: 900 training, 100 validation examples; labels ")
        and "unread" not in data
    )
    assert data.endswith(f"; {bert_runs.train}: 1 blank or empty-text line(s) skipped"), data
    accuracy = float(
        re.search(r"^valid: accuracy ([\d.]+) on 100 examples$", bert_runs.finetuned, re.M)[1]
    )
    assert accuracy >= 0.8, bert_runs.finetuned


# 7. The final validation is the best epoch's, computed as each epoch's was.


@pytest.mark.slow
def test_the_final_validation_is_the_best_epochs(bert_runs):
    (epoch,) = _epochs(bert_runs.pretrained)  # one epoch: its weights are the best
    final = dict(
        re.findall(
            r"(\w+) ([\d.]+)", bert_runs.pretrained.split("\nvalidation: ")[1].splitlines()[0]
        )
    )
    for name in ("mlm_loss", "mlm_accuracy", "mlm_perplexity", "nsp_loss", "nsp_accuracy"):
        assert final[name] == f"{epoch['val_' + name]:.4f}", (name, bert_runs.pretrained)
    epochs = _epochs(bert_runs.finetuned)
    best = min(epochs, key=lambda logs: logs["val_loss"])
    assert f"valid: accuracy {best['val_accuracy']:.4f} on 100 examples" in bert_runs.finetuned


# 6. A resumed run says the steps in all and those of this run, with this run's time: checked where
# a killed pretraining resumes (tests/jobs/test_bert_job.py), the same line as finetune's.


# The export answers as the fine-tuning job's model, and scores the job's validation accuracy (the
# fine-tuning the BERT job's tests would otherwise run again: tests/jobs/test_bert_job.py).


@pytest.mark.slow
def test_the_classifier_export_answers_as_the_jobs_model_and_scores_its_accuracy(
    bert_runs, cli_loads_saved_models_once
):
    import numpy as np
    import tensorflow as tf

    from keras_attn.checkpoints.pretrained_bert import read_pretrained
    from keras_attn.config import FinetuneConfig
    from keras_attn.jobs import bert
    from pipelines.classification import read_labelled_tsv
    from pipelines.preprocessors import pack

    accuracy = float(
        re.search(r"^valid: accuracy ([\d.]+) on 100 examples$", bert_runs.finetuned, re.M)[1]
    )
    # The export against the in-process classifier on the first sentence
    # of 200 other documents, alone and paired with the second: a wrong
    # input or output shows in the probabilities of all 8 labels.
    train = read_labelled_tsv(bert_runs.train)
    names = sorted(set(train.labels))  # the job's label ids: sorted training labels
    tokenizer, settings = read_pretrained(str(bert_runs.root / "bert"))
    served = cli_loads_saved_models_once(bert_runs.export)  # as `classify` loads it
    documents = synthetic_documents.labelled_documents(200, seed=12)
    firsts, seconds = [tf.constant([d[i] for _, d in documents]) for i in (0, 1)]
    for segments, outputs in (
        ([firsts], served.signatures["classify"](text=firsts)),
        ([firsts, seconds], served.signatures["classify_pair"](text_a=firsts, text_b=seconds)),
    ):
        token_ids, segment_ids, _ = pack(
            [tokenizer.tokenize(texts) for texts in segments], settings["max_length"]
        )
        logits = bert_runs.result.model(
            {"token_ids": token_ids, "segment_ids": segment_ids}, training=False
        )
        probabilities = outputs["probabilities"].numpy()
        np.testing.assert_allclose(probabilities, tf.nn.softmax(logits).numpy(), atol=1e-5)
        best = probabilities.argmax(-1)
        np.testing.assert_array_equal(outputs["label_id"].numpy(), best)
        assert outputs["label"].numpy().astype(str).tolist() == [names[i] for i in best]
    # The job's accuracy (its best epoch's, on the 10% of the training
    # file it held out) is the export's.
    # finetune's own split, at its default seed
    _, held = bert.hold_out_examples(train, FinetuneConfig.seed)
    labels = (
        served.signatures["classify"](text=tf.constant(held.texts_a))["label"].numpy().astype(str)
    )
    assert len(held.labels) == 100 and np.mean(labels == np.array(held.labels)) == pytest.approx(
        accuracy, abs=1e-4
    )

    texts = ["Anna cuts the sharp knife.", "Leo follows the quick fox."]
    code, out, _ = _run(["classify", bert_runs.export, *texts])
    outputs = {
        k: v.numpy() for k, v in served.signatures["classify"](text=tf.constant(texts)).items()
    }
    shown = [
        f"{label.decode()}\t{p.max():.3f}"
        for label, p in zip(outputs["label"], outputs["probabilities"])
    ]
    assert code == 0 and out.splitlines() == shown
    assert [line.split("\t")[0] for line in shown] == ["kitchen", "forest"]


# 8. classify: --top-k labels with probabilities; a pair refused by a
# single-text model (and vice versa).


@pytest.mark.slow
def test_classify_shows_the_top_labels_with_probabilities(bert_runs, cli_loads_saved_models_once):
    text = "Anna washes the sharp knife in the kitchen."
    code, top1, _ = _run(["classify", bert_runs.export, text])
    code_k, top8, _ = _run(["classify", bert_runs.export, text, "--top-k", "20"])
    assert code == code_k == 0
    fields = top8.strip().split("\t")
    labels, probabilities = fields[0::2], [float(p) for p in fields[1::2]]
    # every label once: 8 of the 20 asked
    assert sorted(labels) == sorted(synthetic_documents.TOPICS)
    assert probabilities == sorted(probabilities, reverse=True) and sum(
        probabilities
    ) == pytest.approx(1, abs=0.01)
    assert top1 == "\t".join(fields[:2]) + "\n"
    assert labels[0] == "kitchen"


@pytest.mark.slow
def test_classify_refuses_an_empty_text_and_says_which_it_cut(
    bert_runs, cli_loads_saved_models_once
):
    long = "Anna washes the sharp knife in the kitchen. " * 100
    code, out, err = _run(["classify", bert_runs.export, long, "  ", "Anna washes the knife."])
    assert code == 2 and len(out.splitlines()) == 3 and out.splitlines()[1] == "", out
    assert err.splitlines() == [
        "keras-attn: input 1 was longer than the model accepts and was truncated",
        "keras-attn: error: input 2: empty text, not classified",
    ]


@pytest.mark.slow
def test_classify_refuses_a_pair_for_a_single_text_model_and_the_reverse(
    bert_runs, cli_loads_saved_models_once, tmp_path
):
    code, out, err = _run(
        ["classify", bert_runs.export, "Anna washes the sharp knife.", "A man.\tA person."]
    )
    assert code == 2 and out == "" and len(err.splitlines()) == 1, err
    assert (
        f"input 2 is a TEXT_A<TAB>TEXT_B pair, but {bert_runs.export} was fine-tuned on single "
        "texts" in err
    )
    pairs = tmp_path / "pairs"
    shutil.copytree(bert_runs.export, pairs)
    (pairs / "assets.extra" / "classifier.json").write_text(
        json.dumps({"labels": [], "pairs": True})
    )
    code, _, err = _run(["classify", str(pairs), "A man.\tA person.", "One text."])
    assert (
        code == 2
        and "input 2 is a single text (no TAB), but" in err
        and "fine-tuned on pairs" in err
    ), err


# 4. pretrain bert's `try:` line: a sentence the built-in corpus answers.


def test_the_fill_mask_example_is_answered_by_the_builtin_corpus(monkeypatch, tmp_path):
    from keras_attn.jobs import bert

    export = str(tmp_path / "saved_models" / "bert" / "1")
    monkeypatch.setattr(
        bert, "pretrain", lambda config: bert.BertResult(export, {}, {}, new_export=True)
    )
    code, out, _ = _run(["pretrain", "bert"])
    example = bert.FILL_MASK_EXAMPLES["builtin"]
    assert code == 0 and out.splitlines()[-1] == f"try: keras-attn fill-mask {export} '{example}'"
    # Its words are the built-in corpus's, and the corpus puts one
    # word only between the mask's neighbours.
    corpus = " ".join(
        s.lower() for d in synthetic_documents.document_corpus(3000, seed=0) for s in d
    )
    words = example.lower().replace(".", " .").split()
    assert set(words) - {"[mask]"} <= set(corpus.replace(".", " .").split())
    at = words.index("[mask]")
    assert len(set(re.findall(rf"\b{words[at - 1]} (\w+) {words[at + 1]}\b", corpus))) == 1


# 10. evaluate prints both BLEU signatures; plot-attention says it decodes greedily.


def test_evaluate_prints_both_bleu_signatures(tiny_export, cli_loads_once):
    code, out, _ = _run(["evaluate", tiny_export, "--beam-width", "1"])
    lines = out.splitlines()
    assert code == 0 and lines[1].startswith("BLEU signature: nrefs:1|case:mixed|")
    assert lines[2].startswith("tokenized lowercased BLEU signature: nrefs:1|case:lc|")


def test_plot_attention_says_it_decodes_greedily(tiny_export, cli_loads_once, tmp_path):
    code, out, _ = _run(
        ["plot-attention", tiny_export, "ein hund", "--out", str(tmp_path / "a.png")]
    )
    greedy = _run(["translate", tiny_export, "ein hund", "--beam-width", "1"])[1]
    assert code == 0 and out.splitlines()[0] == greedy.strip()
    assert "greedy decoding" in out.splitlines()[1]
    assert "decoded greedily" in " ".join(
        cli.build_parser()
        ._subparsers._group_actions[0]
        .choices["plot-attention"]
        .description.split()
    )
