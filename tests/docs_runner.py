"""Runs a documentation page's code blocks in order, in the current folder.

    python tests/docs_runner.py BLOCKS.json   # [{"language": "bash"|"python", "code", "where"}]
    python tests/docs_runner.py --keras-attn ARGS   # what `keras-attn ARGS` in a bash block runs

Bash blocks run with `bash -euo pipefail`, where `keras-attn` is this script's `--keras-attn`;
python blocks run in this process, in one namespace, like a notebook's cells. Ends with the failing
block's place and exit code 1.

`--keras-attn` appends small settings to the training commands, so that each trains for seconds: a
few updates (one epoch) on a small built-in corpus, validated and tested on 50 examples, scored
greedily (the page's own flags come first; argparse keeps an option's last value). It runs the
command in a process forked from one that has imported keras_attn (and so TensorFlow) and run
nothing yet: a command's process starts as a new `keras-attn` process would after its imports, in
the block's folder, environment, standard input and outputs, and saves the 4-5 s of importing
TensorFlow each time. (Environment variables that TensorFlow reads only when imported, such as
`TF_CPP_MIN_LOG_LEVEL`, keep the runner's values.)
"""

import json
import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

SMALL = {
    ("train", "transformer"): [
        "--builtin-size",
        "600",
        "--builtin-eval-size",
        "50",
        "--max-updates",
        "8",
        "--beam-width",
        "1",
    ],
    ("train", "seq2seq"): [
        "--builtin-size",
        "600",
        "--builtin-eval-size",
        "50",
        "--max-updates",
        "8",
        "--beam-width",
        "1",
    ],
    ("train", "captioner"): [
        "--builtin-scenes",
        "600",
        "--builtin-eval-size",
        "50",
        "--max-updates",
        "8",
    ],
    ("pretrain", "bert"): ["--builtin-documents", "60", "--max-updates", "8"],
    ("finetune",): ["--max-updates", "8"],
}
SERVER = "KERAS_ATTN_DOCS_SERVER"  # the socket where the forking process takes commands
PRELUDE = f"""
keras-attn() {{ {sys.executable} {Path(__file__).resolve()} --keras-attn "$@"; }}
pip() {{ echo "(skipped by the documentation test: pip $*)"; }}
"""


def small_settings(args):
    for command, flags in SMALL.items():
        if tuple(args[: len(command)]) == command:
            return flags
    return []


def keras_attn(args):
    """Has the forking process run `keras-attn ARGS` (with the small
    settings of a training command); its exit code.

    The command gets this process's folder, environment, standard input and outputs.
    """
    with socket.socket(socket.AF_UNIX) as connection:
        connection.connect(os.environ[SERVER])
        request = json.dumps(
            {"args": [*args, *small_settings(args)], "cwd": os.getcwd(), "env": dict(os.environ)}
        )
        socket.send_fds(connection, [request.encode()], [0, 1, 2])
        connection.shutdown(socket.SHUT_WR)
        code = connection.recv(16)
    if not code:
        print(
            f"docs_runner: keras-attn {' '.join(args)} ended without an exit code (killed?)",
            file=sys.stderr,
        )
        return 1
    return int(code)


def _serve(listener, parent_gone):
    """Forks a process for each command sent to `listener`, until
    `parent_gone` reads end of file.
    """
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # the children are reaped as they end
    while True:
        ready = select.select([listener, parent_gone], [], [])[0]
        if parent_gone in ready:
            shutil.rmtree(os.path.dirname(listener.getsockname()), ignore_errors=True)
            os._exit(0)
        connection, _ = listener.accept()
        if os.fork() == 0:
            listener.close()
            os.close(parent_gone)
            _run_command(connection)
        connection.close()


def _run_command(connection):
    """In a forked process: runs the command `connection` sends,
    sends back its exit code, and ends.
    """
    from keras_attn import cli

    message, fds, _, _ = socket.recv_fds(connection, 1 << 20, 3)
    request = json.loads(message)
    for fd, standard in zip(fds, (0, 1, 2)):
        os.dup2(fd, standard)
        os.close(fd)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)  # the command waits for processes of its own
    try:
        code = cli.main(request["args"])
    except SystemExit as exit:  # argparse's, or sys.exit(MESSAGE)
        if isinstance(exit.code, str):
            print(exit.code, file=sys.stderr)
        code = 1 if isinstance(exit.code, str) else exit.code
    except BaseException:  # noqa: BLE001  (as an uncaught exception ends a process)
        import traceback

        traceback.print_exc()
        code = 1
    sys.stdout.flush()
    sys.stderr.flush()
    connection.sendall(str(code or 0).encode())
    os._exit(0)


def start_server():
    """Starts the forking process (after importing keras_attn here);
    sets `SERVER` for the blocks' commands.
    """
    import keras_attn.cli  # noqa: F401  (TensorFlow and the package, imported once for every command)

    folder = tempfile.mkdtemp(prefix="keras-attn-docs-")
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(os.path.join(folder, "commands"))
    listener.listen()
    parent_gone, alive = os.pipe()
    if os.fork() == 0:
        os.close(alive)
        _serve(listener, parent_gone)
    listener.close()
    os.close(parent_gone)
    os.environ[SERVER] = os.path.join(folder, "commands")
    return alive  # open while this process lives


def main(blocks_file):
    alive = start_server()  # noqa: F841  (the forking process ends when this one does)
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
