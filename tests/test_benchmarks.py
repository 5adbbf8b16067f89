"""benchmarks/ keeps the scripts that back a figure: each answers `--help`, a benchmark page names
it, and a measure that a figure reads is checked on a case built by hand."""

import importlib.util
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests import fresh_process

ROOT = Path(__file__).resolve().parents[1]
PAGES = sorted((ROOT / "docs" / "benchmarks").glob("*.md"))
# Run by the PyTorch anchors in processes of their own, never by a user.
INTERNAL = {"benchmarks.anchors.harness"}
# a script that imports this at its top (the `bench` extra)
NEEDS = {"torch": ("benchmarks.anchors.",)}


def _scripts():
    found = []
    for path in sorted((ROOT / "benchmarks").rglob("*.py")):
        module = ".".join(path.relative_to(ROOT).with_suffix("").parts)
        if (
            'if __name__ == "__main__"' in path.read_text(encoding="utf-8")
            and module not in INTERNAL
        ):
            found.append(module)
    return found


SCRIPTS = _scripts()


def _pages_text():
    return "\n".join(page.read_text(encoding="utf-8") for page in PAGES)


def test_every_script_is_named_by_a_benchmark_page():
    named = _pages_text()
    assert [
        script
        for script in SCRIPTS
        if f"python -m {script} " not in named and f"python -m {script}\n" not in named
    ] == []


def test_every_script_a_page_names_exists():
    named = set(re.findall(r"python -m (benchmarks(?:\.\w+)+)", _pages_text()))
    assert sorted(named - set(SCRIPTS)) == []


def _runnable(script):
    missing = [
        package
        for package, prefixes in NEEDS.items()
        if script.startswith(prefixes) and importlib.util.find_spec(package) is None
    ]
    return not missing


# One Python for every script (TensorFlow loads once): each runs as `python -m SCRIPT --help`.
_HELP_ALL = """
import contextlib, io, json, runpy, sys
answers = {}
for script in sys.argv[1:]:
    sys.argv = [script, "--help"]
    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out):
            runpy.run_module(script, run_name="__main__", alter_sys=True)
        answers[script] = ("no exit", out.getvalue())
    except SystemExit as exit:
        answers[script] = (exit.code, out.getvalue())
print(json.dumps(answers))
"""


@pytest.mark.slow
def test_every_script_answers_help():
    scripts = [script for script in SCRIPTS if _runnable(script)]
    # TensorFlow imported already, as most scripts import it
    done = fresh_process.run(_HELP_ALL, *scripts, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-4000:]
    answers = json.loads(done.stdout.splitlines()[-1])
    failed = {
        script: code
        for script, (code, text) in answers.items()
        if code not in (0, None) or "usage:" not in text
    }
    assert failed == {}
    if len(scripts) < len(SCRIPTS):
        pytest.skip(
            f"{len(SCRIPTS) - len(scripts)} scripts need the bench extra (torch): pip install -e "
            "'.[bench]'"
        )


def test_captioning_grounding_reads_each_word_at_its_first_token():
    # "red" is three tokens (r ##e ##d), so "circle" is written at token 5, not at its word index 3
    import numpy as np

    from benchmarks.captioning import grounding
    from pipelines.special_tokens import SPECIAL_TOKENS
    from pipelines.tokenizers import WordPieceTokenizer

    tokenizer = WordPieceTokenizer([*SPECIAL_TOKENS, "a", "small", "r", "##e", "##d", "circle"])
    caption = "a small red circle"
    weights = np.zeros((7, 4))  # (tokens and [EOS], a 2x2 grid's cells)
    weights[:, 3] = 1  # every step looks at the bottom-right cell ...
    # ... but those writing "small", "r" and "circle": the top-left, the box
    weights[[1, 2, 5]] = [
        1,
        0,
        0,
        0,
    ]
    by_size = grounding(
        [weights], [caption], [caption], [np.array([[0, 0, 1, 1]])], (2, 2), 4, tokenizer
    )
    hits, words, _, mass, objects, _ = by_size["all"]
    assert (hits, words, mass, objects) == (3, 3, 1, 1)


def test_the_cpu_is_named_by_its_first_processors_family_model_and_speed_flags(tmp_path):
    from benchmarks.measures import describe_cpu

    processor = (
        "processor\t: {n}\nmodel name\t: Intel(R) Xeon(R) Processor\ncpu family\t: 6\nmodel\t\t: "
        "{model}\nflags\t\t: fpu avx2 avx512f {extra}\n"
    )
    (tmp_path / "cpuinfo").write_text(
        processor.format(n=0, model=207, extra="amx_tile amx_bf16")
        + "\n"
        + processor.format(n=1, model=167, extra="avx512_bf16")
    )
    described = describe_cpu(str(tmp_path / "cpuinfo"))
    assert described.startswith("Intel(R) Xeon(R) Processor, family 6 model 207, ")
    # avx512_bf16 is the second processor's
    assert described.endswith(", flags: avx512f amx_bf16 amx_tile")
    assert "unreadable" in describe_cpu(str(tmp_path / "missing"))


def test_the_pytorch_anchors_processes_import_no_tensorflow():
    """Each framework is timed in a process that imports only its own:
    TensorFlow's import alone holds about 700 MB, which would count in
    PyTorch's memory (and `import keras_attn` imports it)."""
    modules = ["benchmarks.anchors.harness"]
    if importlib.util.find_spec("torch") is not None:
        modules += ["benchmarks.anchors.torch_transformer", "benchmarks.anchors.torch_seq2seq"]
    imported = (
        "import importlib, sys\nfor name in sys.argv[1:]: importlib.import_module(name)\n"
        "print('tensorflow' in sys.modules)"
    )
    done = subprocess.run(
        [sys.executable, "-c", imported, *modules], cwd=ROOT, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["False"]
