"""Several workers and killed processes, for real: subprocesses on 127.0.0.1.

Every process runs `translation_worker.py` (the Transformer job on a small
built-in corpus) with a timeout; ports are picked free at run time; every
process is killed at the end of its test whatever happens. A process that
is to die SIGKILLs itself at a chosen step, or inside an export, so the kill
lands at the same place however loaded the machine is. A run on one
device that is not killed runs in this process instead (`_run_here`), and
one on one device that kills itself in a process forked from one that has
imported TensorFlow (`Cluster.killed_here`): a process start costs seconds.
"""

import contextlib
import io
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

from keras_attn.training.strategy import local_cluster

pytestmark = pytest.mark.slow  # real processes

WORKER = Path(__file__).with_name("translation_worker.py")
TIMEOUT = 240  # seconds any one process may take

# 320 pairs at a global batch of 32: 10 steps an epoch, 20 in all, with a
# backup every 4 steps within an epoch (steps 4 and 8, then 10 at its end).
JOB = dict(
    builtin_size=320,
    builtin_eval_size=16,
    epochs=2,
    preset="tiny",
    warmup_steps=5,
    vocabulary_size=600,
    beam_width=1,
    verbose=2,
    backup_every=4,
    export=False,
    translate_test_split=False,  # no test here reads the scores
    # Tracing translate_compiled adds seconds to each export (tests/test_compiled_search.py).
    compiled_search=False,
)
STEPS_PER_EPOCH, STEPS = 10, 20

# MultiWorkerMirroredStrategy runs TensorFlow's coordination service (on
# the chief), which declares a worker dead after its default heartbeat
# timeout of 10 s without heartbeats (tsl coordination_service.cc,
# kDefaultHeartbeatTimeoutMs) and aborts the collectives of the others,
# which then raise. Measured: the chief exits 10 s after the kill. The
# bound leaves room for a loaded machine.
SURVIVOR_TIMEOUT = 10 + 80


def _job(batch_size, run_dir, strategy, **overrides):
    """The worker's config: `JOB` with these settings."""
    return dict(JOB, batch_size=batch_size, run_dir=str(run_dir), strategy=strategy, **overrides)


