"""benchmarks/table3_tiny.py: each row's train.py command and the table it prints."""

import json

import pytest

from app.model.config import ModelConfig
from app.model.transformer import build_transformer
import train
from app.commands.train_plan import resolved_flags, train_config_from_args
from benchmarks import table3_tiny

# The model a fake run's settings.json describes: small, so counting its parameters is quick.
RUN_CONFIG = ModelConfig.from_size("tiny", vocab_size=300, num_layers=1, d_model=16, d_ff=32, num_heads=2)


def test_every_row_trains_the_default_recipe_with_only_its_own_change(tmp_path):
    args = table3_tiny.parse_args(["--steps", "300", "--runs-dir", str(tmp_path), "--", "--eval-sentences", "50"])
    assert (args.warmup_steps, args.vocab_size) == (720, 8000)
    base = table3_tiny.train_command(args, "base")
    assert base[1:] == [
        table3_tiny.os.path.join(table3_tiny.ROOT, "train.py"),
        "--model-dir", str(tmp_path / "base"),
        "--train-steps", "300", "--warmup-steps", "720", "--cooldown-fraction", "0",
        "--vocab-size", "8000", "--dropout", "0.3", "--attention-bias", "--weight-decay", "0.0",
        "--batch-tokens", "4096",
        "--eval-every", "0", "--checkpoint-every", "250", "--keep-checkpoints", "2",
        "--seed", "1", "--eval-sentences", "50",
    ]
    a1 = table3_tiny.train_command(args, "A1")
    assert a1[3] == str(tmp_path / "A1")
    assert a1[:3] + a1[4:] == [*base[:3], *base[4:-2], "--num-heads", "1", *base[-2:]]
    # The dropout rows' own rate comes after the pinned one, so it is the one that counts.
    d2 = train.parse_args(table3_tiny.train_command(args, "D2")[2:])
    assert d2.dropout == 0.1
    assert train.parse_args(base[2:]).dropout == 0.3
    assert train.parse_args(base[2:]).attention_bias is True
    # The rows were measured with the paper's Adam, before tiny's default decayed weights.
    assert train_config_from_args(resolved_flags(train.parse_args(base[2:]))).weight_decay == 0.0


def test_other_seeds_train_the_same_command_in_their_own_directory(tmp_path):
    args = table3_tiny.parse_args(["--seeds", "1,2,3", "--runs-dir", str(tmp_path)])
    assert args.seeds == [1, 2, 3]
    seed_1 = table3_tiny.train_command(args, "A1", 1)
    seed_3 = table3_tiny.train_command(args, "A1", 3)
    # Seed 1 keeps the row's plain directory, where runs from before --seeds live.
    assert seed_1[3] == str(tmp_path / "A1")
    assert seed_3[3] == str(tmp_path / "A1-seed3")
    at = seed_3.index("--seed")
    assert seed_3[at:at + 2] == ["--seed", "3"]
    assert seed_3[:3] + seed_3[4:at] + seed_3[at + 2:] == seed_1[:3] + seed_1[4:at] + seed_1[at + 2:]


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--rows", "base,Z9"], "unknown rows ['Z9']"),
        (["--seeds", "1,two"], "--seeds must be comma-separated integers, got '1,two'"),
        (["--seeds", "2,2"], "each once; got [2, 2]"),
        (["--seeds", ","], "at least one seed"),
        (["--steps", "0"], "argument --steps: must be at least 1, got 0"),
        (["--warmup-steps", "-1"], "argument --warmup-steps: must be at least 0, got -1"),
        (["--vocab-size", "100"], "--vocab-size: vocab_size must be at least 300, got 100"),
    ],
)
def test_unknown_rows_and_bad_seeds_are_refused_by_name(flags, message, capsys):
    with pytest.raises(SystemExit):
        table3_tiny.parse_args(flags)
    assert message in capsys.readouterr().err


def test_the_table_reads_each_rows_final_evaluation(tmp_path, capsys):
    row = tmp_path / "D1"
    row.mkdir()
    (row / "settings.json").write_text(json.dumps({"model": RUN_CONFIG.to_dict()}))
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
    params = build_transformer(RUN_CONFIG).count_params() / 1e6
    assert f"| D1 | (D) P_drop = 0.0 | {params:.2f}M | 20.12 | 21.46 |" in lines
    assert "| E | (E) learned positional embedding | | not run | |" in lines


def write_finished_runs(runs_dir, finals):
    """Run directories that finished 1,000 steps: `finals` maps a directory name to its
    final (perplexity, BLEU); BLEU None is a run trained with --no-bleu, which records none."""
    for name, (perplexity, bleu) in finals.items():
        (runs_dir / name).mkdir()
        (runs_dir / name / "settings.json").write_text(json.dumps({"model": RUN_CONFIG.to_dict()}))
        record = {"step": 1000, "valid_loss": 3.0, "valid_perplexity": perplexity}
        if bleu is not None:
            record["bleu"] = bleu
        (runs_dir / name / "metrics.jsonl").write_text(json.dumps(record) + "\n")


