"""The header every side-by-side benchmark prints: the command, the CPU and the library
versions, so that a table pasted into the docs says where it came from."""

import os
import platform
import sys
import time


def machine_header(libraries):
    """Two lines: the command, then the CPU, usable cores, load and `libraries`.

    Args:
        libraries: "Name version" strings, in the order to print them.
    """
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    return [
        "command: " + " ".join([os.path.basename(sys.executable)] + sys.argv),
        f"machine: {cpu}, {cores} cores usable, load average {load:.2f} at start; "
        f"{', '.join(libraries)}, {time.strftime('%Y-%m-%d %H:%M')}",
    ]
