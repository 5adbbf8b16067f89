"""The floors of the package (docs/explanation/design.md): a module imports only from its own floor
or below, function-level imports included; `pipelines` imports nothing of `keras_attn`, and a
layer only other layers and the special tokens' ids.

Each import is read from the source (`ast`), so a violation is named with its file and line.
"""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# Lowest first; a module is on the floor of the longest prefix that names it.
FLOORS = {
    1: ("pipelines", "keras_attn.errors", "keras_attn.quiet", "keras_attn.graph"),
    2: (
        "keras_attn.layers",
        "keras_attn.losses",
        "keras_attn.metrics",
        "keras_attn.optimizers",
        "keras_attn.schedules",
    ),
    3: (
        "keras_attn.models",
        "keras_attn.decoding",
        "keras_attn.presets",
        "keras_attn.evaluation",
        "keras_attn.plots",
    ),
    4: (
        "keras_attn.checkpoints",
        "keras_attn.training",
        "keras_attn.serving",
        "keras_attn.run_folder",
    ),
    5: ("keras_attn.config", "keras_attn.jobs", "keras_attn.cli", "keras_attn"),
}
# Stricter than their floor: what each of these may import of the package.
ONLY = {
    "pipelines": ("pipelines",),
    "keras_attn.layers": ("keras_attn.layers", "pipelines.special_tokens"),
}
ROOT_INIT = "keras_attn"  # the package's __init__, which imports every floor to register it


def _module_name(path, root=ROOT):
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is(name, prefix):
    return name == prefix or name.startswith(prefix + ".")


def floor_of(name):
    best = max(
        (
            (prefix, floor)
            for floor, prefixes in FLOORS.items()
            for prefix in prefixes
            if _is(name, prefix)
        ),
        key=lambda found: len(found[0]),
        default=(None, None),
    )
    return best[1]


def _internal_imports(path, modules):
    """`(line, imported module)` of each import of `keras_attn` or `pipelines` in the file, once
    each (`modules`: the names of the tree's modules)."""
    seen = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            # `from keras_attn import graph` imports the module keras_attn.graph
            names = [
                f"{node.module}.{alias.name}"
                if f"{node.module}.{alias.name}" in modules
                else node.module
                for alias in node.names
            ]
        else:
            continue
        for name in names:
            if (_is(name, "keras_attn") or _is(name, "pipelines")) and (
                node.lineno,
                name,
            ) not in seen:
                seen.add((node.lineno, name))
                yield node.lineno, name


def violations(root=ROOT):
    """`file:line: module imports name (floor a over b)` for each import against the floors."""
    found = []
    paths = sorted([*(root / "keras_attn").rglob("*.py"), *(root / "pipelines").rglob("*.py")])
    modules = {_module_name(path, root) for path in paths}
    for path in paths:
        module = _module_name(path, root)
        if module == ROOT_INIT:
            continue
        only = next((allowed for prefix, allowed in ONLY.items() if _is(module, prefix)), None)
        for line, name in _internal_imports(path, modules):
            where = f"{path.relative_to(root)}:{line}: {module} imports {name}"
            if only is not None and not any(_is(name, allowed) for allowed in only):
                found.append(f"{where} (it may import only {', '.join(only)})")
            elif floor_of(name) > floor_of(module):
                found.append(f"{where} (floor {floor_of(name)} over floor {floor_of(module)})")
    return found


def test_every_module_has_a_floor():
    paths = [*(ROOT / "keras_attn").rglob("*.py"), *(ROOT / "pipelines").rglob("*.py")]
    assert [str(p) for p in paths if floor_of(_module_name(p)) is None] == []


def test_no_module_imports_from_a_floor_above_its_own():
    assert violations() == []


@pytest.mark.parametrize(
    "module, source, wrong",
    [
        ("pipelines/leak.py", "def f():\n    from keras_attn import config\n", True),
        ("keras_attn/layers/leak.py", "from keras_attn.config import CELLS\n", True),
        ("keras_attn/layers/leak.py", "from keras_attn.losses import sum_over_replicas\n", True),
        ("keras_attn/models/leak.py", "from keras_attn.training import runner\n", True),
        ("keras_attn/models/leak.py", "from keras_attn import graph, layers\n", False),
        ("keras_attn/layers/leak.py", "from pipelines.special_tokens import PAD_ID\n", False),
        ("keras_attn/serving/leak.py", "import keras_attn.config\n", True),
    ],
)
def test_an_import_against_the_floors_is_named_with_its_file_and_line(
    tmp_path, module, source, wrong
):
    for package in ("keras_attn", "pipelines"):
        (tmp_path / package).mkdir()
    for name in ("config", "graph", "losses"):
        (tmp_path / "keras_attn" / f"{name}.py").write_text("")
    for name in ("layers", "models", "serving", "training"):
        (tmp_path / "keras_attn" / name).mkdir()
        (tmp_path / "keras_attn" / name / "__init__.py").write_text("")
    (tmp_path / "keras_attn" / "training" / "runner.py").write_text("")
    (tmp_path / "pipelines" / "special_tokens.py").write_text("")
    (tmp_path / module).write_text(source)
    found = violations(tmp_path)
    assert bool(found) == wrong, found
    assert all(f.startswith(f"{module}:") for f in found)
