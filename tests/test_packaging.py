"""The package as a user installs it: its dependencies, its license, the design page's map of it.

The wheel itself (every module and file in it, `keras-attn` runnable from a
fresh environment) is checked by `.ci/run`.
"""

import ast
import re
import subprocess
import sys
from importlib.metadata import packages_distributions
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

tomllib = pytest.importorskip("tomllib")  # Python 3.11+

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("keras_attn", "pipelines")
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
# Needed at run time without an import of their own (see pyproject.toml).
NOT_IMPORTED = {"tensorboard"}


def _modules():
    return sorted(path for package in PACKAGES for path in (ROOT / package).rglob("*.py"))


def _imported_top_level_names():
    names = set()
    for path in _modules():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names.update(alias.name.split(".")[0] for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                names.add(node.module.split(".")[0])
    return names - set(sys.stdlib_module_names) - set(PACKAGES)


def test_runtime_dependencies_are_what_the_package_imports():
    declared = {canonicalize_name(Requirement(line).name) for line in PROJECT["dependencies"]}
    distributions = packages_distributions()
    imported = set()
    for name in _imported_top_level_names():
        assert name in distributions, (
            f"{name}: imported by the package, but no installed distribution provides it"
        )
        # A name several distributions provide (tensorflow) counts as the declared one.
        candidates = {canonicalize_name(d) for d in distributions[name]}
        imported |= (candidates & declared) or candidates
    assert imported - declared == set(), "imported at run time but not in `dependencies`"
    assert declared - imported - NOT_IMPORTED == set(), (
        "in `dependencies` but never imported at run time"
    )


def test_license_file_is_the_declared_apache_license():
    assert PROJECT["license"] == "Apache-2.0"
    assert PROJECT["license-files"] == ["LICENSE"]
    text = (ROOT / "LICENSE").read_text(encoding="utf-8")
    assert "Apache License" in text and "Version 2.0, January 2004" in text
    assert "END OF TERMS AND CONDITIONS" in text  # the whole text, not a pointer to it


DESIGN_PAGE = ROOT / "docs" / "explanation" / "design.md"


def _layout_section():
    page = DESIGN_PAGE.read_text(encoding="utf-8")
    found = re.search(r"^## Layout\n(.*?)(?=^## |\Z)", page, flags=re.M | re.S)
    assert found, f"{DESIGN_PAGE.relative_to(ROOT)} has no `## Layout` section"
    return found.group(1)


def _named(text, name):
    """`name` (`cli.py`, or `jobs/` alone or in a path) appears as a path's part."""
    end = "" if name.endswith("/") else r"(?![\w-])"
    return re.search(rf"(?<![\w.-]){re.escape(name)}{end}", text) is not None


def test_the_layout_names_every_module():
    """A module of `keras_attn/` or `pipelines/` is named by its file, one of a
    subpackage (`keras_attn/layers/...`) at least by its folder."""
    layout = _layout_section()
    missing = []
    for path in _modules():
        parts = path.relative_to(ROOT).parts
        if len(parts) == 2 and parts[1] != "__init__.py":  # keras_attn/cli.py
            names = [parts[1]]
        elif len(parts) > 2:  # keras_attn/layers/attention.py: `layers/` is enough
            names = [f"{parts[1]}/", parts[-1]]
        else:
            continue
        if not any(_named(layout, name) for name in names):
            missing.append("/".join(parts[:2]) + ("/" if len(parts) > 2 else ""))
    assert not missing, "missing from the design page's layout: " + ", ".join(sorted(set(missing)))


def test_the_layout_names_every_top_level_folder():
    if not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    tracked = subprocess.run(
        ["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.splitlines()
    folders = {path.split("/")[0] + "/" for path in tracked if "/" in path}
    layout = _layout_section()
    assert sorted(f for f in folders if not _named(layout, f)) == [], (
        "missing from the design page's layout"
    )


# What the commands and the documentation's examples write in the working folder: their defaults
# (runs/<name>, saved_models/<name>/<version>, plot-attention's attention.png) and export-ct2's
# folder in the examples, ct2/.
WRITTEN = [
    "runs/transformer/settings.json",
    "saved_models/transformer/1/saved_model.pb",
    "attention.png",
    "ct2/transformer/model.bin",
]


@pytest.mark.parametrize("path", WRITTEN)
def test_what_the_commands_write_in_the_working_folder_is_ignored_by_git(path):
    if not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    assert (
        subprocess.run(["git", "check-ignore", "--quiet", "--no-index", path], cwd=ROOT).returncode
        == 0
    )
