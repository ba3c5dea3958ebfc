"""Reading line-aligned parallel text files (plain UTF-8 or gzip), with errors that say where.

Bytes are decoded line by line, so a bad byte is reported with its line number instead
of as an offset into the whole file.
"""

import gzip
import os
import zlib
from typing import Iterator, List, Tuple

from data.errors import DataError

# How a file that is not UTF-8 text often begins, and what to do about it.
_NOT_UTF8_STARTS = (
    (b"\xff\xfe", "it starts like UTF-16 text: convert it to UTF-8"),
    (b"\xfe\xff", "it starts like UTF-16 text: convert it to UTF-8"),
    (b"\x1f\x8b", "it starts like a gzip file: give it a name that ends in .gz"),
)


def read_lines(path: str) -> List[str]:
    """The lines of a UTF-8 text file, line endings removed; `.gz` files are decompressed.

    Only b"\\n" ends a line (a stray "\\r" or U+2028 inside a sentence does not split it).

    Raises:
        DataError: as `iter_lines`.
    """
    return list(iter_lines(path))


def check_readable(path: str) -> None:
    """Raises DataError unless `path` names a file (not a directory)."""
    if os.path.isdir(path):
        raise DataError(f"{path} is a directory, not a text file")
    if not os.path.isfile(path):
        raise DataError(f"file not found: {path}")


def iter_lines(path: str) -> Iterator[str]:
    """`read_lines`, one line at a time: memory does not grow with the file.

    Raises (when the bad line is reached, or at once for a missing file):
        DataError: the file is missing or unreadable, is not valid gzip, a line is not
            UTF-8 or holds a NUL byte, or its lines end with a lone "\\r".
    """
    check_readable(path)
    return _lines(path)


def _lines(path):
    opener = gzip.open if path.endswith(".gz") else open
    count, first, raw = 0, None, b""
    try:
        with opener(path, "rb") as file:
            for number, raw in enumerate(file, start=1):
                try:
                    line = raw.decode("utf-8")
                except UnicodeDecodeError as error:
                    hints = [hint for start, hint in _NOT_UTF8_STARTS if number == 1 and raw.startswith(start)]
                    raise DataError(
                        f"{path}, line {number}: not valid UTF-8 (byte "
                        f"0x{raw[error.start]:02x} at byte offset {error.start} of the line)"
                        + "".join(f"; {hint}" for hint in hints)
                    ) from None
                # Valid UTF-8, but never in text: UTF-16 without a byte-order mark reads
                # as letters between NULs, and would train on them.
                if "\x00" in line:
                    raise DataError(
                        f"{path}, line {number}: a NUL byte at byte offset {raw.index(0)} of the line, "
                        "which no text holds: convert a UTF-16 file to UTF-8, or remove stray NULs "
                        "(e.g. with tr -d '\\000')"
                    )
                if number == 1:
                    line = line.removeprefix("\ufeff")  # A byte-order mark is not text.
                    first = line.rstrip("\r\n")
                count = number
                # A first line with a "\r" and no "\n" is the whole file: refused below.
                if number > 1 or raw.endswith(b"\n") or "\r" not in first:
                    yield line.rstrip("\r\n")
    except (gzip.BadGzipFile, EOFError, zlib.error) as error:
        raise DataError(f"{path}: not a valid gzip file ({error})") from None
    except OSError as error:  # After BadGzipFile, an OSError too: permission denied, I/O error.
        raise DataError(f"{path}: cannot be read ({error.strerror or error})") from None
    # A file without any b"\n" whose text holds a "\r" ends its lines with lone "\r"s (as
    # on classic Mac OS): read as one line, it would show up only as misaligned files or
    # as one training pair too long to keep.
    if count == 1 and not raw.endswith(b"\n") and "\r" in first:
        raise DataError(
            f"{path}: its lines end with a lone carriage return (\\r), which does not end a line "
            f"here (only \\n or \\r\\n does), so it reads as a single line; convert its line ends to \\n "
            "(e.g. with tr '\\r' '\\n')"
        )


def read_parallel_lines(source_path: str, target_path: str) -> Tuple[List[str], List[str]]:
    """Both files' lines, checked to be line-aligned (line N translates line N).

    Returns:
        (source_lines, target_lines), lists of equal length.

    Raises:
        DataError: as `iter_parallel_lines`.
    """
    source, target = [], []
    for source_line, target_line in iter_parallel_lines(source_path, target_path):
        source.append(source_line)
        target.append(target_line)
    return source, target


def iter_parallel_lines(source_path: str, target_path: str) -> Iterator[Tuple[str, str]]:
    """`(source line, target line)` of two line-aligned files, read side by side.

    Raises:
        DataError: as `iter_lines`, the two paths name one file (at once), or the two
            files have different line counts (when the shorter one ends; the message
            counts both files' lines).
    """
    check_readable(source_path)
    check_readable(target_path)
    # One file as both sides would train a copying model, or score a copy, without a word.
    if os.path.samefile(source_path, target_path):
        raise DataError(
            f"{source_path} and {target_path} are the same file; parallel text needs the source "
            "sentences in one file and their translations in another"
        )
    return _parallel_lines(source_path, target_path)


def _parallel_lines(source_path, target_path):
    source, target = _lines(source_path), _lines(target_path)
    count = 0
    for source_line in source:
        target_line = next(target, None)
        if target_line is None:  # The target ended first: count the rest of the source.
            _misaligned(source_path, count + 1 + sum(1 for _ in source), target_path, count)
        count += 1
        yield source_line, target_line
    rest = sum(1 for _ in target)
    if rest:
        _misaligned(source_path, count, target_path, count + rest)


def _misaligned(source_path, source_count, target_path, target_count):
    raise DataError(
        f"parallel files differ in length: {source_path} has {source_count} lines "
        f"but {target_path} has {target_count}; line N of one must translate line N "
        f"of the other (they part after line {min(source_count, target_count)})"
    )
