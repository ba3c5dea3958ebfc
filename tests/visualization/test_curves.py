"""app/visualization/curves.py: the metrics.jsonl it reads, the curves it takes from it and
the panels it draws. The command that calls it: tests/commands/test_pictures.py."""

import json
import re

import pytest

from app.visualization.curves import curve_series, plot_curves, read_metrics
from app.visualization.output import PicturesError
from tests.visualization.helpers import METRICS, png_size, write_lines


def test_each_curve_has_each_step_once_the_latest_record_winning(tmp_path):
    records = read_metrics(write_lines(tmp_path / "metrics.jsonl", [json.dumps(r) for r in METRICS]))
    series = {key: (steps.tolist(), values.tolist()) for key, (steps, values) in curve_series(records).items()}
    assert series == {
        "loss": ([1, 2, 3, 4], [9.0, 8.0, 6.5, 6.0]),
        "valid_loss": ([2, 4], [8.5, 7.0]),
        "bleu": ([2, 4], [1.0, 3.0]),
        "learning_rate": ([1, 2, 3, 4], [1e-4, 2e-4, 3e-4, 4e-4]),
    }


def test_curves_draw_a_panel_per_quantity_recorded(tmp_path):
    full = read_metrics(write_lines(tmp_path / "full.jsonl", [json.dumps(r) for r in METRICS]))
    no_bleu = [{k: v for k, v in r.items() if k != "bleu"} for r in METRICS]
    # The directories a path names are made.
    assert plot_curves(full, str(tmp_path / "out" / "full.png")) == str(tmp_path / "out" / "full.png")
    plot_curves(no_bleu, str(tmp_path / "no_bleu.png"))
    (width, height), (width_2, height_2) = png_size(tmp_path / "out" / "full.png"), png_size(tmp_path / "no_bleu.png")
    assert width == width_2 and height > height_2  # 3 panels against 2


def test_a_line_being_written_is_skipped_but_a_bad_line_is_an_error(tmp_path):
    lines = [json.dumps(r) for r in METRICS[:2]]
    unfinished = write_lines(tmp_path / "unfinished.jsonl", lines + ['{"step": 3, "lo'], end="")
    assert [r["step"] for r in read_metrics(unfinished)] == [1, 2]
    finished = write_lines(tmp_path / "finished.jsonl", lines + ['{"step": 3, "lo'])
    with pytest.raises(PicturesError, match=re.escape(f"{finished} line 3 is not JSON")):
        read_metrics(finished)
    middle = write_lines(tmp_path / "middle.jsonl", [lines[0], "not json", lines[1]])
    with pytest.raises(PicturesError, match=re.escape(f"{middle} line 2 is not JSON")):
        read_metrics(middle)
    no_step = write_lines(tmp_path / "no_step.jsonl", [lines[0], '{"loss": 1.0}'])
    with pytest.raises(PicturesError, match=re.escape(f'{no_step} line 2 is not a record with an integer "step"')):
        read_metrics(no_step)
    true_step = write_lines(tmp_path / "true_step.jsonl", [lines[0], '{"step": true, "loss": 1.0}'])
    with pytest.raises(PicturesError, match=re.escape(f'{true_step} line 2 is not a record with an integer "step"')):
        read_metrics(true_step)
    not_utf8 = tmp_path / "not_utf8.jsonl"
    not_utf8.write_bytes(lines[0].encode() + b'\n{"step": 2, "loss": "\xff"}\n')
    message = f"{not_utf8} line 2 is not UTF-8 (invalid start byte at byte 21)"
    with pytest.raises(PicturesError, match=re.escape(message)):
        read_metrics(not_utf8)


def test_missing_and_empty_metrics_and_records_without_curves_are_errors_naming_them(tmp_path):
    with pytest.raises(PicturesError, match=re.escape(f"{tmp_path / 'metrics.jsonl'} not found")):
        read_metrics(str(tmp_path / "metrics.jsonl"))
    for text in ("", "\n \n"):
        (tmp_path / "metrics.jsonl").write_text(text)
        with pytest.raises(PicturesError, match=re.escape(f"{tmp_path / 'metrics.jsonl'} is empty")):
            read_metrics(str(tmp_path / "metrics.jsonl"))
    with pytest.raises(PicturesError, match="no curves to draw: the records have none of loss, valid_loss"):
        plot_curves([{"step": 1, "epoch": 0}], str(tmp_path / "curves.png"))
    assert not (tmp_path / "curves.png").exists()