class Cluster:
    """Starts job processes and guarantees they are gone afterwards."""

    def __init__(self, tmp_path):
        self.tmp_path = tmp_path
        self.processes = []

    def start(self, name, batch_size, run_dir, tf_config=None, **overrides):
        env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
        env.pop("TF_CONFIG", None)
        if tf_config:
            env["TF_CONFIG"] = tf_config
        config = _job(
            batch_size, run_dir, "multi_worker" if tf_config else "one_device", **overrides
        )
        log = open(self.tmp_path / f"{name}.log", "w")
        process = subprocess.Popen(
            [sys.executable, str(WORKER), json.dumps(config), str(self.tmp_path / name)],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        log.close()  # the child has its own copy
        process.name, process.started = name, time.time()
        self.processes.append(process)
        return process

    def killed_here(self, name, batch_size, run_dir, **overrides):
        """`killed(start(...))` for one process on one device, forked from
        a process that has imported TensorFlow (tests/fresh_process.py)
        instead of started anew: a process start costs seconds."""
        from tests import fresh_process

        assert "TF_CONFIG" not in os.environ
        config = _job(batch_size, run_dir, "one_device", **overrides)
        script = f"import runpy\nrunpy.run_path({str(WORKER)!r}, run_name='__main__')\n"
        try:
            done = fresh_process.run(
                script, json.dumps(config), self.tmp_path / name, timeout=TIMEOUT
            )
        except subprocess.TimeoutExpired as expired:
            raise AssertionError(
                f"{name} did not end within {TIMEOUT} s:\n{expired.stdout[-3000:]}"
            ) from None
        log = done.stdout + done.stderr
        (self.tmp_path / f"{name}.log").write_text(log)
        assert done.returncode == -signal.SIGKILL, (
            f"{name} exited with {done.returncode}, not SIGKILL:\n{log[-3000:]}"
        )
        assert "SIGKILL" in log

    def exit_code(self, process, timeout=TIMEOUT):
        """Waits (at most `timeout` s from its start) for `process` to end; kills it otherwise."""
        try:
            return process.wait(timeout=max(1, timeout - (time.time() - process.started)))
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
            raise AssertionError(
                f"{process.name} did not end within {timeout} s:\n{self.log(process)}"
            ) from None

    def wait(self, process, timeout=TIMEOUT):
        code = self.exit_code(process, timeout)
        assert code == 0, f"{process.name} exited with {code}:\n{self.log(process)}"
        return self.result(process.name)

    def killed(self, process):
        """Waits for a process that SIGKILLs itself."""
        code = self.exit_code(process)
        assert code == -signal.SIGKILL, (
            f"{process.name} exited with {code}, not SIGKILL:\n{self.log(process)}"
        )
        assert "SIGKILL" in self.log(process)

    def result(self, name):
        with open(self.tmp_path / f"{name}.json") as f:
            result = json.load(f)
        with np.load(self.tmp_path / f"{name}.npz") as weights:
            result["weights"] = [
                weights[key] for key in sorted(weights.files, key=lambda k: int(k.split("_")[1]))
            ]
        return result

    def log(self, process, tail=3000):
        return (self.tmp_path / f"{process.name}.log").read_text()[-tail:]

    def close(self):
        for process in self.processes:
            if process.poll() is None:
                process.kill()
                process.wait()


@pytest.fixture
def cluster(tmp_path):
    cluster = Cluster(tmp_path)
    yield cluster
    cluster.close()


def _run_here(folder, name, batch_size, run_dir, **overrides):
    """Runs the job on one device in this process, as `translation_worker.py` would.

    What it prints goes to `<folder>/<name>.log`; it returns what `Cluster.result` would.
    """
    from keras_attn.config import TranslationConfig
    from keras_attn.jobs import translation
    from tests.training import translation_worker

    config = _job(batch_size, run_dir, "one_device", **overrides)
    printed = io.StringIO()
    with pytest.MonkeyPatch.context() as patch, contextlib.redirect_stdout(printed):
        if not config.pop("translate_test_split", True):
            patch.setattr(translation, "evaluate", translation_worker.score_empty_translations)  # noqa: SLF001
        result = translation.run(TranslationConfig(**config))
    (folder / f"{name}.log").write_text(printed.getvalue())
    return {
        "steps": result.steps,
        "history": result.history,
        "export_path": result.export_path,
        "new_export": result.new_export,
        "already_finished": result.already_finished,
        "weights": result.model.get_weights(),
    }


def _uninterrupted(root, **overrides):
    result = _run_here(root, "uninterrupted", 32, root / "run", **overrides)
    result["vocabularies"] = sorted((root / "run").glob("vocab.*.txt"))
    return result


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    """One device, global batch 32, never stopped."""
    return _uninterrupted(tmp_path_factory.mktemp("uninterrupted"))


# The killed process's model: one layer a side, of width 32. What that test
# checks (what a kill leaves in the run folder and among the exports, what
# a rerun does) does not depend on the model; a run with its export takes
# 8 s of CPU where the tiny preset takes 14 s (measured, single run here).
ONE_LAYER = dict(num_layers=1, hidden_dim=32, num_heads=2, intermediate_dim=64)


@pytest.fixture(scope="module")
def uninterrupted_one_layer(tmp_path_factory):
    """`uninterrupted` with the `ONE_LAYER` model."""
    return _uninterrupted(tmp_path_factory.mktemp("uninterrupted_one_layer"), **ONE_LAYER)


def _run_dir(tmp_path, uninterrupted):
    """A new run folder holding the reference's vocabularies.

    Learning WordPieces is not deterministic across processes (HuggingFace
    `tokenizers` breaks ties in hash-map order), so runs compared with the
    reference must reuse its vocabularies, as a resumed run reuses its own.
    """
    run = tmp_path / "run"
    run.mkdir()
    for path in uninterrupted["vocabularies"]:
        shutil.copy(path, run)
    return run


def _latest_backup_step(run_dir):
    state = Path(run_dir) / "checkpoints" / "checkpoint"
    if not state.exists():
        return 0
    match = re.search(r'model_checkpoint_path: "ckpt-(\d+)"', state.read_text())
    return int(match.group(1)) if match else 0


def _file_contents(folder):
    return {
        str(path.relative_to(folder)): path.read_bytes()
        for path in sorted(folder.rglob("*"))
        if path.is_file()
    }


def _assert_equal_but_for_sign_flips(a, b, atol=1e-4, share=0.9995, at_most=1e-2):
    """Equal to `atol` for `share` of the weights; the rest, the few that Adam
    moved on a rounding-noise gradient, differ by `at_most` (a few learning-rate steps).

    Adam (epsilon 1e-9) turns rounding differences in gradients that are
    almost zero (an embedding row whose contributions cancel) into steps of
    the learning rate's size in either direction, so differently summed runs
    drift apart in a few weights.
    """
    assert len(a) == len(b) and all(x.shape == y.shape for x, y in zip(a, b))
    close = sum(int(np.sum(np.abs(x - y) <= atol)) for x, y in zip(a, b))
    assert close >= share * sum(x.size for x in a)
    assert max(float(np.max(np.abs(x - y))) for x, y in zip(a, b)) < at_most


def _assert_identical(a, b):
    assert len(a) == len(b)
    for x, y in zip(a, b):
        np.testing.assert_array_equal(x, y)


# Short: XLA compiles the model anew for every batch shape (seconds each, 100 s
# for this job's first epoch on a loaded machine), so one batch an epoch,
# cut to 8 tokens: every batch has the same shape. No warm-up: both steps learn.
BF16_XLA = dict(
    builtin_size=32,
    epochs=2,
    max_sequence_length=8,
    warmup_steps=0,
    backup_every=0,
    mixed_precision=True,
    jit_compile=True,
)
BF16_XLA_TIMEOUT = 420  # each compilation takes tens of seconds on a loaded 2-core machine


@pytest.mark.long  # 50-80 s, two XLA compilations: `python -m pytest -m long`
def test_two_workers_train_in_bfloat16_with_xla(cluster, uninterrupted, tmp_path):
    """Both workers in bfloat16 with XLA, in step with each other, learning.

    That two workers compute what one process computes is checked in float32
    (`test_two_workers_resume_after_one_is_killed`), and in tests/training/test_runner.py
    the XLA step against the plain one, and bfloat16 with XLA against float32 on one
    device: the precision policy changes the model, the strategy the step around it; this
    is the suite's one bfloat16 + XLA run on two devices. (A one-process bfloat16/XLA
    reference here cost a third XLA compilation, a third of this test's time.)
    """
    configs = local_cluster(2)
    run = _run_dir(tmp_path, uninterrupted)
    workers = [cluster.start(f"worker{i}", 16, run, configs[i], **BF16_XLA) for i in range(2)]
    chief, other = (cluster.wait(worker, BF16_XLA_TIMEOUT) for worker in workers)
    for name in ("worker0", "worker1"):
        log = (tmp_path / f"{name}.log").read_text()
        assert "precision: mixed_bfloat16" in log and "XLA: on" in log
        assert (
            "XLA: batch lengths rounded up to multiples of 8 ids: at most 1 x 1 (source x target)"
            in log
        )
    assert chief["steps"] == other["steps"] == 2
    _assert_identical(chief["weights"], other["weights"])
    # It learns: on the same 32 pairs the loss falls by over 1.5 after the
    # first step (measured), and the validation loss falls again after the second.
    history = chief["history"]
    assert history["loss"][1] < history["loss"][0] - 0.5, history
    assert history["val_loss"][1] < history["val_loss"][0] - 0.05, history


@pytest.mark.long  # it trains a reference run too: `python -m pytest -m long`
def test_two_workers_resume_after_one_is_killed(cluster, uninterrupted, tmp_path):
    run = _run_dir(tmp_path, uninterrupted)
    configs = local_cluster(2)
    chief = cluster.start("chief", 16, run, configs[0])
    # Worker 1 dies after step 16, in epoch 2; the last backup is step 14's.
    other = cluster.start("other", 16, run, configs[1], kill_after_step=16)
    cluster.killed(other)
    # The survivor notices through TensorFlow's heartbeats and ends with one line of ours.
    # from now
    code = cluster.exit_code(chief, timeout=time.time() - chief.started + SURVIVOR_TIMEOUT)
    assert code != 0, cluster.log(chief)
    assert re.search(
        r"training stopped: .*Start the job again on every worker; "
        r"it resumes from the last backup\.",
        cluster.log(chief),
    ), cluster.log(chief)
    assert _latest_backup_step(run) == 14
    # The launcher (Kubernetes, SLURM, a cloud service) restarts the whole job.
    configs = local_cluster(2)
    workers = [cluster.start(f"again{i}", 16, run, configs[i]) for i in range(2)]
    first, second = (cluster.wait(worker) for worker in workers)
    assert first["steps"] == second["steps"] == STEPS
    assert "ckpt-14: epoch 2, 4 steps done in it, 14 in all" in cluster.log(workers[0])
    _assert_identical(first["weights"], second["weights"])
    # Two workers sum each step's gradients in another order than one process
    # does: a CI run had 0.098% of the weights off by more than 1e-4 (1,063 of
    # 1,079,296). A resume that gets anything wrong moves most weights: a run
    # whose warm-up is 6 steps instead of 5 differs in 75% of them (measured).
    _assert_equal_but_for_sign_flips(first["weights"], uninterrupted["weights"], share=0.995)
    np.testing.assert_allclose(
        first["history"]["loss"], uninterrupted["history"]["loss"][-1:], rtol=1e-4
    )
    np.testing.assert_allclose(
        first["history"]["val_loss"], uninterrupted["history"]["val_loss"][-1:], rtol=1e-4
    )
    # (This test also stands for "two workers equal one process": the restarted
    # pair trains epoch 2 from the backup to the reference's weights and losses.)
    assert not [p for p in run.iterdir() if "scratch" in p.name]  # temporary folders gone
    # the chief's
    assert sorted(p.name for p in (run / "logs").iterdir()) == [
        "train",
        "validation",
    ]
    for name in ("chief", "again0", "again1"):  # no strategy runs eagerly (TensorFlow warns: slow)
        assert "eagerly has significant overhead" not in (tmp_path / f"{name}.log").read_text()


class _AnotherModel(tf.Module):
    """A served model, not the job's: the version before the job's exports."""

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
    def translate(self, texts):
        return {"translations": texts}

    def signatures(self):
        return {"serving_default": self.translate}


def test_a_killed_process_resumes_mid_epoch_and_a_kill_during_export_keeps_the_last_version(
    cluster, uninterrupted_one_layer, tmp_path
):
    """One process killed twice, at a step and inside its export, then run a third time."""
    from keras_attn.serving import versions
    from keras_attn.training.runner import read_history

    run, root = _run_dir(tmp_path, uninterrupted_one_layer), tmp_path / "saved_models"
    versions.export(_AnotherModel(), str(root), "transformer")  # version 1
    models = root / "transformer"
    version_1 = _file_contents(models / "1")
    exported = dict(ONE_LAYER, export=True, export_root=str(root))

    # Killed after step 6 of epoch 1: its last backup is step 4's, so the
    # rerun must replay steps 5 and 6 on the same batches.
    cluster.killed_here("killed", 32, run, kill_after_step=6, **ONE_LAYER)
    assert _latest_backup_step(run) == 4
    # The rerun resumes, trains to the end, and dies inside its export.
    cluster.killed_here("resumed", 32, run, kill_in_export=True, **exported)
    assert "ckpt-4: epoch 1, 4 steps done in it, 4 in all" in (tmp_path / "resumed.log").read_text()
    # Both epochs' training loss, the interrupted one's over all its steps.
    history = read_history(run)
    np.testing.assert_allclose(
        history["loss"], uninterrupted_one_layer["history"]["loss"], rtol=1e-5
    )
    np.testing.assert_allclose(
        history["val_loss"], uninterrupted_one_layer["history"]["val_loss"], rtol=1e-5
    )

    # The kill left version 1 as it was, and its own temporary folder.
    assert sorted(p.name for p in models.iterdir() if not p.name.startswith(".")) == ["1"]
    left = [p for p in models.iterdir() if p.name.startswith(".tmp-export-")]
    assert len(left) == 1 and (left[0] / "saved_model.pb").is_file()
    assert _file_contents(models / "1") == version_1

    # Run a third time: nothing to train; it exports version 2 and cleans up.
    third = _run_here(tmp_path, "third", 32, run, **exported)
    assert (
        "nothing trained: the run had already finished after 20 steps"
        in (tmp_path / "third.log").read_text()
    )
    assert third["steps"] == STEPS and third["already_finished"]
    assert third["export_path"] == str(models / "2") and third["new_export"]
    assert sorted(p.name for p in models.iterdir()) == ["1", "2"]
    # Same process layout, same sums; a few weights may still take Adam's steps on rounding
    # noise (see the helper).
    _assert_equal_but_for_sign_flips(third["weights"], uninterrupted_one_layer["weights"])


@pytest.mark.long  # two workers, 30-60 s: `python -m pytest -m long`
def test_two_workers_each_stream_their_own_shards_in_step(cluster, tmp_path):
    """A corpus of 4 TSV shards on 2 workers: each reads 2 (pipelines' tests
    check they are disjoint), both declare the same epoch, stay in step and
    learn; the chief prepares the shards, the other waits for them."""
    from pipelines.synthetic import translation_corpus
    from tests.streams import write_shards

    data = write_shards(
        tmp_path, translation_corpus(seed=0, train_size=320, valid_size=16, test_size=0), 4
    )
    data["prepared"] = str(tmp_path / "prepared")
    configs = local_cluster(2)
    workers = [
        cluster.start(f"worker{i}", 16, tmp_path / "run", configs[i], **data) for i in range(2)
    ]
    chief, other = (cluster.wait(worker) for worker in workers)
    for index, name in enumerate(("worker0", "worker1")):
        log = (tmp_path / f"{name}.log").read_text()
        assert (
            f"input: each of 2 workers reads its own part of the training data (this one: {index})"
            in log
        ), log
        assert ("(4 shards written now)" in log) == (index == 0)
    assert chief["steps"] == other["steps"] == 2 * 10  # about 320 pairs a global batch of 32
    _assert_identical(chief["weights"], other["weights"])
    assert chief["history"]["loss"][1] < chief["history"]["loss"][0] - 0.3, chief["history"]


@pytest.mark.long  # three processes, 40-70 s: `python -m pytest -m long`
def test_a_run_over_shards_killed_mid_epoch_resumes_from_prepared_shards_on_the_unseen_batches(
    cluster, tmp_path
):
    """4 TSV shards read as a stream; killed after step 6 of its first epoch
    (last backup: step 4), rerun with the shards prepared (`--prepared`):
    its losses are those of a run over the text that never stopped."""
    from keras_attn.training.runner import read_history
    from pipelines.synthetic import translation_corpus
    from tests.streams import write_shards

    data = write_shards(
        tmp_path, translation_corpus(seed=0, train_size=320, valid_size=16, test_size=0), 4
    )
    reference = cluster.wait(cluster.start("reference", 32, tmp_path / "reference", **data))
    run = tmp_path / "run"
    run.mkdir()
    for path in (tmp_path / "reference").glob("vocab.*.txt"):  # as `_run_dir`, for the same reason
        shutil.copy(path, run)
    prepared = dict(data, prepared=str(tmp_path / "prepared"))
    cluster.killed(cluster.start("killed", 32, run, kill_after_step=6, **prepared))
    assert _latest_backup_step(run) == 4
    assert "(4 shards written now)" in (tmp_path / "killed.log").read_text()
    resumed = cluster.wait(cluster.start("resumed", 32, run, **prepared))
    log = (tmp_path / "resumed.log").read_text()
    assert (
        "ckpt-4: epoch 1, 4 steps done in it, 4 in all" in log and "(0 shards written now)" in log
    )
    assert resumed["steps"] == reference["steps"] > 2 * 6
    np.testing.assert_allclose(read_history(run)["loss"], reference["history"]["loss"], rtol=1e-5)
