"""`DeviceConfig`: where a training run's steps run, as its plan says; `start_devices` sets it up.

    devices = DeviceConfig(strategy="mirrored", cpu_replicas=2, threads=CpuThreads(intra_op=1))
    strategy = start_devices(devices)      # before TensorFlow runs an op or touches a device

The strategies (app/training/strategy.py):

    auto          MirroredStrategy over every visible GPU; the default strategy without GPUs
    mirrored      MirroredStrategy over every visible GPU, or over `cpu_replicas` CPUs
    multi-worker  MultiWorkerMirroredStrategy, cluster from the TF_CONFIG variable

No TensorFlow until `start_devices`: train.py and app.preflight plan it from their flags
before TensorFlow loads.
"""

import dataclasses
from typing import Optional

from app.runtime.threads import CpuThreads

STRATEGIES = ("auto", "mirrored", "multi-worker")


@dataclasses.dataclass(frozen=True)
class DeviceConfig:
    """The tf.distribute strategy and TensorFlow's CPU thread pools of a run."""

    # One of STRATEGIES (--strategy).
    strategy: str = "auto"
    # Split the CPU into N mirrored devices (--cpu-replicas); None: no split.
    cpu_replicas: Optional[int] = None
    # TensorFlow's CPU thread pools (--intra-op-threads, --inter-op-threads).
    threads: CpuThreads = CpuThreads()

    def __post_init__(self):
        check_strategy(self.strategy, self.cpu_replicas)


def check_strategy(kind, cpu_replicas):
    """ValueError naming the value unless `kind` is one of STRATEGIES and `cpu_replicas`
    None or at least 1: the rule of `DeviceConfig` and of `strategy.make_strategy`."""
    if kind not in STRATEGIES:
        raise ValueError(f"unknown strategy {kind!r}; expected one of {STRATEGIES}")
    if cpu_replicas is not None and cpu_replicas < 1:
        raise ValueError(f"--cpu-replicas must be at least 1, got {cpu_replicas}")


def start_devices(devices, log=print):
    """Sizes TensorFlow's CPU thread pools and makes the tf.distribute strategy `devices`
    asks for, both before TensorFlow runs an op or touches a device; where the pools were
    asked for, calls `log` (None: nothing) with the line that says how they are set.
    Returns the strategy.

    Raises:
        ValueError: a strategy or thread setting that cannot be had, named.
    """
    from app.runtime.threads import describe_cpu_threads, set_cpu_threads
    from app.training.strategy import make_strategy

    set_cpu_threads(devices.threads.intra_op, devices.threads.inter_op)
    strategy = make_strategy(devices.strategy, devices.cpu_replicas)
    if devices.threads.given and log is not None:
        log(describe_cpu_threads())
    return strategy
