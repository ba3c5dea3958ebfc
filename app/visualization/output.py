"""Where a picture goes: the path checked and its directories made before the slow work,
and `PicturesError`, what the pictures' library raises for what it cannot draw or write."""

import os


class PicturesError(ValueError):
    pass


def prepare_output(path, kind):
    """Makes sure `path` can be written as a `kind` ("file" or "directory"), creating the
    directories it needs; PicturesError naming it otherwise. Called before the slow work."""
    if kind == "file" and os.path.isdir(path):
        raise PicturesError(f"--output {path} is a directory; name the PNG file to write")
    if kind == "directory" and os.path.exists(path) and not os.path.isdir(path):
        raise PicturesError(f"--output {path} is a file; name a directory for the PNGs")
    directory = path if kind == "directory" else os.path.dirname(path)
    try:
        if directory:
            os.makedirs(directory, exist_ok=True)
    except OSError as error:
        raise PicturesError(f"--output {path}: cannot create {directory} ({error.strerror})") from None
