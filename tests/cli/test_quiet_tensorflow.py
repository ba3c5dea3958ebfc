"""app.cli.quiet_tensorflow: TensorFlow's start-up log lines are dropped, nothing else is."""

import os
import subprocess
import sys
import textwrap

import pytest

from app.cli.quiet_tensorflow import ABSL_BANNER, ABSL_LINE, filter_startup_log

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# What TensorFlow 2.21 writes at import on a CPU machine, with lines of each severity added.
STARTUP = (
    ABSL_BANNER + b"\n"
    b"I0000 00:00:1795587557.032311     980 port.cc:153] oneDNN custom operations are on.\n"
    b"W0000 00:00:1795587557.033011     980 cuda_executor.cc:1228] a warning\n"
    b"E0000 00:00:1795587557.033012     980 cuda_dnn.cc:8579] an error\n"
    b"I1125 06:15:58.035000    1021 loader.cc:12] a later info line, after InitializeLog\n"
    b"/venv/lib/python3.11/site-packages/x.py:3: DeprecationWarning: a Python warning\n"
    b"  import y\n"
)


@pytest.mark.parametrize(
    "level, kept",
    [
        (0, STARTUP),
        (
            1,
            b"W0000 00:00:1795587557.033011     980 cuda_executor.cc:1228] a warning\n"
            b"E0000 00:00:1795587557.033012     980 cuda_dnn.cc:8579] an error\n"
            b"/venv/lib/python3.11/site-packages/x.py:3: DeprecationWarning: a Python warning\n"
            b"  import y\n",
        ),
        (
            2,
            b"E0000 00:00:1795587557.033012     980 cuda_dnn.cc:8579] an error\n"
            b"/venv/lib/python3.11/site-packages/x.py:3: DeprecationWarning: a Python warning\n"
            b"  import y\n",
        ),
        (3, b"/venv/lib/python3.11/site-packages/x.py:3: DeprecationWarning: a Python warning\n  import y\n"),
    ],
)
def test_lines_below_the_level_and_the_banner_are_dropped(level, kept):
    assert filter_startup_log(STARTUP, level) == kept


def test_a_line_that_only_mentions_a_log_prefix_is_kept():
    text = b"error: bad value 'I0000 00:00:1.0 1 a.cc:1] x' in --flag\n"
    assert filter_startup_log(text, 3) == text


def run_python(code, env, pythonpath):
    env = {**os.environ, **env, "PYTHONPATH": os.pathsep.join(pythonpath)}
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, timeout=120)


def test_the_import_keeps_what_is_not_start_up_noise(tmp_path):
    # A stand-in `tensorflow` that writes straight to file descriptor 2, as C++ code does,
    # and warns in Python: only the warning and the lines around the import remain.
    fake = tmp_path / "tensorflow"
    fake.mkdir()
    (fake / "__init__.py").write_text(
        textwrap.dedent(
            """
            import logging, os, warnings
            get_logger = lambda: logging.getLogger("tensorflow")
            os.write(2, b"WARNING: All log messages before absl::InitializeLog() is called are written to STDERR\\n")
            os.write(2, b"I0000 00:00:1795587557.032311     980 port.cc:153] oneDNN custom operations are on.\\n")
            warnings.warn("kept", UserWarning)
            os.write(2, b"E0000 00:00:1795587557.033012     980 cuda_dnn.cc:8579] an error\\n")
            """
        )
    )
    code = (
        "import sys; from app.cli.quiet_tensorflow import import_tensorflow\n"
        "print('before', file=sys.stderr); import_tensorflow(); print('after', file=sys.stderr)\n"
    )
    result = run_python(code, {"TF_CPP_MIN_LOG_LEVEL": "1"}, [str(tmp_path), ROOT])
    assert result.returncode == 0, result.stderr
    lines = result.stderr.decode().splitlines()
    assert lines[0] == "before" and lines[-1] == "after"
    assert lines[1].endswith("UserWarning: kept")
    assert lines[-2] == "E0000 00:00:1795587557.033012     980 cuda_dnn.cc:8579] an error"
    assert not any("oneDNN" in line or "InitializeLog" in line for line in lines)


def test_a_failing_import_still_shows_its_output_and_its_error(tmp_path):
    fake = tmp_path / "tensorflow"
    fake.mkdir()
    (fake / "__init__.py").write_text(
        "import os\nos.write(2, b'libfoo.so: cannot open\\n')\nraise ImportError('no libfoo')\n"
    )
    code = "from app.cli.quiet_tensorflow import import_tensorflow; import_tensorflow()"
    result = run_python(code, {}, [str(tmp_path), ROOT])
    assert result.returncode == 1
    stderr = result.stderr.decode()
    assert stderr.startswith("libfoo.so: cannot open\n")
    assert stderr.rstrip().endswith("ImportError: no libfoo")


def test_the_real_import_prints_no_start_up_log():
    code = "from app.cli.quiet_tensorflow import import_tensorflow; import_tensorflow(); import tensorflow"
    env = {key: value for key, value in os.environ.items() if key != "TF_CPP_MIN_LOG_LEVEL"}
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, timeout=120)
    assert result.returncode == 0, result.stderr
    lines = result.stderr.splitlines()
    assert not [line for line in lines if line == ABSL_BANNER or ABSL_LINE.match(line)], result.stderr


@pytest.mark.parametrize("root_configured_first", [False, True])
def test_tensorflow_warnings_print_once_after_absl_configures_the_root_logger(root_configured_first):
    # absl's first log call runs logging.basicConfig(); TensorFlow's checkpoint saving makes
    # one. Its logger's records then reached stderr twice, through its handler and the root's.
    code = textwrap.dedent(
        f"""
        import logging
        if {root_configured_first}:
            logging.basicConfig(format="root: %(message)s")
        from app.cli.quiet_tensorflow import import_tensorflow
        import_tensorflow()
        import tensorflow as tf
        from absl import logging as absl_logging
        absl_logging.warning("from absl")
        tf.get_logger().warning("from tensorflow")
        """
    )
    result = run_python(code, {}, [ROOT])
    assert result.returncode == 0, result.stderr
    lines = [line for line in result.stderr.decode().splitlines() if "from tensorflow" in line]
    assert lines == (["root: from tensorflow"] if root_configured_first else ["WARNING:tensorflow:from tensorflow"])
