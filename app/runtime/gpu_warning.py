"""One warning line where the machine seems to have an NVIDIA GPU that TensorFlow does not see.

The usual cause is TensorFlow installed without its CUDA libraries (`pip install
tensorflow`, as requirements.txt has it): training then runs on the CPU, far slower,
and says nothing. train.py calls `warn_if_gpu_unseen` at its start:

    warning: this machine seems to have an NVIDIA GPU (nvidia-smi), but TensorFlow sees none ...

Both sides are injectable, so a test fakes the machine and TensorFlow.
"""

import os
import shutil
import sys

# The device file the NVIDIA driver makes for the first GPU.
NVIDIA_DEVICE = "/dev/nvidia0"


def nvidia_gpu_present(which=shutil.which, exists=os.path.exists):
    """Whether the machine seems to have an NVIDIA GPU: nvidia-smi on PATH, or the driver's
    device file. The name of what was found, or None."""
    if which("nvidia-smi"):
        return "nvidia-smi"
    if exists(NVIDIA_DEVICE):
        return NVIDIA_DEVICE
    return None


def unseen_gpu_warning(found, tensorflow_gpus, tensorflow_version):
    """The warning line, or None where there is nothing to say.

    Args:
        found: what `nvidia_gpu_present` found (a str), or None.
        tensorflow_gpus: how many GPUs TensorFlow lists.
        tensorflow_version: TensorFlow's version, e.g. "2.21.0", for the install command.
    """
    if not found or tensorflow_gpus:
        return None
    return (
        f"warning: this machine seems to have an NVIDIA GPU ({found}), but TensorFlow sees none and runs on the "
        "CPU; install TensorFlow with its CUDA libraries: "
        f'pip install "tensorflow[and-cuda]=={tensorflow_version}" '
        "(or set CUDA_VISIBLE_DEVICES empty to use the CPU on purpose, which silences this)"
    )


def warn_if_gpu_unseen(tf=None, probe=nvidia_gpu_present, stream=None, environ=os.environ):
    """Prints `unseen_gpu_warning` to `stream` (default stderr) if there is one; returns it.

    `tf`: the TensorFlow module (default: the imported one), or a stand-in with
    `config.list_physical_devices` and `version.VERSION`; `probe`: () -> what
    `nvidia_gpu_present` returns. CUDA_VISIBLE_DEVICES set empty (or -1) in `environ`
    hides the GPUs on purpose: no warning then.
    """
    if environ.get("CUDA_VISIBLE_DEVICES") in ("", "-1"):
        return None
    if tf is None:
        import tensorflow as tf
    line = unseen_gpu_warning(probe(), len(tf.config.list_physical_devices("GPU")), tf.version.VERSION)
    if line:
        print(line, file=stream or sys.stderr, flush=True)
    return line
