"""The matrix-multiply peak a device can reach: what model FLOPs utilization divides by.

GPUs: the dense (not 2:4-sparse) tensor-core peak of the vendor's datasheet, in the
precision the run computes in: bfloat16 / float16 for the mixed precisions, TF32 for
float32 on GPUs that have it (TensorFlow runs float32 products in TF32 there by
default). A GPU not in the table, and every CPU, is measured instead: the best of a few
timed `[2048, 2048]` products in the run's compute dtype (`precision.matmul_peak`).

    peak = known_gpu_peak("NVIDIA H100 80GB HBM3", "mixed_bfloat16")   # 989e12
    device_peak(["NVIDIA H100 80GB HBM3"] * 8, "mixed_bfloat16").describe()
        # '8 x 989 TFLOP/s bfloat16 dense (datasheet)'

Utilization divides the FLOPs of this process's replicas by the peak of this process's
devices: over several workers, each worker reports its own share.
"""

import dataclasses

TERA = 1e12


@dataclasses.dataclass(frozen=True)
class KnownPeak:
    """One GPU model's datasheet peaks, TFLOP/s, dense."""

    names: tuple  # substrings of the device name CUDA reports, lowercase, any one matches
    bfloat16: float  # also float16 on these GPUs; None: no bfloat16 tensor cores
    float16: float
    float32: float  # TF32 where the GPU has it (Ampere and later), plain FP32 before


# Most specific names first: "h100 pcie" before "h100".
KNOWN_GPUS = (
    # The NVL cards (PCIe, NVLink-bridged pairs) run at a lower power than the SXM modules.
    KnownPeak(("h200 nvl",), bfloat16=835.0, float16=835.0, float32=417.5),
    KnownPeak(("h200",), bfloat16=989.0, float16=989.0, float32=494.5),
    KnownPeak(("h100 nvl",), bfloat16=835.0, float16=835.0, float32=417.5),
    KnownPeak(("h100 pcie",), bfloat16=756.0, float16=756.0, float32=378.0),
    KnownPeak(("h100",), bfloat16=989.0, float16=989.0, float32=494.5),  # SXM (HBM3)
    KnownPeak(("a100",), bfloat16=312.0, float16=312.0, float32=156.0),
    KnownPeak(("l40s",), bfloat16=362.0, float16=362.0, float32=183.0),
    KnownPeak(("a10",), bfloat16=125.0, float16=125.0, float32=62.5),
    KnownPeak(("l4",), bfloat16=121.0, float16=121.0, float32=60.0),
    KnownPeak(("v100",), bfloat16=None, float16=125.0, float32=15.7),
    KnownPeak(("t4",), bfloat16=None, float16=65.0, float32=8.1),
)


def compute_dtype(precision):
    """The dtype of a precision's matrix products: "bfloat16", "float16" or "float32"."""
    return {"mixed_bfloat16": "bfloat16", "mixed_float16": "float16"}.get(precision, "float32")


def known_gpu_peak(device_name, precision):
    """FLOP/s of one GPU named `device_name` (as CUDA reports it, e.g. "NVIDIA A100-SXM4-80GB")
    in `precision`'s products, or None where the table does not know it (or the GPU has no
    such tensor cores: then the products run slower than any table figure says)."""
    name = device_name.lower().replace("-", " ")
    dtype = compute_dtype(precision)
    for known in KNOWN_GPUS:
        if any(_names_model(name, part) for part in known.names):
            peak = getattr(known, dtype)
            return None if peak is None else peak * TERA
    return None


def _names_model(name, part):
    """Whether `part` ("a10", "l4") names the model in `name` as a word: "a10" is in
    "nvidia a10" but not in "nvidia a100"."""
    start = name.find(part)
    while start != -1:
        end = start + len(part)
        before_ok = start == 0 or not name[start - 1].isalnum()
        after_ok = end == len(name) or not name[end].isalnum()
        if before_ok and after_ok:
            return True
        start = name.find(part, start + 1)
    return False


@dataclasses.dataclass(frozen=True)
class Peak:
    """The matrix-product peak of the devices one process trains on."""

    per_device: float  # FLOP/s
    devices: int  # GPUs; 1 for the CPU, which its replicas share
    dtype: str  # "bfloat16", "float16" or "float32"
    source: str  # "datasheet" or how it was measured

    @property
    def total(self):
        return self.per_device * self.devices

    def describe(self):
        """"8 x 989 TFLOP/s bfloat16 dense (datasheet)"."""
        kind = "TF32/FP32" if self.dtype == "float32" and self.source == "datasheet" else self.dtype
        return f"{self.devices} x {self.per_device / TERA:.4g} TFLOP/s {kind} dense ({self.source})"


def device_peak(device_names, precision, measure=None):
    """The `Peak` of the devices `device_names` in `precision`'s products.

    Args:
        device_names: the GPUs' names, one per local replica; empty for the CPU, whose peak
            is measured once for the whole processor (CPU replicas share its cores).
        precision: the run's precision.
        measure: `measure(dtype) -> FLOP/s` of this machine (default `precision.matmul_peak`).
    """
    from app.training.precision import matmul_peak

    measure = measure or (lambda dtype: matmul_peak(dtype))
    dtype = compute_dtype(precision)
    if not device_names:
        return Peak(measure(dtype), 1, dtype, "measured: the CPU's matrix products")
    peaks = [known_gpu_peak(name, precision) for name in device_names]
    if all(peak is not None for peak in peaks) and len(set(peaks)) == 1:
        return Peak(peaks[0], len(peaks), dtype, "datasheet")
    # An unknown GPU (or a mix): one GPU's products measured, for each.
    return Peak(measure(dtype), len(device_names), dtype, "measured: one GPU's matrix products")
