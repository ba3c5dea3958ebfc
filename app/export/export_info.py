"""export_info.json: what an export records beside its weights, and the one reader of it.

    info = read_export_info("saved_models/translator/1")   # {} for an export older than it
    exported_decoding("saved_models/translator/1").alpha  # how it decodes, None where unrecorded

export.py writes it into every version, SavedModel or CTranslate2 (app/export/saved_model.py's
`export_metadata`): where the weights came from, how the export decodes (beam size,
alpha, the alpha search), and the data it was trained on. Tools read it for their
defaults: app.evaluate the dataset and languages, app.translate alpha and the extra
length, the local server the page's decoding defaults.

A user may edit the file by hand, so what is read is checked: a file that is not JSON,
or not a JSON object, or a known field of the wrong type is refused, naming the path and
the field ("lowercase": "no" would otherwise read as true). Imports no TensorFlow.
"""

import dataclasses
import json
import os
from typing import Optional

from app.decoding.config import DecodingConfig
from data.errors import DataError

EXPORT_INFO = "export_info.json"

# The field of an ensemble's export (export.py --ensemble): its members' model directories.
# A CTranslate2 version decodes one model, so it refuses one that has it.
ENSEMBLE = "ensemble"

# What a JSON value is, by the Python type json.load gives it, for messages.
JSON_KINDS = {
    dict: "an object",
    list: "an array",
    str: "a string",
    int: "a number",
    float: "a number",
    bool: "true or false",
    type(None): "null",
}

# The fields the tools read: name -> (Python types, what to say it must be).
FIELDS = {
    "dataset": (str, "a string"),
    "source_lang": (str, "a string"),
    "target_lang": (str, "a string"),
    "lowercase": (bool, "true or false"),
    "alpha": ((int, float), "a number"),
    "beam_size": (int, "a whole number"),
    "max_extra_length": (int, "a whole number"),
    "parallel_searches": (int, "a whole number"),
}


def read_export_info(directory):
    """The export_info.json in `directory` as a dict; {} where there is none (an export
    made before it existed).

    Raises:
        DataError: the file is not valid JSON, not an object, or a field of `FIELDS` has
            the wrong type; the message names the path and the value.
        OSError: the file exists but cannot be read.
    """
    path = os.path.join(directory, EXPORT_INFO)
    if not os.path.exists(path):
        return {}
    with open(path, encoding="utf-8") as f:
        try:
            info = json.load(f)
        except json.JSONDecodeError as error:
            raise DataError(f"{path} is not valid JSON: {error}") from None
    if not isinstance(info, dict):
        raise DataError(f"{path} must hold a JSON object (as export.py writes it), not {JSON_KINDS[type(info)]}")
    for field, (kinds, wanted) in FIELDS.items():
        if field in info and not _is_a(info[field], kinds):
            raise DataError(f"{path}: {field!r} must be {wanted}, not {json.dumps(info[field])}")
    return info


@dataclasses.dataclass(frozen=True)
class ExportedDecoding:
    """How a version decodes by default, as its export_info.json records it."""

    # The length penalty exponent; None for an export that does not record it.
    alpha: Optional[float]
    # Its output length limit beyond the input's: DecodingConfig's where unrecorded, as
    # every export made before the field existed decoded with it.
    max_extra_length: int
    # Its beams; None where unrecorded (the nbest signature's K says).
    beam_size: Optional[int]


def exported_decoding(directory):
    """The `ExportedDecoding` of the version in `directory`: the one reader of a SavedModel's
    own decoding settings, for the commands that decode it (`read_export_info`'s errors)."""
    info = read_export_info(directory)
    return ExportedDecoding(
        alpha=info.get("alpha"),
        max_extra_length=info.get("max_extra_length", DecodingConfig.max_extra_length),
        beam_size=info.get("beam_size"),
    )


def _is_a(value, kinds):
    # bool is an int in Python: a number field refuses true and false.
    return kinds is bool if isinstance(value, bool) else isinstance(value, kinds)
