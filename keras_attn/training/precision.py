"""Choosing the compute precision for the machine at hand, and saying why."""

import tensorflow as tf

PRECISIONS = (
    "auto",
    "float32",
    "mixed_bfloat16",
)  # `auto`: bfloat16 where the CPU runs it natively

# The CPU instructions that run bfloat16 matrix products natively.
NATIVE_BFLOAT16_FLAGS = ("avx512_bf16", "amx_bf16")


def bfloat16_support():
    """Whether this machine runs bfloat16 matrix products natively, and on what.

    True for a GPU of compute capability 8.0 or newer, or a CPU with
    AVX512-BF16 or AMX instructions (there `mixed_bfloat16` trains about twice
    as fast as float32); elsewhere bfloat16 would be emulated and slower.

    Returns:
        `(native, hardware)`, a bool and a str, e.g. `(False, "this CPU")` or
        `(True, "this GPU (NVIDIA A100, compute capability 8.0)")`.
    """
    gpus = tf.config.list_physical_devices("GPU")
    if gpus:
        details = tf.config.experimental.get_device_details(gpus[0])
        capability = details.get("compute_capability")
        name = details.get("device_name", "GPU")
        if not capability:
            return False, f"this GPU ({name})"
        hardware = f"this GPU ({name}, compute capability {capability[0]}.{capability[1]})"
        return tuple(capability) >= (8, 0), hardware
    flags = cpu_info().get("flags", "").split()
    return any(flag in flags for flag in NATIVE_BFLOAT16_FLAGS), "this CPU"


def native_bfloat16():
    """Whether this machine runs bfloat16 natively (see `bfloat16_support`).

    Returns:
        A bool.
    """
    return bfloat16_support()[0]


def cpu_info(path="/proc/cpuinfo"):
    """The first processor's fields in `path` (`"model name"`, `"cpu
    family"`, `"flags"`, ...); `{}` if unreadable.

    Args:
        path: str. The file to read, in the format of Linux's `/proc/cpuinfo`. Defaults to
            `"/proc/cpuinfo"`.

    Returns:
        A dict of str: each field of the file's first block by name.

    Example:

        >>> cpu_info("/no/such/file")
        {}
    """
    try:
        with open(path) as file:
            first = file.read().split("\n\n")[0]
    except OSError:
        return {}
    return {
        key.strip(): value.strip()
        for key, _, value in (line.partition(":") for line in first.splitlines())
    }


def resolve_mixed_precision(choice):
    """`"auto"` → `native_bfloat16()`; `"float32"` → False; `"mixed_bfloat16"` → True.

    Args:
        choice: str. One of `"auto"`, `"float32"`, `"mixed_bfloat16"` (`--precision`).

    Returns:
        A bool: whether to train in `mixed_bfloat16`.

    Raises:
        ValueError: when `choice` is none of those.
    """
    if choice not in PRECISIONS:
        raise ValueError(f"--precision must be auto, float32 or mixed_bfloat16, got {choice!r}.")
    return native_bfloat16() if choice == "auto" else choice == "mixed_bfloat16"


def describe_precision(mixed_precision):
    """One line: the precision a run computes in, and why.

    `--precision auto` picks `mixed_bfloat16` exactly where the hardware runs
    bfloat16 natively, so a choice against the hardware was made on purpose.

    Args:
        mixed_precision: bool. Whether the run computes in `mixed_bfloat16` (else float32).

    Returns:
        A str: the precision, then why (the hardware's bfloat16 support).

    Example:

        >>> describe_precision(False)  # and why, which depends on the hardware
        'float32...'
    """
    native, hardware = bfloat16_support()
    if mixed_precision and native:
        return f"mixed_bfloat16: {hardware} runs bfloat16 natively"
    if mixed_precision:
        return (
            f"mixed_bfloat16 as chosen, though {hardware} has no native bfloat16 "
            "(emulated: slower than float32)"
        )
    if native:
        return (
            f"float32 as chosen, though {hardware} runs bfloat16 natively "
            "(--precision auto would use mixed_bfloat16)"
        )
    return (
        f"float32: {hardware} has no native bfloat16 "
        "(AVX512-BF16 or AMX; on GPUs compute capability 8.0+)"
    )
