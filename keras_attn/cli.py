"""The `keras-attn` command line."""

import argparse
import os
import sys


def _quiet_tensorflow():
    """Keeps TensorFlow's C++ and Python logging out of what users see.

    Must run before TensorFlow is imported.
    """
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    os.environ.setdefault("KERAS_BACKEND", "tensorflow")


def build_parser():
    parser = argparse.ArgumentParser(
        prog="keras-attn",
        description="Attention models in TensorFlow/Keras: train, evaluate, "
        "export and serve.",
    )
    from keras_attn import __version__

    parser.add_argument("--version", action="version", version=f"keras-attn {__version__}")
    parser.add_subparsers(dest="command", metavar="COMMAND")
    return parser


def main(argv=None):
    _quiet_tensorflow()
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
