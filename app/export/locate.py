"""Where an export is: a SavedModel version directory from the path a user gives.

    saved_model_version("saved_models/translator")     # -> "saved_models/translator/3", the newest
    saved_model_version("saved_models/translator/2")   # -> itself

Every command that reads an export (app.evaluate, app.translate, app.score) takes either
the export base, as the server does (`--model_base_path`), or one version in it. Numeric
directories are versions, as TensorFlow Serving reads them; export.py's hidden temporary
directories are not. No TensorFlow here: commands check the path before importing it.
"""

import os
import re

SAVED_MODEL_FILE = "saved_model.pb"
# A model name: a directory under saved_models/ and the <name> of the REST API's
# /v1/models/<name>[/versions/<v>] (app/serving/rest_api.py), so no '/' and no leading '.'.
MODEL_NAME = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9._-]*")
# The model's name in export.py, the server and the client (`/v1/models/<name>`).
DEFAULT_MODEL_NAME = "translator"
# A version's name: ASCII digits ("\d" would take other scripts' digits too).
_VERSION_NAME = re.compile(r"[0-9]+")
# TF Serving's versions are int64: a longer number names no version it would serve.
MAX_VERSION = 2**63 - 1


def export_base(model_name):
    """Where export.py writes the versions of the model `model_name` (TF Serving's base path,
    `--model_base_path`): saved_models/<name>."""
    return os.path.join("saved_models", model_name)


# export.py's default base, which the server and the commands read when given none.
DEFAULT_EXPORT_BASE = export_base(DEFAULT_MODEL_NAME)


class ExportNotFound(FileNotFoundError):
    """No SavedModel at the path given; the message says what to do."""


def versions(base):
    """`{version: directory}` of the numeric subdirectories of `base`, oldest first: the
    versions of an export base, for the commands and the server alike. Where two names read
    as one version ("7" and "007"), the plain one; hidden temporary and other directories
    are not versions; a missing or unreadable base has none."""
    try:
        names = os.listdir(base)
    except OSError:
        return {}
    found = {}
    for name in sorted(names, key=lambda name: (len(name), name), reverse=True):  # "7" wins over "007"
        if _VERSION_NAME.fullmatch(name) and int(name) <= MAX_VERSION and os.path.isdir(os.path.join(base, name)):
            found[int(name)] = os.path.join(base, name)
    return dict(sorted(found.items()))


def saved_model_version(path):
    """The SavedModel directory `path` names: `path` itself if it holds saved_model.pb,
    else the newest version under it.

    Raises:
        ExportNotFound: `path` does not exist, is a file, or holds neither a SavedModel
            nor a version of one.
    """
    if not os.path.exists(path):
        raise ExportNotFound(f"no model exported under {path} yet: run python export.py (no such directory)")
    if not os.path.isdir(path):
        raise ExportNotFound(f"{path} is a file, not an export directory")
    if os.path.exists(os.path.join(path, SAVED_MODEL_FILE)):
        return path
    for version, directory in reversed(versions(path).items()):
        if os.path.exists(os.path.join(directory, SAVED_MODEL_FILE)):
            return directory
    raise ExportNotFound(
        f"no model exported under {path} yet: run python export.py (it holds no {SAVED_MODEL_FILE} "
        "and no numbered version directory with one)"
    )
