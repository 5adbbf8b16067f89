"""The job configs are the one home of every setting: the command line's flags come from them."""

import dataclasses

import pytest

from keras_attn import cli, config, errors

COMMANDS = {  # argv with only what is required → the config it builds
    ("train", "transformer"): config.TranslationConfig,
    ("train", "seq2seq"): config.Seq2SeqConfig,
    ("pretrain", "bert"): config.PretrainConfig,
    ("finetune", "runs/bert", "--train", "train.tsv"): config.FinetuneConfig,
}


# A flag that does something only beside others is given with them
# (and compared with a config of them alone).
COMPANIONS = {
    "decay_parameters": ["--scheduled-sampling", "linear"],
    "score": ["--attention", "luong"],
    "local": ["--attention", "luong"],
    "window": ["--attention", "luong", "--local", "monotonic"],
}


def _built(argv, *flags):
    return cli.config_from(cli.build_parser().parse_args([*argv, *flags]), COMMANDS[argv])


@pytest.mark.parametrize("argv", COMMANDS, ids=" ".join)
def test_a_command_without_flags_builds_the_configs_defaults(argv, monkeypatch):
    from keras_attn.training import precision

    # --precision auto on a bfloat16 machine
    monkeypatch.setattr(precision, "native_bfloat16", lambda: True)
    required = {"model_dir": "runs/bert", "train": "train.tsv"} if argv[0] == "finetune" else {}
    expected = COMMANDS[argv](**required, mixed_precision=True)
    assert _built(argv) == expected


@pytest.mark.parametrize("argv", COMMANDS, ids=" ".join)
def test_every_flag_reaches_its_field(argv, monkeypatch):
    """Each field with help is a flag, whose value lands in that field (and nowhere else)."""
    from keras_attn.training import precision

    # so --precision float32 changes a field
    monkeypatch.setattr(precision, "native_bfloat16", lambda: True)
    config_class = COMMANDS[argv]
    examples = {int: "12", float: "0.5", str: "x"}  # within every check
    for field, metadata in config.flags(config_class):
        if metadata.get("positional") or field.name == "train":
            continue
        flag = config.flag_name(field)
        companions = COMPANIONS.get(field.name, [])
        baseline = _built(argv, *companions)
        if field.name == "mixed_precision":
            given, expected = ["--precision", "float32"], False
        elif field.name == "decay_parameters":
            given, expected = [flag, "k=3"], {"k": 3.0}
        elif field.name == "num_heads":
            given, expected = [flag, "4"], 4  # one that divides the preset's width
        elif "choices" in metadata:
            value = next(c for c in metadata["choices"] if c != getattr(baseline, field.name))
            given, expected = [flag, value], value
        elif field.type is bool:
            given, expected = [flag], not getattr(baseline, field.name)
        elif metadata.get("nargs"):
            given, expected = [flag, "a", "b"], ["a", "b"]
        else:
            given, expected = [flag, examples[field.type]], field.type(examples[field.type])
        built = _built(argv, *companions, *given)
        changed = {
            f.name
            for f in dataclasses.fields(built)
            if getattr(built, f.name) != getattr(baseline, f.name)
        }
        assert getattr(built, field.name) == expected, flag
        derived = {"run_dir"} if field.name == "name" else set()  # runs/<name>
        # as many pairs as the budget holds
        derived |= {"batch_size"} if field.name == "batch_tokens" else set()
        assert changed == {field.name} | derived, flag


@pytest.mark.parametrize(
    "config_class", [config.TranslationConfig, config.Seq2SeqConfig, config.PretrainConfig]
)
def test_a_config_refuses_what_is_not_among_a_flags_choices(config_class):
    """Also when made in Python, where argparse does not check: one line naming the flag."""
    from keras_attn.errors import UserError

    chosen = [
        field
        for field, metadata in config.flags(config_class)
        if "choices" in metadata and field.type is not bool
    ]
    assert len(chosen) >= 2
    for field in chosen:
        with pytest.raises(
            UserError, match=f"^{config.flag_name(field)} must be one of .*, got 'huge'$"
        ):
            config_class(**{field.name: "huge"})


def test_a_flag_is_named_as_the_command_line_spells_it():
    fields = {field.name: field for field in dataclasses.fields(config.FinetuneConfig)}
    assert config.flag_name(fields["model_dir"]) == "model_dir"  # a positional argument
    assert config.flag_name(fields["max_sequence_length"]) == "--max-length"
    assert config.flag_name(fields["batch_size"]) == "--batch-size"


@pytest.mark.parametrize(
    "family, config_class", [("captioner", config.CaptionConfig), ("seq2seq", config.Seq2SeqConfig)]
)
def test_xla_is_refused_where_the_model_trains_through_a_loop(
    tmp_path, capsys, family, config_class
):
    """XLA's forward pass cannot hand a TensorFlow loop's saved steps
    to the gradient (a traceback from TensorFlow).
    """
    with pytest.raises(SystemExit, match="2"):  # argparse's
        cli.main(
            ["train", family, "--jit-compile", "--run-dir", str(tmp_path / "run"), "--no-export"]
        )
    error = capsys.readouterr().err
    assert error.startswith(
        f"keras-attn: error: train {family}: --jit-compile: for train transformer only"
    ), error
    refusal = f"jit_compile: the {family} trains through the loop of its recurrence"
    with pytest.raises(errors.UserError, match=refusal):
        config_class(jit_compile=True, run_dir=str(tmp_path / "run"))
    assert not (tmp_path / "run").exists()
