"""Choosing the compute precision for the machine at hand."""

import tensorflow as tf


def native_bfloat16():
    """Whether this machine runs bfloat16 matrix products natively.

    True for a GPU of compute capability 8.0 or newer, or a CPU with
    AVX512-BF16 or AMX instructions (there `mixed_bfloat16` trains about twice
    as fast as float32); elsewhere bfloat16 would be emulated and slower.
    """
    gpus = tf.config.list_physical_devices("GPU")
    if gpus:
        capability = tf.config.experimental.get_device_details(gpus[0]).get("compute_capability")
        return bool(capability) and tuple(capability) >= (8, 0)
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            flags = cpuinfo.read()
    except OSError:
        return False
    return "avx512_bf16" in flags or "amx_bf16" in flags


def resolve_mixed_precision(choice):
    """`"auto"` → `native_bfloat16()`; `"float32"` → False; `"mixed_bfloat16"` → True."""
    if choice not in ("auto", "float32", "mixed_bfloat16"):
        raise ValueError(f"--precision must be auto, float32 or mixed_bfloat16, got {choice!r}.")
    return native_bfloat16() if choice == "auto" else choice == "mixed_bfloat16"
