"""`ModelDirLock`: one training run at a time in a model directory."""

import os


class ModelDirInUse(ValueError):
    """Another training run holds the model directory."""


class ModelDirLock:
    """An exclusive lock on a model directory, held while this object lives.

    Two runs in one directory would both train from its newest checkpoint and write
    their checkpoints and records over each other's. The lock is flock(2) on the
    directory itself: no file is left behind, and the system releases it when the
    process ends, even killed. Where a file system cannot lock a directory (NFS), the
    run goes on unlocked.

    Raises:
        ModelDirInUse: naming the directory, if another process holds the lock.
    """

    def __init__(self, model_dir):
        import fcntl

        self._fd = None
        fd = os.open(model_dir, os.O_RDONLY)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise ModelDirInUse(
                f"another training run is using {model_dir}; wait for it to end, or give another --model-dir"
            ) from None
        except OSError:
            pass  # No directory locks on this file system.
        self._fd = fd

    def __del__(self):
        if self._fd is not None:
            os.close(self._fd)  # Releases the lock.
