"""Which numeric precision a run trains in, `--precision auto` included.

`auto` picks mixed bfloat16 (bfloat16 matrix products and activations, float32 weights,
softmax and loss) on a CPU-only machine whose CPU multiplies bfloat16 natively (x86
flags `amx_bf16` or `avx512_bf16`), and float32 everywhere else. On the 2-core Intel Xeon
with AMX of 2026-11-22 a tiny step ran 1.31x faster in mixed bfloat16
(`benchmarks/bench_training.py`), on a 2-core AMD EPYC with `avx512_bf16` and no AMX
(2026-11-23) 1.25x, and the default recipe scored within the spread of its float32 runs
(docs/results.md, "What was tried"); a CPU without those instructions
emulates bfloat16 and would run slower than float32. GPUs keep float32 unless asked:
their mixed precision was not measured here.
"""

PRECISIONS = ("float32", "mixed_float16", "mixed_bfloat16")
AUTO = "auto"
# Linux /proc/cpuinfo flags of x86 CPUs with bfloat16 matrix instructions.
NATIVE_BFLOAT16_FLAGS = ("amx_bf16", "avx512_bf16")


def resolve_precision(requested, has_gpu=None, cpu_flags=None):
    """The concrete precision (one of PRECISIONS) that `requested` stands for here.

    Args:
        requested: one of PRECISIONS, or "auto".
        has_gpu: whether TensorFlow sees a GPU (None: ask it).
        cpu_flags: the CPU's feature flags (None: read /proc/cpuinfo; none elsewhere).

    Raises:
        ValueError: naming `requested` if it is neither.
    """
    if requested in PRECISIONS:
        return requested
    if requested != AUTO:
        raise ValueError(f"precision={requested!r}, expected {AUTO!r} or one of {PRECISIONS}")
    if has_gpu is None:
        import tensorflow as tf

        has_gpu = bool(tf.config.list_physical_devices("GPU"))
    if cpu_flags is None:
        cpu_flags = read_cpu_flags()
    if not has_gpu and any(flag in cpu_flags for flag in NATIVE_BFLOAT16_FLAGS):
        return "mixed_bfloat16"
    return "float32"


def read_cpu_flags(path="/proc/cpuinfo"):
    """The set of feature flags of the first CPU listed in `path`; empty if unreadable."""
    try:
        with open(path) as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip() == "flags":
                    return set(value.split())
    except OSError:
        pass
    return set()
