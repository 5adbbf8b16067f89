"""TensorFlow's start-up lines kept from the user: `stderr_held`."""

import contextlib
import os
import tempfile


@contextlib.contextmanager
def stderr_held():
    """Holds back what is written to standard error (native code included);
    replays it only if the block fails.

    `TF_CPP_MIN_LOG_LEVEL` silences TensorFlow's own logging, but a few lines
    (oneDNN, CUDA stubs, absl) are printed by native libraries while they
    load, so the start of TensorFlow runs inside this.
    """
    saved = os.dup(2)
    with tempfile.TemporaryFile() as held:
        os.dup2(held.fileno(), 2)
        try:
            yield
        except BaseException:
            held.seek(0)
            os.write(saved, held.read())
            raise
        finally:
            os.dup2(saved, 2)
            os.close(saved)
