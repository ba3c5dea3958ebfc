"""benchmarks/table3_tiny.py: each row's train.py command and the table it prints."""

import json

import pytest

from app.config import ModelConfig
from app.model import build_transformer
import train
from benchmarks import table3_tiny


def test_every_row_trains_the_default_recipe_with_only_its_own_change(tmp_path):
    args = table3_tiny.parse_args(["--steps", "300", "--runs-dir", str(tmp_path), "--", "--eval-sentences", "50"])
    assert (args.warmup_steps, args.vocab_size) == (720, 8000)
    base = table3_tiny.train_command(args, "base")
    assert base[1:] == [
        table3_tiny.os.path.join(table3_tiny.ROOT, "train.py"),
        "--model-dir", str(tmp_path / "base"),
        "--train-steps", "300", "--warmup-steps", "720", "--cooldown-fraction", "0",
        "--vocab-size", "8000", "--dropout", "0.3", "--attention-bias",
        "--eval-every", "0", "--checkpoint-every", "250", "--keep-checkpoints", "2",
        "--eval-sentences", "50",
    ]
    a1 = table3_tiny.train_command(args, "A1")
    assert a1[3] == str(tmp_path / "A1")
    assert a1[:3] + a1[4:] == [*base[:3], *base[4:-2], "--num-heads", "1", *base[-2:]]
    # The dropout rows' own rate comes after the pinned one, so it is the one that counts.
    d2 = train.parse_args(table3_tiny.train_command(args, "D2")[2:])
    assert d2.dropout == 0.1
    assert train.parse_args(base[2:]).dropout == 0.3
    assert train.parse_args(base[2:]).attention_bias is True


def test_unknown_rows_are_refused():
    with pytest.raises(SystemExit):
        table3_tiny.parse_args(["--rows", "base,Z9"])


def test_the_table_reads_each_rows_final_evaluation(tmp_path, capsys):
    config = ModelConfig.from_size("tiny", vocab_size=300, num_layers=1, d_model=16, d_ff=32, num_heads=2)
    row = tmp_path / "D1"
    row.mkdir()
    (row / "settings.json").write_text(json.dumps({"model": config.to_dict()}))
    records = [
        {"step": 500, "valid_loss": 4.0, "valid_perplexity": 30.0, "bleu": 10.0},
        {"step": 1000, "loss": 3.0},
        {"step": 1000, "valid_loss": 3.5, "valid_perplexity": 20.123, "bleu": 21.456},
    ]
    (row / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    # A row stopped before its last step counts as not run.
    (tmp_path / "E").mkdir()
    (tmp_path / "E" / "metrics.jsonl").write_text(json.dumps(records[0]) + "\n")

    table3_tiny.main(["--print-only", "--steps", "1000", "--rows", "D1,E", "--runs-dir", str(tmp_path)])
    lines = capsys.readouterr().out.splitlines()
    params = build_transformer(config).count_params() / 1e6
    assert f"| D1 | (D) P_drop = 0.0 | {params:.2f}M | 20.12 | 21.46 |" in lines
    assert "| E | (E) learned positional embedding | | not run | |" in lines
