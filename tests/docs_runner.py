"""Runs a documentation page's code blocks in order, in the current folder.

    python tests/docs_runner.py BLOCKS.json         # [{"language": "bash"|"python", "code": ..., "where": ...}]
    python tests/docs_runner.py --keras-attn ARGS   # what `keras-attn ARGS` in a bash block runs

Bash blocks run with `bash -euo pipefail`, where `keras-attn` is this script's `--keras-attn`; python blocks
run in this process, in one namespace, like a notebook's cells. Ends with the failing block's place and exit
code 1.

`--keras-attn` appends small settings to the training commands, so that each trains for seconds: a few
updates (one epoch) on a small built-in corpus, scored greedily (the page's own flags come first; argparse keeps an option's last value).
A training command that another page already ran in a fresh folder, with the same arguments and no file of
the folder among them, is the same computation: with `KERAS_ATTN_DOCS_CACHE` set, what it wrote (`runs/`,
`saved_models/`) and printed is taken from there instead of being computed again.
"""

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

SMALL = {
    ("train", "transformer"): ["--builtin-size", "600", "--max-updates", "8", "--beam-width", "1"],
    ("train", "seq2seq"): ["--builtin-size", "600", "--max-updates", "8", "--beam-width", "1"],
    ("train", "captioner"): ["--builtin-scenes", "600", "--max-updates", "8"],
    ("pretrain", "bert"): ["--builtin-documents", "60", "--max-updates", "8"],
    ("finetune",): ["--max-updates", "8"],
}
WRITTEN = ("runs", "saved_models")  # what a training command writes in its working folder
PRELUDE = f"""
keras-attn() {{ {sys.executable} {Path(__file__).resolve()} --keras-attn "$@"; }}
pip() {{ echo "(skipped by the documentation test: pip $*)"; }}
"""


def small_settings(args):
    for command, flags in SMALL.items():
        if tuple(args[:len(command)]) == command:
            return flags
    return []


def keras_attn(args):
    """Runs `keras-attn ARGS` (with the small settings of a training command); its exit code."""
    small = small_settings(args)
    command = ["keras-attn", *args, *small]
    cache = os.environ.get("KERAS_ATTN_DOCS_CACHE")
    fresh = not any(Path(name).exists() for name in WRITTEN)
    reads_the_folder = any(Path(arg.partition("=")[2] or arg).exists() for arg in args)
    if not (small and cache and fresh and not reads_the_folder):
        return subprocess.run(command).returncode
    entry = Path(cache) / hashlib.sha256("\0".join(command).encode()).hexdigest()[:20]
    if not entry.is_dir():
        done = subprocess.run(command, capture_output=True, text=True)
        if done.returncode:
            sys.stdout.write(done.stdout)
            sys.stderr.write(done.stderr)
            return done.returncode
        staged = Path(tempfile.mkdtemp(dir=cache))
        for name in WRITTEN:
            if Path(name).exists():
                shutil.copytree(name, staged / name)
        (staged / "stdout").write_text(done.stdout, encoding="utf-8")
        (staged / "folder").write_text(os.getcwd(), encoding="utf-8")
        try:
            staged.rename(entry)
        except OSError:  # another process stored the same command first
            shutil.rmtree(staged)
        return _replay(entry, copy=False)
    return _replay(entry, copy=True)


def _replay(entry, copy):
    if copy:
        for name in WRITTEN:
            if (entry / name).exists():
                shutil.copytree(entry / name, name)
        # An export names its run's test split by its absolute path: here, this folder's copy.
        for metadata in Path("saved_models").glob("*/*/assets.extra/keras_attn.json"):
            text = metadata.read_text(encoding="utf-8")
            metadata.write_text(text.replace((entry / "folder").read_text(encoding="utf-8"), os.getcwd()),
                                encoding="utf-8")
    sys.stdout.write((entry / "stdout").read_text(encoding="utf-8"))
    return 0


def main(blocks_file):
    namespace = {"__name__": "__main__"}
    for block in json.loads(open(blocks_file, encoding="utf-8").read()):
        print(f"--- {block['where']} ({block['language']})", flush=True)
        if block["language"] == "bash":
            done = subprocess.run(["bash", "-euo", "pipefail", "-c", PRELUDE + block["code"]])
            if done.returncode:
                sys.exit(f"{block['where']}: the bash block exited with {done.returncode}")
        else:
            exec(compile(block["code"], block["where"], "exec"), namespace)  # noqa: S102


if __name__ == "__main__":
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    if sys.argv[1] == "--keras-attn":
        sys.exit(keras_attn(sys.argv[2:]))
    main(sys.argv[1])
