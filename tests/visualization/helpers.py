"""Shared by the pictures' tests (here and tests/commands/test_pictures.py): a PNG's size,
and a run's metrics.jsonl written out."""

import struct
from pathlib import Path


def png_size(path):
    """`(width, height)` of a PNG file, after checking its signature and header."""
    data = Path(path).read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", f"{path} is not a PNG"
    assert data[12:16] == b"IHDR"
    width, height = struct.unpack(">II", data[16:24])
    assert width > 0 and height > 0
    return width, height


def write_lines(path, lines, end="\n"):
    path.write_text("\n".join(lines) + end, encoding="utf-8")
    return path


# A run evaluated at steps 2 and 4 that resumed from its step-2 checkpoint after logging step 3.
METRICS = [
    {"step": 1, "loss": 9.0, "learning_rate": 1e-4, "tokens_per_second": 100.0, "epoch": 0},
    {"step": 2, "loss": 8.0, "learning_rate": 2e-4, "tokens_per_second": 100.0, "epoch": 0},
    {"step": 2, "valid_loss": 8.5, "bleu": 1.0, "bleu_signature": "nrefs:1|case:mixed", "eval_sentences": 20},
    {"step": 3, "loss": 7.0, "learning_rate": 3e-4, "tokens_per_second": 100.0, "epoch": 0},
    {"step": 3, "loss": 6.5, "learning_rate": 3e-4, "tokens_per_second": 100.0, "epoch": 0},
    {"step": 4, "loss": 6.0, "learning_rate": 4e-4, "tokens_per_second": 100.0, "epoch": 1},
    {"step": 4, "valid_loss": 7.0, "bleu": 3.0, "bleu_signature": "nrefs:1|case:mixed", "eval_sentences": 20},
]
