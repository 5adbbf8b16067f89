"""Several workers and killed processes, for real: subprocesses on 127.0.0.1.

Every process runs `translation_worker.py` (the Transformer job on a small
built-in corpus) with a timeout; ports are picked free at run time; every
process is killed at the end of its test whatever happens.
"""

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

from keras_attn.training.strategy import local_cluster

WORKER = Path(__file__).with_name("translation_worker.py")
TIMEOUT = 240  # seconds any one process may take

# 1,200 pairs at a global batch of 32: 38 steps an epoch, 76 in all.
JOB = dict(
    builtin_size=1200, builtin_eval_size=16, epochs=2, preset="tiny", warmup_steps=20,
    vocab_size=600, beam_width=1, verbose=2, backup_every=4, export=False,
)
STEPS = 76


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
        config = dict(JOB, batch_size=batch_size, run_dir=str(run_dir),
                      strategy="multi_worker" if tf_config else "one_device", **overrides)
        log = open(self.tmp_path / f"{name}.log", "w")
        process = subprocess.Popen(
            [sys.executable, str(WORKER), json.dumps(config), str(self.tmp_path / name)],
            env=env, stdout=log, stderr=subprocess.STDOUT,
        )
        process.name, process.started = name, time.time()
        self.processes.append(process)
        return process

    def wait(self, process, timeout=TIMEOUT):
        try:
            code = process.wait(timeout=max(1, timeout - (time.time() - process.started)))
        except subprocess.TimeoutExpired:
            process.kill()
            raise AssertionError(f"{process.name} timed out:\n{self.log(process)}")
        assert code == 0, f"{process.name} exited with {code}:\n{self.log(process)}"
        return self.result(process.name)

    def result(self, name):
        with open(self.tmp_path / f"{name}.json") as f:
            result = json.load(f)
        with np.load(self.tmp_path / f"{name}.npz") as weights:
            result["weights"] = [weights[key] for key in sorted(weights.files, key=lambda k: int(k.split("_")[1]))]
        return result

    def log(self, process):
        return (self.tmp_path / f"{process.name}.log").read_text()[-3000:]

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


def _reference(tmp_path_factory, name, **overrides):
    """One process, global batch 32, never stopped."""
    root = tmp_path_factory.mktemp(name)
    reference = Cluster(root)
    try:
        result = reference.wait(reference.start(name, 32, root / "run", **overrides))
    finally:
        reference.close()
    result["vocabularies"] = sorted((root / "run").glob("vocab.*.txt"))
    return result


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    return _reference(tmp_path_factory, "uninterrupted")


# A few steps: Adam (epsilon 1e-9) turns rounding differences in gradients
# that are almost zero (an embedding row whose contributions cancel) into
# steps of the learning rate's size in either direction, so after many steps
# the weights of differently summed runs drift apart by about 1e-3.
FEW_STEPS = dict(builtin_size=320, epochs=1)


def _assert_equal_but_for_sign_flips(a, b, atol=1e-4, share=0.9995, at_most=1e-2):
    """Equal to `atol` for `share` of the weights; the rest, the few that Adam
    moved on a rounding-noise gradient, differ by `at_most` (a few learning-rate steps)."""
    close = sum(int(np.sum(np.abs(x - y) <= atol)) for x, y in zip(a, b))
    assert close >= share * sum(x.size for x in a)
    assert max(float(np.max(np.abs(x - y))) for x, y in zip(a, b)) < at_most


@pytest.fixture(scope="module")
def few_steps(tmp_path_factory):
    return _reference(tmp_path_factory, "few_steps", **FEW_STEPS)


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


def _kill_after_backup(cluster, process, run_dir, step, also=()):
    """SIGKILLs `process` (and `also`) once a backup at `step` or later exists."""
    while _latest_backup_step(run_dir) < step:
        assert process.poll() is None, f"{process.name} ended early:\n{cluster.log(process)}"
        assert time.time() - process.started < TIMEOUT, f"no backup in time:\n{cluster.log(process)}"
        time.sleep(0.02)
    for victim in (process, *also):
        victim.send_signal(signal.SIGKILL)
    process.wait()
    return _latest_backup_step(run_dir)


def _assert_same_weights(a, b, atol):
    assert len(a) == len(b)
    for x, y in zip(a, b):
        np.testing.assert_allclose(x, y, atol=atol)


def test_two_workers_end_equal_to_one_process_with_the_same_global_batch(cluster, few_steps, tmp_path):
    run = _run_dir(tmp_path, few_steps)
    configs = local_cluster(2)
    workers = [cluster.start(f"worker{i}", 16, run, configs[i], **FEW_STEPS) for i in range(2)]
    chief, other = (cluster.wait(worker) for worker in workers)
    assert chief["steps"] == other["steps"] == few_steps["steps"] == 10
    _assert_same_weights(chief["weights"], other["weights"], atol=0)
    _assert_equal_but_for_sign_flips(chief["weights"], few_steps["weights"])
    np.testing.assert_allclose(chief["history"]["loss"], few_steps["history"]["loss"], rtol=1e-4)
    np.testing.assert_allclose(chief["history"]["val_loss"], few_steps["history"]["val_loss"], rtol=1e-4)
    assert not [p for p in run.iterdir() if "scratch" in p.name]  # temporary folders gone
    assert sorted(p.name for p in (run / "logs").iterdir()) == ["train", "validation"]  # the chief's
    for i in range(2):  # no strategy runs eagerly (TensorFlow warns that it is slow)
        assert "eagerly has significant overhead" not in (tmp_path / f"worker{i}.log").read_text()


