"""Which numeric precision a run trains in, `--precision auto` included.

`auto` trains in mixed bfloat16 (bfloat16 matrix products and activations, float32
weights, softmax and loss) on a machine without a GPU whose CPU has bfloat16
instructions (x86 flags `amx_bf16` or `avx512_bf16`) *and* runs bfloat16 matrix
products at least `BFLOAT16_MIN_SPEEDUP` times as fast as float32 ones, timed here in a
second or two; in float32 everywhere else. The flags alone do not say it: some CPUs that
list them run TensorFlow's bfloat16 products slower than float32 ones, and the casts, and
the softmax and loss kept in float32, do not get faster in bfloat16, so the products must
gain somewhat more than 1x for the step to gain at all
(docs/lab-notebook.md#--precision-auto-times-the-products, which has each CPU's figures).
The default recipe scored within the spread of its float32 runs in mixed bfloat16
(docs/lab-notebook.md#what-was-tried). GPUs keep float32 unless asked: their mixed
precision was not measured here.
"""

import dataclasses
import functools
import time

PRECISIONS = ("float32", "mixed_float16", "mixed_bfloat16")
AUTO = "auto"
# Linux /proc/cpuinfo flags of x86 CPUs with bfloat16 matrix instructions.
NATIVE_BFLOAT16_FLAGS = ("amx_bf16", "avx512_bf16")
# How many times as fast as float32 bfloat16 matrix products must run for `auto` to pick
# mixed bfloat16. A step's ratio has followed the products' on every CPU measured, so the
# break-even is near 1; the margin covers the casts
# (docs/lab-notebook.md#--precision-auto-times-the-products).
BFLOAT16_MIN_SPEEDUP = 1.2


@dataclasses.dataclass(frozen=True)
class AutoChoice:
    """What `--precision auto` picked on this machine, and why, for the training log."""

    precision: str
    reason: str


def resolve_precision(requested, has_gpu=None, cpu_flags=None, bfloat16_speedup=None):
    """The concrete precision (one of PRECISIONS) that `requested` stands for here.

    Args:
        requested: one of PRECISIONS, or "auto".
        has_gpu, cpu_flags, bfloat16_speedup: as for `choose_auto_precision`.

    Raises:
        ValueError: naming `requested` if it is neither.
    """
    if requested in PRECISIONS:
        return requested
    if requested != AUTO:
        raise ValueError(f"precision={requested!r}, expected {AUTO!r} or one of {PRECISIONS}")
    return choose_auto_precision(has_gpu, cpu_flags, bfloat16_speedup).precision


def choose_auto_precision(has_gpu=None, cpu_flags=None, bfloat16_speedup=None):
    """What `auto` stands for on this machine: an `AutoChoice`.

    Args:
        has_gpu: whether TensorFlow sees a GPU (None: ask it).
        cpu_flags: the CPU's feature flags (None: read /proc/cpuinfo; none elsewhere).
        bfloat16_speedup: a function returning how many times as fast as float32
            bfloat16 matrix products run here (None: `measured_bfloat16_speedup`, timed
            once a process). Called only for a CPU-only machine with bfloat16 flags.
    """
    if has_gpu is None:
        import tensorflow as tf

        has_gpu = bool(tf.config.list_physical_devices("GPU"))
    if has_gpu:
        return AutoChoice("float32", "a GPU is visible, and its mixed precision is used only when asked")
    if cpu_flags is None:
        cpu_flags = read_cpu_flags()
    if not any(flag in cpu_flags for flag in NATIVE_BFLOAT16_FLAGS):
        return AutoChoice("float32", "this CPU has no bfloat16 instructions")
    speedup = (bfloat16_speedup or measured_bfloat16_speedup)()
    timed = f"bfloat16 matrix products ran {speedup:.2f}x as fast as float32 ones on this CPU"
    if speedup >= BFLOAT16_MIN_SPEEDUP:
        return AutoChoice("mixed_bfloat16", timed)
    return AutoChoice("float32", f"{timed}, under the {BFLOAT16_MIN_SPEEDUP}x that pays for mixed precision")


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


@functools.lru_cache(maxsize=None)
def measured_bfloat16_speedup():
    """`bfloat16_matmul_speedup()` timed once per process (a second or two), so a command
    gets one answer however often it asks."""
    return bfloat16_matmul_speedup()


def bfloat16_matmul_speedup(n=2048, chain=2, repeats=3):
    """How many times as fast as float32 TensorFlow multiplies `[n, n]` bfloat16 matrices.

    The two precisions take turns, `repeats` calls each, and each keeps its fastest call,
    so that a burst of other work on the machine slows both or neither.
    """
    products = {dtype: _timed_products(dtype, n, chain) for dtype in ("float32", "bfloat16")}
    best = {dtype: float("inf") for dtype in products}
    for _ in range(repeats):
        for dtype, call in products.items():
            best[dtype] = min(best[dtype], call())
    return best["float32"] / best["bfloat16"]


def matmul_peak(dtype="float32", n=2048, chain=4, repeats=10):
    """Matrix-multiply FLOP/s of this machine in `dtype`: the best of `repeats` timed calls.

    Each call multiplies an `[n, n]` matrix by another `chain` times in a row inside one
    `tf.function` (2 n^3 FLOPs each), so call overhead is amortized.
    """
    call = _timed_products(dtype, n, chain)
    return chain * 2.0 * n**3 / min(call() for _ in range(repeats))


def _timed_products(dtype, n, chain):
    """A function that runs `chain` `[n, n]` products in `dtype` and returns the seconds
    they took; traced and run once here, so that no timed call includes tracing."""
    import tensorflow as tf

    a = tf.cast(tf.random.stateless_normal([n, n], seed=[0, 1]), dtype)  # [n, n]
    # Scaled so that `chain` products in a row stay near unit size, in range in bfloat16.
    b = tf.cast(tf.random.stateless_normal([n, n], seed=[0, 2]) / n**0.5, dtype)  # [n, n]

    @tf.function
    def products(x, y):
        for _ in range(chain):
            x = tf.linalg.matmul(x, y)
        return tf.reduce_sum(tf.cast(x[:, 0], tf.float32))

    def timed_call():
        start = time.perf_counter()
        products(a, b).numpy()
        return time.perf_counter() - start

    timed_call()
    return timed_call
