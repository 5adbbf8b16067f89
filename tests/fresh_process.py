"""Scripts run "in a fresh process with TensorFlow alone", each in a process forked from one that
has imported TensorFlow and nothing else.

The tests that reload an export where keras_attn is not imported (TensorFlow, tensorflow-text and
what the script itself imports) run their script with `run` instead of a new `python -c`: the
process each script gets has imported TensorFlow, as the script's first lines would, and nothing of
keras_attn, pipelines or tensorflow-text, and the 4-5 s of importing TensorFlow are spent once per
test process instead of once per script. (Environment variables that TensorFlow reads only when
imported, such as `TF_CPP_MIN_LOG_LEVEL`, keep the forking process's values: 3.)

Run as a script, this file is the forking process: it reads one request a line on standard input
(JSON: the script, its arguments, standard input, environment variables, folder and timeout) and
answers each on standard output (JSON: exit code, whether it timed out, standard output and error).
"""

import json
import os
import subprocess
import sys
import tempfile
import threading

_SERVER = None  # this test process's forking process
_LOCK = threading.Lock()


def run(script, *args, input="", env=None, cwd=None, timeout=300):
    """`subprocess.CompletedProcess` of `python -c script *args` (text in and out, `input` on its
    standard input, the variables of `env` added to its environment, in the folder `cwd`) run in a
    process forked from one that has imported TensorFlow only."""
    global _SERVER
    with _LOCK:
        if _SERVER is None or _SERVER.poll() is not None:
            _SERVER = subprocess.Popen(
                [sys.executable, os.path.abspath(__file__)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                # TensorFlow's start-up lines; each script's own are in its answer
                stderr=subprocess.DEVNULL,
                text=True,
                env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"},
            )
        request = {
            "script": script,
            "args": [str(a) for a in args],
            "input": input,
            "env": env or {},
            "cwd": cwd and str(cwd),
            "timeout": timeout,
        }
        _SERVER.stdin.write(json.dumps(request) + "\n")
        _SERVER.stdin.flush()
        answer = _SERVER.stdout.readline()
    if not answer:
        raise RuntimeError("the forking process ended without an answer")
    done = json.loads(answer)
    command = ["python", "-c", script, *map(str, args)]
    if done["timed_out"]:  # killed, as subprocess.run kills a process that outlives its timeout
        raise subprocess.TimeoutExpired(command, timeout, done["stdout"], done["stderr"])
    return subprocess.CompletedProcess(command, done["returncode"], done["stdout"], done["stderr"])


def stop():
    """Ends this test process's forking process and waits for it (so that its processes' CPU time
    counts as this process's children's)."""
    global _SERVER
    with _LOCK:
        if _SERVER is not None:
            _SERVER.stdin.close()
            _SERVER.wait()
            _SERVER = None


def _child(script, args, env, cwd, standard):
    """In the forked process: runs `script` as `python -c` would, with
    standard input, output and error in files.
    """
    import traceback

    for target, fd in enumerate(standard):
        os.dup2(fd, target)
    sys.stdin = open(0, closefd=False)  # noqa: SIM115
    sys.argv = ["-c", *args]
    # As for `python -c`: the working folder first (this file's folder is the forking process's).
    sys.path[0] = ""
    os.environ.update(env)
    if cwd:
        os.chdir(cwd)
    code = 0
    try:
        exec(
            compile(script, "<string>", "exec"),
            {"__name__": "__main__", "__builtins__": __builtins__},
        )
    except SystemExit as exit:
        if isinstance(exit.code, str):
            print(exit.code, file=sys.stderr)
        code = 1 if isinstance(exit.code, str) else (exit.code or 0)
    except BaseException:  # noqa: BLE001  (as an uncaught exception ends a process)
        traceback.print_exc()
        code = 1
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def _serve():
    import signal
    import time

    import tensorflow  # noqa: F401  (what every script then finds imported)

    answers = sys.stdout
    for line in sys.stdin:
        request = json.loads(line)
        with (
            tempfile.TemporaryFile() as given,
            tempfile.TemporaryFile() as out,
            tempfile.TemporaryFile() as err,
        ):
            given.write(request["input"].encode())
            given.seek(0)
            answers.flush()
            pid = os.fork()
            if pid == 0:
                standard = (given.fileno(), out.fileno(), err.fileno())
                _child(request["script"], request["args"], request["env"], request["cwd"], standard)
            deadline, timed_out = time.monotonic() + request["timeout"], False
            while True:
                done, status = os.waitpid(pid, os.WNOHANG)
                if done:
                    break
                if time.monotonic() > deadline:
                    os.kill(pid, signal.SIGKILL)
                    _, status = os.waitpid(pid, 0)
                    timed_out = True
                    break
                time.sleep(0.02)
            outputs = []
            for file in (out, err):
                file.seek(0)
                outputs.append(file.read().decode("utf-8", "replace"))
        answers.write(
            json.dumps(
                {
                    "returncode": os.waitstatus_to_exitcode(status),
                    "timed_out": timed_out,
                    "stdout": outputs[0],
                    "stderr": outputs[1],
                }
            )
            + "\n"
        )
        answers.flush()


if __name__ == "__main__":
    _serve()
