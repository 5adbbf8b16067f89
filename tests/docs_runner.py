"""Runs a documentation page's code blocks in order, in the current folder: `python tests/docs_runner.py BLOCKS.json`.

BLOCKS.json holds `[{"language": "bash"|"python", "code": ..., "where": "page.md:LINE"}, ...]`. Bash blocks
run with `bash -euo pipefail`, after `PRELUDE`; python blocks run in this process, in one namespace, like a
notebook's cells. Ends with the failing block's place and exit code 1.
"""

import json
import os
import subprocess
import sys

# Training commands get small settings appended, so that each trains for seconds: a few updates on a small
# built-in corpus (the page's own flags come first; argparse keeps an option's last value). pip is skipped: the
# test runs in the install the page describes.
PRELUDE = """
keras-attn() {
  case "$1 ${2:-}" in
    "train transformer" | "train seq2seq") command keras-attn "$@" --builtin-size 300 --max-updates 8 ;;
    "train captioner") command keras-attn "$@" --builtin-scenes 100 --max-updates 8 ;;
    "pretrain bert") command keras-attn "$@" --builtin-documents 60 --max-updates 8 ;;
    finetune\\ *) command keras-attn "$@" --max-updates 8 ;;
    *) command keras-attn "$@" ;;
  esac
}
pip() { echo "(skipped by the documentation test: pip $*)"; }
"""


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
    main(sys.argv[1])
