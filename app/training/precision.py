"""Which numeric precision a run trains in, `--precision auto` included.

`auto` trains in mixed bfloat16 (bfloat16 matrix products and activations, float32
weights, softmax and loss) where the hardware runs bfloat16 natively, and in float32
everywhere else:

- On GPUs, where every visible GPU has compute capability 8.0 or later (Ampere, Hopper
  and later: bfloat16 tensor cores; the base model's step in each precision:
  docs/results.md#on-a-gpu). Older GPUs
  have no bfloat16 tensor cores and keep float32; so does a machine where one GPU is
  older, or does not say its capability, since every replica trains in one precision.
  (Mixed float16 would run on their float16 tensor cores, with loss scaling: it was not
  measured here, and is used only when asked.)
- Without a GPU, where the CPU has bfloat16 instructions (x86 flags `amx_bf16` or
  `avx512_bf16`) *and* runs bfloat16 matrix products at least `BFLOAT16_MIN_SPEEDUP`
  times as fast as float32 ones, timed here in a second or two. The flags alone do not
  say it: some CPUs that list them run TensorFlow's bfloat16 products slower than float32
  ones, and the casts, and the softmax and loss kept in float32, do not get faster in
  bfloat16, so the products must gain somewhat more than 1x for the step to gain at all
  (docs/lab-notebook/2026-11-26-precision-auto-times-the-products.md, which has each CPU's figures).

How the default recipe scores in mixed bfloat16 against float32: docs/lab-notebook/2026-11-21-en-de-what-was-tried.md.
"""

import dataclasses
import functools
import time

PRECISIONS = ("float32", "mixed_float16", "mixed_bfloat16")
AUTO = "auto"
# The first CUDA compute capability with bfloat16 tensor cores (Ampere, the A100).
NATIVE_BFLOAT16_COMPUTE_CAPABILITY = (8, 0)
# Linux /proc/cpuinfo flags of x86 CPUs with bfloat16 matrix instructions.
NATIVE_BFLOAT16_FLAGS = ("amx_bf16", "avx512_bf16")
# How many times as fast as float32 bfloat16 matrix products must run for `auto` to pick
# mixed bfloat16. A step's ratio has followed the products' on every CPU measured, so the
# break-even is near 1; the margin covers the casts
# (docs/lab-notebook/2026-11-26-precision-auto-times-the-products.md).
BFLOAT16_MIN_SPEEDUP = 1.2


@dataclasses.dataclass(frozen=True)
class AutoChoice:
    """What `--precision auto` picked on this machine, and why, for the training log."""

    precision: str
    reason: str


def resolve_precision(requested, gpus=None, cpu_flags=None, bfloat16_speedup=None):
    """The concrete precision (one of PRECISIONS) that `requested` stands for here.

    Args:
        requested: one of PRECISIONS, or "auto".
        gpus, cpu_flags, bfloat16_speedup: as for `choose_auto_precision`.

    Raises:
        ValueError: naming `requested` if it is neither.
    """
    if requested in PRECISIONS:
        return requested
    if requested != AUTO:
        raise ValueError(f"precision={requested!r}, expected {AUTO!r} or one of {PRECISIONS}")
    return choose_auto_precision(gpus, cpu_flags, bfloat16_speedup).precision


def choose_auto_precision(gpus=None, cpu_flags=None, bfloat16_speedup=None):
    """What `auto` stands for on this machine: an `AutoChoice`.

    Args:
        gpus: the compute capability of each visible GPU, a `(major, minor)` pair, or
            None for a GPU whose capability is not known; empty without GPUs (None: ask
            TensorFlow, `gpu_compute_capabilities`).
        cpu_flags: the CPU's feature flags (None: read /proc/cpuinfo; none elsewhere).
        bfloat16_speedup: a function returning how many times as fast as float32
            bfloat16 matrix products run here (None: `measured_bfloat16_speedup`, timed
            once a process). Called only for a machine without GPUs whose CPU has
            bfloat16 flags.
    """
    if gpus is None:
        gpus = gpu_compute_capabilities()
    if gpus:
        return _choice_for_gpus(list(gpus))
    if cpu_flags is None:
        cpu_flags = read_cpu_flags()
    if not any(flag in cpu_flags for flag in NATIVE_BFLOAT16_FLAGS):
        return AutoChoice("float32", "this CPU has no bfloat16 instructions")
    speedup = (bfloat16_speedup or measured_bfloat16_speedup)()
    timed = f"bfloat16 matrix products ran {speedup:.2f}x as fast as float32 ones on this CPU"
    if speedup >= BFLOAT16_MIN_SPEEDUP:
        return AutoChoice("mixed_bfloat16", timed)
    return AutoChoice("float32", f"{timed}, under the {BFLOAT16_MIN_SPEEDUP}x that pays for mixed precision")


def _choice_for_gpus(gpus):
    """`AutoChoice` for GPUs of these compute capabilities (None: unknown): mixed bfloat16
    only if every one runs it natively, since all replicas train in one precision."""
    native = "%d.%d" % NATIVE_BFLOAT16_COMPUTE_CAPABILITY
    one = len(gpus) == 1
    unknown = gpus.count(None)
    if unknown:
        which = "the GPU does not say its" if one else f"{unknown} of {len(gpus)} GPUs " + (
            "does not say its" if unknown == 1 else "do not say their"
        )
        reason = f"{which} compute capability, so native bfloat16 ({native} and later) is not known"
        return AutoChoice("float32", reason)
    known = sorted({tuple(capability) for capability in gpus})
    listed = ["%d.%d" % capability for capability in known]
    listed = " and ".join([", ".join(listed[:-1]), listed[-1]] if len(listed) > 1 else listed)
    which = ("the GPU" if one else f"{len(gpus)} GPUs") + f" of compute capability {listed}"
    if known[0] >= NATIVE_BFLOAT16_COMPUTE_CAPABILITY:
        reason = f"{which} {'runs' if one else 'run'} bfloat16 natively ({native} and later do)"
        return AutoChoice("mixed_bfloat16", reason)
    if len(known) == 1:
        return AutoChoice("float32", f"{which} {'has' if one else 'have'} no native bfloat16 ({native} and later do)")
    oldest = "%d.%d" % known[0]
    reason = f"{which}: {oldest} has no native bfloat16 ({native} and later do), and all replicas share a precision"
    return AutoChoice("float32", reason)


def gpu_compute_capabilities():
    """The compute capability `(major, minor)` of each GPU TensorFlow sees, or None for one
    whose details it does not give (not a CUDA device, or a build without them); empty
    without GPUs. Reads device details only: no device is initialized."""
    import tensorflow as tf

    capabilities = []
    for gpu in tf.config.list_physical_devices("GPU"):
        try:
            details = tf.config.experimental.get_device_details(gpu)
        except (ValueError, RuntimeError):
            details = {}
        capability = details.get("compute_capability")
        capabilities.append(tuple(capability) if capability else None)
    return capabilities


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