def test_several_seeds_print_the_mean_and_range_of_the_seeds_that_finished(tmp_path, capsys):
    finals = {"A1": (18.0, 21.0), "A1-seed2": (19.0, 20.0), "A1-seed3": (17.5, 22.6), "E-seed2": (16.0, 25.0)}
    write_finished_runs(tmp_path, finals)

    table3_tiny.main(["--print-only", "--rows", "A1,E,D1", "--seeds", "1,2,3", "--runs-dir", str(tmp_path)])
    lines = capsys.readouterr().out.splitlines()
    params = build_transformer(RUN_CONFIG).count_params() / 1e6
    assert lines[0].endswith("; mean (range) over seeds 1, 2, 3")
    assert "| row | change | params | seeds | perplexity | BLEU |" in lines
    assert (
        f"| A1 | (A) 1 head, d_k = d_v = 128 | {params:.2f}M | 1, 2, 3 | 18.17 (17.50-19.00) | 21.20 (20.00-22.60) |"
    ) in lines
    assert f"| E | (E) learned positional embedding | {params:.2f}M | 2 | 16.00 | 25.00 |" in lines
    assert "| D1 | (D) P_drop = 0.0 | | | not run | |" in lines


def test_with_the_base_row_each_row_is_compared_with_it_seed_by_seed(tmp_path, capsys):
    finals = {
        "base": (17.5, 20.25), "base-seed2": (17.75, 21.5), "base-seed3": (16.75, 22.0),
        # A1 without seed 2: compared with the seeds both rows finished.
        "A1": (19.0, 20.5), "A1-seed3": (18.0, 20.75),
    }
    write_finished_runs(tmp_path, finals)

    table3_tiny.main(["--print-only", "--rows", "base,A1,E", "--seeds", "1,2,3", "--runs-dir", str(tmp_path)])
    lines = capsys.readouterr().out.splitlines()
    params = build_transformer(RUN_CONFIG).count_params() / 1e6
    assert (
        "| row | change | params | seeds | perplexity | BLEU | perplexity - base, by seed | BLEU - base, by seed |"
    ) in lines
    base_row = [line for line in lines if line.startswith("| base |")]
    assert base_row == [
        f"| base | {table3_tiny.ROWS['base'][0]} | {params:.2f}M | 1, 2, 3 | 17.33 (16.75-17.75) "
        "| 21.25 (20.25-22.00) | | |"
    ]
    assert (
        f"| A1 | (A) 1 head, d_k = d_v = 128 | {params:.2f}M | 1, 3 | 18.50 (18.00-19.00) | 20.62 (20.50-20.75) "
        "| +1.50, +1.25 | +0.25, -1.25 |"
    ) in lines
    assert "| E | (E) learned positional embedding | | | not run | | | |" in lines

    # Without the base row there is nothing to compare with, and no such columns.
    table3_tiny.main(["--print-only", "--rows", "A1", "--seeds", "1,3", "--runs-dir", str(tmp_path)])
    assert "| row | change | params | seeds | perplexity | BLEU |" in capsys.readouterr().out.splitlines()


def test_runs_without_bleu_leave_its_cells_empty_and_are_compared_on_perplexity(tmp_path, capsys):
    write_finished_runs(
        tmp_path, {"base": (17.5, None), "base-seed2": (18.0, None), "D3": (16.25, None), "D3-seed2": (17.5, None)}
    )

    table3_tiny.main(["--print-only", "--rows", "base,D3", "--seeds", "1,2", "--runs-dir", str(tmp_path)])
    lines = capsys.readouterr().out.splitlines()
    params = build_transformer(RUN_CONFIG).count_params() / 1e6
    assert f"| D3 | (D) epsilon_ls = 0.0 | {params:.2f}M | 1, 2 | 16.88 (16.25-17.50) | | -1.25, -0.50 | |" in lines


def test_a_study_trains_only_the_seeds_not_finished_yet(tmp_path, monkeypatch, capsys):
    write_finished_runs(tmp_path, {"A1": (18.0, 21.0)})
    trained = []
    monkeypatch.setattr(table3_tiny.subprocess, "run", lambda command, **kwargs: trained.append(command))

    table3_tiny.main(["--rows", "A1", "--seeds", "1,2", "--runs-dir", str(tmp_path)])
    assert [command[3] for command in trained] == [str(tmp_path / "A1-seed2")]
    assert trained[0] == table3_tiny.train_command(table3_tiny.parse_args(["--runs-dir", str(tmp_path)]), "A1", 2)
    assert "A1: finished earlier, kept" in capsys.readouterr().out
    assert (tmp_path / "A1-seed2.log").exists()
