"""app.runtime.gpu_warning: one line where an NVIDIA GPU seems present and TensorFlow lists none."""

import io
import os
import subprocess
import sys
import types
from pathlib import Path

import pytest

from app.runtime.gpu_warning import NVIDIA_DEVICE, nvidia_gpu_present, warn_if_gpu_unseen

ROOT = Path(__file__).resolve().parents[2]
WARNING = (
    "warning: this machine seems to have an NVIDIA GPU (nvidia-smi), but TensorFlow sees none and runs on the CPU; "
    'install TensorFlow with its CUDA libraries: pip install "tensorflow[and-cuda]==2.21.0" '
    "(or set CUDA_VISIBLE_DEVICES empty to use the CPU on purpose, which silences this)\n"
)


def fake_tensorflow(gpus):
    """A stand-in with what warn_if_gpu_unseen reads: the GPU list and the version."""
    listed = [f"/physical_device:GPU:{i}" for i in range(gpus)]

    def list_physical_devices(kind=None):
        assert kind == "GPU"
        return listed

    return types.SimpleNamespace(
        config=types.SimpleNamespace(list_physical_devices=list_physical_devices),
        version=types.SimpleNamespace(VERSION="2.21.0"),
    )


@pytest.mark.parametrize(
    "found, gpus, environ, warned",
    [
        ("nvidia-smi", 0, {}, True),  # the case: a GPU, and TensorFlow without CUDA
        ("nvidia-smi", 1, {}, False),  # TensorFlow sees it
        (None, 0, {}, False),  # a CPU machine
        ("nvidia-smi", 0, {"CUDA_VISIBLE_DEVICES": ""}, False),  # hidden on purpose
        ("nvidia-smi", 0, {"CUDA_VISIBLE_DEVICES": "-1"}, False),
        ("nvidia-smi", 0, {"CUDA_VISIBLE_DEVICES": "0"}, True),  # asked for, and still not seen
    ],
)
def test_one_line_on_stderr_only_where_a_gpu_seems_present_and_tensorflow_lists_none(found, gpus, environ, warned):
    stream = io.StringIO()
    line = warn_if_gpu_unseen(fake_tensorflow(gpus), probe=lambda: found, stream=stream, environ=environ)
    assert stream.getvalue() == (WARNING if warned else "")
    assert line == (WARNING.rstrip("\n") if warned else None)


def test_the_probe_looks_for_nvidia_smi_then_the_device_file():
    def which(name):
        assert name == "nvidia-smi"
        return "/usr/bin/nvidia-smi"

    assert nvidia_gpu_present(which=which, exists=lambda path: False) == "nvidia-smi"
    assert nvidia_gpu_present(which=lambda name: None, exists=lambda path: path == NVIDIA_DEVICE) == "/dev/nvidia0"
    assert nvidia_gpu_present(which=lambda name: None, exists=lambda path: False) is None


def test_the_warning_names_the_device_file_where_that_is_what_was_found():
    stream = io.StringIO()
    warn_if_gpu_unseen(fake_tensorflow(0), probe=lambda: NVIDIA_DEVICE, stream=stream, environ={})
    assert stream.getvalue().startswith("warning: this machine seems to have an NVIDIA GPU (/dev/nvidia0), but ")


@pytest.mark.slow
def test_train_py_warns_at_its_start(tmp_path):
    # A machine with nvidia-smi on PATH, whose GPU TensorFlow cannot use (CUDA_VISIBLE_DEVICES
    # names none there is); --strategy multi-worker without TF_CONFIG then fails at once.
    smi = tmp_path / "nvidia-smi"
    smi.write_text("#!/bin/sh\nexit 0\n")
    smi.chmod(0o755)
    env = {key: value for key, value in os.environ.items() if key != "TF_CONFIG"}
    env.update(PATH=f"{tmp_path}{os.pathsep}{env.get('PATH', '')}", CUDA_VISIBLE_DEVICES="99")
    result = subprocess.run(
        [sys.executable, "train.py", "--strategy", "multi-worker"], cwd=ROOT, env=env, capture_output=True, text=True,
        timeout=120,
    )
    assert result.returncode == 1, result.stderr
    lines = result.stderr.splitlines()
    warnings = [line for line in lines if line.startswith("warning: this machine seems to have an NVIDIA GPU")]
    assert len(warnings) == 1 and "(nvidia-smi)" in warnings[0]
    assert 'pip install "tensorflow[and-cuda]==' in warnings[0]
    assert lines[-1] == "error: --strategy multi-worker needs the TF_CONFIG environment variable"
