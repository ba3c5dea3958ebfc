"""benchmarks/bench_training.py: bad flags fail before any setting's process starts, and the
shared vocabulary's directory is removed at the end."""

import json
import os
import subprocess
import sys

import pytest

from benchmarks import bench_training

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, "benchmarks", "bench_training.py")


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--size", "bogus"], "argument --size: invalid choice: 'bogus' (choose from 'base', 'big', 'small', 'tiny')"),
        (["--steps", "0"], "argument --steps: must be at least 1, got 0"),
        (["--warmup", "-1"], "argument --warmup: must be at least 0, got -1"),
        (["--batch-tokens", "0"], "argument --batch-tokens: must be at least 1, got 0"),
        (["--batch-tokens", "100"], "argument --batch-tokens: batch_tokens 100 cannot hold one row of max_length 256"),
        (["--settings", "float32,bogus"], "argument --settings: unknown setting(s) 'bogus'; known: "
         + ", ".join(bench_training.SETTINGS)),
    ],
)
def test_bad_flags_are_usage_errors_naming_them(flags, message, capsys):
    with pytest.raises(SystemExit) as exit:
        bench_training.parse_args(flags)
    assert exit.value.code == 2
    assert capsys.readouterr().err.splitlines()[-1].endswith(f": error: {message}")


def test_a_bad_size_stops_the_command_before_it_starts_a_setting():
    output = subprocess.run([sys.executable, SCRIPT, "--size", "bogus"], capture_output=True, text=True, timeout=60)
    assert output.returncode == 2
    assert output.stdout == ""
    assert output.stderr.splitlines()[-1].endswith("argument --size: invalid choice: 'bogus' "
                                                   "(choose from 'base', 'big', 'small', 'tiny')")


def test_the_settings_share_one_vocabulary_directory_removed_at_the_end(monkeypatch, capsys):
    commands = []

    def run(command, **kwargs):
        commands.append(command)
        vocab_dir = command[command.index("--vocab-dir") + 1]
        assert os.path.isdir(vocab_dir)
        setting = command[command.index("--setting") + 1]
        line = json.dumps({"setting": setting, "tokens_per_second": 100.0, "losses": [2.0, 1.5]})
        return subprocess.CompletedProcess(command, 0, stdout=line + "\n", stderr="")

    monkeypatch.setattr(bench_training.subprocess, "run", run)
    assert bench_training.main(["--settings", "float32,mixed_bfloat16", "--steps", "2", "--warmup", "0"]) is None
    vocab_dirs = {command[command.index("--vocab-dir") + 1] for command in commands}
    assert len(commands) == 2 and len(vocab_dirs) == 1
    assert not os.path.exists(vocab_dirs.pop())
    assert "the reference is float32" in capsys.readouterr().out
