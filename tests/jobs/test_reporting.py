"""What the training job says about itself: precision, strategy, progress."""

import io
import re
import sys
import time

import pytest

from keras_attn.config import TranslationConfig
from keras_attn.training import precision, runner


@pytest.mark.parametrize(
    "flags, mixed, said",
    [
        ("fpu avx512f", False, "float32: this CPU has no native bfloat16 (AVX512-BF16 or AMX"),
        (
            "fpu avx512f",
            True,
            "mixed_bfloat16 as chosen, though this CPU has no native bfloat16 (emulated",
        ),
        ("fpu avx512_bf16", True, "mixed_bfloat16: this CPU runs bfloat16 natively"),
        (
            "fpu amx_bf16",
            False,
            "float32 as chosen, though this CPU runs bfloat16 natively (--precision auto",
        ),
    ],
)
def test_the_precision_is_said_with_its_reason(flags, mixed, said, monkeypatch):
    monkeypatch.setattr(precision, "cpu_info", lambda: {"flags": flags})
    monkeypatch.setattr(precision.tf.config, "list_physical_devices", lambda kind: [])
    assert precision.describe_precision(mixed).startswith(said)
    assert precision.resolve_mixed_precision("auto") == ("bf16" in flags)


def test_the_setup_names_strategy_devices_and_global_batch(tmp_path):
    from keras_attn.jobs import translation
    from keras_attn.training.strategy import get_strategy

    strategy = get_strategy("mirrored", ["/cpu:0", "/cpu:1"])
    config = TranslationConfig(run_dir=str(tmp_path / "run"), batch_size=16, jit_compile=True)
    lines = translation.describe_setup(config, strategy)
    assert lines[0] == (
        "strategy: MirroredStrategy, 2 replica(s) on "
        "/job:localhost/replica:0/task:0/device:CPU:0, /job:localhost/replica:0/task:0/device:CPU:1"
    )
    assert lines[2].startswith("XLA: on") and lines[3] == "global batch: 32 (16 per replica)"
    assert lines[4] == f"run folder: {tmp_path / 'run'} (a new run)"
    by_tokens = TranslationConfig(run_dir=str(tmp_path / "run"), batch_size=500, batch_tokens=4096)
    assert translation.describe_setup(by_tokens, strategy)[3] == (
        "global batch: up to 8192 ids (4096 per replica), at most 1000 examples"
    )


def test_the_progress_bar_leaves_the_first_step_out_of_its_estimate(monkeypatch, capsys):
    monkeypatch.setattr(sys, "stdout", io.StringIO())
    bar = runner.Progbar(target=100, verbose=1)
    bar._start -= 60  # the first step compiled for a minute
    bar.update(1)
    assert sys.stdout.getvalue() == ""  # its time says nothing about the others
    time.sleep(0.1)
    bar.update(2)
    assert bar._estimate_step_duration(2, time.time()) < 1  # Keras's own: 60 s a step
    eta = re.search(r"  2/100.*━\x1b\[0m \x1b\[1m(\S+)\x1b", sys.stdout.getvalue()).group(1)
    assert re.fullmatch(r"\d+s", eta) and int(eta[:-1]) < 30, eta  # 98 steps of 0.1 s, not 1:38:00


@pytest.mark.parametrize(
    "terminal, shown", [(True, runner.ProgressBar), (False, runner.EpochLines)]
)
def test_progress_is_a_bar_on_a_terminal_and_lines_in_a_file(terminal, shown, monkeypatch):
    monkeypatch.setattr(runner, "_is_terminal", lambda stream: terminal)
    assert type(runner.progress_display("auto")) is shown
    assert runner.progress_display(0) is None


def test_the_last_line_names_the_updates_averaged_and_how_many_the_run_kept():
    import types

    from keras_attn.jobs import common

    config = TranslationConfig(backup_every=4, average_last=3)
    model = types.SimpleNamespace(count_params=lambda: 1200)
    strategy = types.SimpleNamespace(num_replicas_in_sync=1)
    result = types.SimpleNamespace(
        model=model,
        strategy=strategy,
        steps=11,
        initial_steps=0,
        already_finished=False,
        averaged_updates=(4, 8, 11),
    )
    assert common.describe_training(config, result, 5) == (
        "trained 1,200 parameters for 11 steps on 1 replica(s), global batch 64, in 5 s; "
        "the model is the mean of the weights at updates 4, 8, 11 (--average-last 3)"
    )
    finished = types.SimpleNamespace(
        **dict(vars(result), already_finished=True, averaged_updates=(8, 11))
    )
    assert common.describe_training(config, finished, 5) == (
        "nothing trained: the run had already finished after 11 steps; "
        "the model is the mean of the weights at updates 8, 11 (--average-last 3: the run kept 2)"
    )
    not_averaged = types.SimpleNamespace(**dict(vars(result), averaged_updates=()))
    assert common.describe_training(config, not_averaged, 5).endswith("in 5 s")
