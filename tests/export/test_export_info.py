"""The one reader of export_info.json (app/export/export_info.py): what it returns, and
the file or field it names when it refuses one."""

import json

import pytest

from app.export.export_info import EXPORT_INFO, read_export_info
from data.errors import DataError


def test_an_export_without_the_file_has_no_info_and_a_written_one_reads_back_whole(tmp_path):
    assert read_export_info(tmp_path) == {}  # an export made before export_info.json existed
    info = {
        "weights": "ckpt-9",
        "beam_size": 4,
        "alpha": 1.2,
        "max_extra_length": 50,
        "parallel_searches": 2,
        "dataset": "multi30k",
        "source_lang": "en",
        "target_lang": "de",
        "lowercase": False,
        "alpha_search": {"chosen": 1.2, "grid": {"0.6": 40.1, "1.2": 40.4}},
    }
    (tmp_path / EXPORT_INFO).write_text(json.dumps(info))
    assert read_export_info(tmp_path) == info
    (tmp_path / EXPORT_INFO).write_text(json.dumps({"alpha": 1}))  # a whole number is a number
    assert read_export_info(tmp_path) == {"alpha": 1}


@pytest.mark.parametrize(
    "text, message",
    [
        ("{not json", "is not valid JSON: Expecting property name enclosed in double quotes: line 1 column 2 (char 1)"),
        ("[1, 2]", "must hold a JSON object (as export.py writes it), not an array"),
        ('"de"', "must hold a JSON object (as export.py writes it), not a string"),
        ("null", "must hold a JSON object (as export.py writes it), not null"),
    ],
)
def test_a_file_that_is_no_json_object_is_refused_by_its_path(tmp_path, text, message):
    (tmp_path / EXPORT_INFO).write_text(text)
    with pytest.raises(DataError) as refused:
        read_export_info(tmp_path)
    assert str(refused.value) == f"{tmp_path / EXPORT_INFO} {message}"


@pytest.mark.parametrize(
    "field, value, message",
    [
        ("lowercase", "no", "'lowercase' must be true or false, not \"no\""),
        ("lowercase", 0, "'lowercase' must be true or false, not 0"),
        ("target_lang", 7, "'target_lang' must be a string, not 7"),
        ("dataset", None, "'dataset' must be a string, not null"),
        ("alpha", "high", "'alpha' must be a number, not \"high\""),
        ("alpha", True, "'alpha' must be a number, not true"),
        ("beam_size", 4.5, "'beam_size' must be a whole number, not 4.5"),
        ("max_extra_length", "50", "'max_extra_length' must be a whole number, not \"50\""),
        ("max_extra_length", False, "'max_extra_length' must be a whole number, not false"),
        ("parallel_searches", 2.0, "'parallel_searches' must be a whole number, not 2.0"),
    ],
)
def test_a_field_of_the_wrong_type_is_named_with_its_value(tmp_path, field, value, message):
    info = {"dataset": "multi30k", "source_lang": "en", "target_lang": "de", "lowercase": False, field: value}
    (tmp_path / EXPORT_INFO).write_text(json.dumps(info))
    with pytest.raises(DataError) as refused:
        read_export_info(tmp_path)
    assert str(refused.value) == f"{tmp_path / EXPORT_INFO}: {message}"
