"""Test setup: two logical CPU devices, so MirroredStrategy runs with 2 replicas;
one intra-op thread per process; datasets iterated without tf.data's autotuning.

The split must happen before TensorFlow initializes its devices, so it is
done in `pytest_configure`, before any test module is imported.
"""

import os
import shutil

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")
# One intra-op thread per process (the subprocesses of the fault-tolerance
# tests inherit it): two pytest-xdist processes, and the job processes some
# tests start, share 2 cores, and TensorFlow's thread pools spin while they
# wait (the suite's times with each: docs/benchmarks/test-suite.md).
os.environ.setdefault("TF_NUM_INTRAOP_THREADS", "1")

import pytest  # noqa: E402
from hypothesis import settings  # noqa: E402

# CI: the same examples every run and no example database left behind;
# locally: random examples, and failures replayed from .hypothesis/.
settings.register_profile("ci", derandomize=True, database=None, deadline=None, print_blob=True)
settings.register_profile("dev", deadline=None)
settings.load_profile("ci" if os.environ.get("CI") else "dev")


# The slowest files (real processes, training runs) start first, so that with
# two pytest-xdist processes neither ends with a long file alone.
SLOWEST_FIRST = (
    "tests/test_docs.py",
    "tests/training/test_fault_tolerance.py",
    "tests/jobs/test_translation_job.py",
    "tests/models/test_captioner.py",
    "tests/jobs/test_captioning_job.py",
    "tests/training/test_runner.py",
    "tests/jobs/test_bert_job.py",
    "tests/jobs/test_seq2seq_job.py",
    "tests/test_cli_new_user.py",
    "tests/layers/test_learning.py",
    "tests/models/test_bert.py",
)


def pytest_configure(config):
    """Starts TensorFlow where tests run: in this process, or in each pytest-xdist worker.

    The xdist controller runs no test and so never loads TensorFlow, whose
    native libraries would print their start-up lines (and a failed CUDA
    probe) after pytest's summary. In a process that runs tests they are
    held back unless the start fails.
    """
    controller = config.getoption("numprocesses", None) and not hasattr(config, "workerinput")
    if controller:
        return
    from keras_attn.quiet import stderr_held

    with stderr_held():
        import tensorflow as tf

        cpu = tf.config.list_physical_devices("CPU")[0]
        tf.config.set_logical_device_configuration(
            cpu, [tf.config.LogicalDeviceConfiguration(), tf.config.LogicalDeviceConfiguration()]
        )
    _iterate_without_autotuning()


def _iterate_without_autotuning():
    """Every dataset iterated in a test process runs without tf.data's autotuning thread.

    Dropping an iterator joins that thread, which took seconds at random
    (pipelines/prefetch.py). Our pipelines and the runner turn it off; this
    covers the datasets tests build and Keras's own adapters: suite runs had
    tests at up to 5x their time alone.
    """
    from tensorflow.python.data.ops import iterator_ops

    from pipelines.prefetch import without_autotuning

    create = iterator_ops.OwnedIterator._create_iterator
    iterator_ops.OwnedIterator._create_iterator = lambda self, dataset: create(
        self, without_autotuning(dataset)
    )


def pytest_collection_modifyitems(config, items):
    def rank(item):
        path = item.nodeid.split("::")[0]
        return SLOWEST_FIRST.index(path) if path in SLOWEST_FIRST else len(SLOWEST_FIRST)

    items.sort(key=rank)  # stable: the order within a file is kept


# Each documentation page's code is a unit of work of its own (it runs in processes of its own), so
# that the pages spread over both workers instead of all landing in one with their file.
PAGE_BY_PAGE = "tests/test_docs.py::test_the_pages_code_runs["


def pytest_xdist_make_scheduler(config, log):
    from xdist.scheduler import LoadFileScheduling

    class PagesApart(LoadFileScheduling):
        def _split_scope(self, nodeid):
            return nodeid if nodeid.startswith(PAGE_BY_PAGE) else super()._split_scope(nodeid)

    return PagesApart(config, log)


@pytest.fixture(scope="session", autouse=True)
def _forking_process_stopped():
    """The process that `tests.fresh_process` forks scripts from ends with the session (and is
    waited for, so that the CPU time of its processes counts as the test process's children's)."""
    yield
    from tests import fresh_process

    fresh_process.stop()


@pytest.fixture(autouse=True)
def _fresh_keras_state():
    """Every test starts from float32 and a fixed seed."""
    import keras

    keras.mixed_precision.set_global_policy("float32")
    keras.utils.set_random_seed(1234)
    yield
    keras.mixed_precision.set_global_policy("float32")


@pytest.fixture(scope="module")
def browser():
    """Headless Chromium (Debian's), driven by Playwright."""
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        pytest.skip("no chromium on this machine (.ci/run installs Debian's)")
    playwright = pytest.importorskip("playwright.sync_api")
    with playwright.sync_playwright() as driver:
        browser = driver.chromium.launch(executable_path=chromium, headless=True)
        yield browser
        browser.close()
