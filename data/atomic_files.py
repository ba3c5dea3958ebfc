"""Writing a file whole or not at all.

Settings, records, vocabularies and translations are what a user resumes, exports or
scores from: a kill or a full disk mid-write must leave the earlier file as it was, never
a half-written one, and no temporary file beside it.
"""

import contextlib
import os
import stat
import tempfile
from typing import Union


def write_atomically(path: str, content: Union[bytes, str]) -> None:
    """Writes `content` (str as UTF-8) to `path`, replacing any file there in one step.

    The bytes go to a hidden temporary file in the same directory, are flushed to disk,
    and are renamed over `path`. The file keeps the permissions of the one it replaces;
    a new one gets a new file's (0666 less the umask), not the temporary file's private
    0600. The parent directories are created. If anything fails, the temporary file is
    removed and the error raised.
    """
    data = content.encode("utf-8") if isinstance(content, str) else content
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    fd, temporary = tempfile.mkstemp(dir=directory, prefix=f".{os.path.basename(path)}.", suffix=".partial")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())  # On disk before the rename makes it the file.
        os.chmod(temporary, _permissions_for(path))
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.remove(temporary)
        raise


def _permissions_for(path):
    """The permission bits of the file at `path`, or a new file's under the umask."""
    try:
        return stat.S_IMODE(os.stat(path).st_mode)
    except FileNotFoundError:
        umask = os.umask(0)  # The only way to read the umask is to set it; set it back.
        os.umask(umask)
        return 0o666 & ~umask