def test_two_workers_train_in_bfloat16_with_xla(cluster, few_steps, tmp_path):
    run = _run_dir(tmp_path, few_steps)
    configs = local_cluster(2)
    fast = dict(FEW_STEPS, mixed_precision=True, jit_compile=True)
    workers = [cluster.start(f"worker{i}", 16, run, configs[i], **fast) for i in range(2)]
    chief, other = (cluster.wait(worker) for worker in workers)
    assert chief["steps"] == other["steps"] == 10
    _assert_same_weights(chief["weights"], other["weights"], atol=0)
    np.testing.assert_allclose(chief["history"]["loss"], few_steps["history"]["loss"], rtol=0.05)


def test_a_process_killed_mid_epoch_resumes_from_its_backup(cluster, uninterrupted, tmp_path):
    run = _run_dir(tmp_path, uninterrupted)
    killed_at = _kill_after_backup(cluster, cluster.start("killed", 32, run), run, step=8)
    assert 0 < killed_at < STEPS and killed_at % (STEPS // 2), "the backup is mid-epoch"
    resumed = cluster.wait(cluster.start("resumed", 32, run))
    assert resumed["steps"] == STEPS
    assert "resuming" in (tmp_path / "resumed.log").read_text()
    # Both epochs' training loss, the interrupted one's over all its steps.
    np.testing.assert_allclose(resumed["history"]["loss"], uninterrupted["history"]["loss"], rtol=1e-3)
    np.testing.assert_allclose(resumed["history"]["val_loss"][-1], uninterrupted["history"]["val_loss"][-1], rtol=1e-3)
    # Same process layout, same sums: the weights were identical in every run measured.
    _assert_equal_but_for_sign_flips(resumed["weights"], uninterrupted["weights"])


def test_two_workers_resume_after_one_is_killed(cluster, uninterrupted, tmp_path):
    run = _run_dir(tmp_path, uninterrupted)
    configs = local_cluster(2)
    chief = cluster.start("chief", 16, run, configs[0])
    other = cluster.start("other", 16, run, configs[1])
    killed_at = _kill_after_backup(cluster, other, run, step=STEPS // 2 + 4)
    # The launcher (Kubernetes, SLURM, a cloud service) restarts the whole
    # job when a task dies; the survivor is stopped if it has not failed.
    try:
        chief.wait(timeout=60)
    except subprocess.TimeoutExpired:
        chief.kill()
        chief.wait()
    else:  # it noticed: TensorFlow's heartbeats, then one line of ours
        assert "Start the job again on every worker" in cluster.log(chief)
    assert STEPS // 2 < killed_at < STEPS
    configs = local_cluster(2)
    workers = [cluster.start(f"again{i}", 16, run, configs[i]) for i in range(2)]
    first, second = (cluster.wait(worker) for worker in workers)
    assert first["steps"] == second["steps"] == STEPS
    _assert_same_weights(first["weights"], second["weights"], atol=0)
    # Against one process, compare losses, not weights: over 76 steps Adam's
    # sign flips (see FEW_STEPS) move 6-26% of the weights by more than 1e-4
    # and a few by 1e-2, from run to run, while the losses agree to 1.3e-4.
    np.testing.assert_allclose(first["history"]["loss"][-1], uninterrupted["history"]["loss"][-1], rtol=1e-3)
    np.testing.assert_allclose(first["history"]["val_loss"][-1], uninterrupted["history"]["val_loss"][-1], rtol=1e-3)


def test_a_kill_during_export_leaves_the_previous_version_intact(cluster, tmp_path):
    import tensorflow as tf
    import tensorflow_text  # noqa: F401  (the tokenizer ops of the export)

    run, root = tmp_path / "run", tmp_path / "saved_models"
    exported = dict(export=True, export_root=str(root), epochs=1)
    first = cluster.wait(cluster.start("first", 32, run, **exported))
    assert first["export_path"].endswith(os.path.join("transformer", "1"))
    loaded = tf.saved_model.load(first["export_path"])
    text = tf.constant(["the big dog sees a small cat ."])
    before = loaded.translate(text=text, beam_width=tf.constant(1))["translation"].numpy()

    # Rerunning a finished run only evaluates and exports: kill it mid-export.
    second = cluster.start("second", 32, run, **exported)
    models = root / "transformer"
    while not any(p.name.startswith(".tmp-export-") for p in models.iterdir()):
        assert second.poll() is None, cluster.log(second)
        assert time.time() - second.started < TIMEOUT, f"no export began:\n{cluster.log(second)}"
        time.sleep(0.01)
    second.send_signal(signal.SIGKILL)
    second.wait()

    assert sorted(p.name for p in models.iterdir() if not p.name.startswith(".")) == ["1"]
    reloaded = tf.saved_model.load(first["export_path"])
    np.testing.assert_array_equal(reloaded.translate(text=text, beam_width=tf.constant(1))["translation"].numpy(), before)
    assert [p for p in models.iterdir() if p.name.startswith(".tmp-export-")]  # what the kill left
    third = cluster.wait(cluster.start("third", 32, run, **exported))
    assert third["export_path"].endswith(os.path.join("transformer", "2"))
    assert sorted(p.name for p in models.iterdir()) == ["1", "2"]  # the next export cleaned up
