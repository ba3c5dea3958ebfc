"""Something built once per test run and shared by its pytest-xdist workers.

    reports = built_once(tmp_path_factory, "replica-equivalence", run_the_script)
"""

import fcntl
import os
import pickle
import shutil


def built_once(tmp_path_factory, name, build):
    """What `build(directory)` returns, built once per test run and shared by its processes.

    pytest-xdist's workers (`-n 2`) each hold a session of their own, so a session-scoped
    fixture was built once per worker. They share the parent of their temporary roots
    (pytest-xdist's documented pattern): the first worker to ask builds into `name/` there
    while holding `name.lock`, and writes `build`'s picklable result beside it; the others
    wait on the lock and read that result. Tests that change what was built copy it first.
    """
    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent
    directory, result = root / name, root / f"{name}.pickle"
    with open(root / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        if result.exists():
            return pickle.loads(result.read_bytes())
        shutil.rmtree(directory, ignore_errors=True)  # a build that failed half-way
        directory.mkdir()
        value = build(directory)
        result.write_bytes(pickle.dumps(value))
        return value
