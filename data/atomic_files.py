"""Writing a file whole or not at all.

Settings, records, TensorBoard's event files, vocabularies and translations are what a
user resumes, exports, reads or scores from: a kill or a full disk mid-write must leave
the earlier file as it was, never a half-written one, and no temporary file beside it.
"""

import contextlib
import os
import stat
import tempfile
from typing import Iterator, Optional, Union


def write_atomically(path: str, content: Union[bytes, str]) -> None:
    """Writes `content` (str as UTF-8) to `path`, replacing any file there in one step
    (`replaced_atomically`)."""
    data = content.encode("utf-8") if isinstance(content, str) else content
    with replaced_atomically(path) as temporary:
        with open(temporary, "wb") as f:
            f.write(data)


@contextlib.contextmanager
def replaced_atomically(path: str, temporary_prefix: Optional[str] = None) -> Iterator[str]:
    """Yields the name of a temporary file for the caller to write `path`'s new content to.

    The temporary file is hidden, in the same directory (created if missing), named
    `temporary_prefix` (default: "." + the file's name + ".") + random + ".partial". When
    the block ends, it is flushed to disk and renamed over `path`. The file keeps the
    permissions of the one it replaces; a new one gets a new file's (0666 less the umask),
    not the temporary file's private 0600. If anything fails, the temporary file is
    removed, `path` is left as it was, and the error is raised.
    """
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    prefix = f".{os.path.basename(path)}." if temporary_prefix is None else temporary_prefix
    fd, temporary = tempfile.mkstemp(dir=directory, prefix=prefix, suffix=".partial")
    os.close(fd)
    try:
        yield temporary
        with open(temporary, "rb") as f:
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
