"""app.runtime.quiet_tensorflow: TensorFlow's start-up log lines are dropped, nothing else is."""

import os
import subprocess
import sys
import textwrap

import pytest

from app.runtime.quiet_tensorflow import ABSL_BANNER, ABSL_LINE, HARMLESS_ERRORS, filter_startup_log

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


# What TensorFlow 2.21's CUDA build writes at its first look at the devices where no NVIDIA
# driver is installed.
CUINIT = (
    b"E0000 00:00:1795757050.290541   12672 cuda_platform.cc:52] failed call to cuInit: INTERNAL: CUDA error: "
    b"Failed call to cuInit: UNKNOWN ERROR (303)\n"
)
OTHER_ERROR = b"E0000 00:00:1795587557.033012     980 cuda_dnn.cc:8579] an error\n"


def test_a_known_harmless_error_line_is_dropped_and_other_errors_kept():
    assert filter_startup_log(CUINIT + OTHER_ERROR, 2, HARMLESS_ERRORS) == OTHER_ERROR
    assert filter_startup_log(CUINIT + OTHER_ERROR, 2) == CUINIT + OTHER_ERROR  # not told it is harmless
    assert filter_startup_log(CUINIT, 0, HARMLESS_ERRORS) == CUINIT  # level 0: everything
    # Only as an absl line: the same words in a Python traceback stay.
    text = b"RuntimeError: failed call to cuInit: CUDA error\n"
    assert filter_startup_log(text, 2, HARMLESS_ERRORS) == text


def test_a_line_that_only_mentions_a_log_prefix_is_kept():
    text = b"error: bad value 'I0000 00:00:1.0 1 a.cc:1] x' in --flag\n"
    assert filter_startup_log(text, 3) == text


def run_python(code, env, pythonpath):
    env = {**os.environ, **env, "PYTHONPATH": os.pathsep.join(pythonpath)}
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, timeout=120)


def test_the_import_keeps_what_is_not_start_up_noise(tmp_path):
    # A stand-in `tensorflow` that writes straight to file descriptor 2, as C++ code does,
    # and warns in Python: only the warning and the lines around the import remain.
    fake_tensorflow(tmp_path)
    code = (
        "import sys; from app.runtime.quiet_tensorflow import import_tensorflow\n"
        "print('before', file=sys.stderr); import_tensorflow(lambda: None); print('after', file=sys.stderr)\n"
    )
    result = run_python(code, {"TF_CPP_MIN_LOG_LEVEL": "1"}, [str(tmp_path), ROOT])
    assert result.returncode == 0, result.stderr
    lines = result.stderr.decode().splitlines()
    assert lines[0] == "before" and lines[-1] == "after"
    assert lines[1].endswith("UserWarning: kept")
    assert lines[-2] == "E0000 00:00:1795587557.033012     980 cuda_dnn.cc:8579] an error"
    assert not any("oneDNN" in line or "InitializeLog" in line for line in lines)


def fake_tensorflow(directory):
    """A stand-in `tensorflow` under `directory` that writes straight to file descriptor 2,
    as C++ code does, and warns in Python; its device listing writes the cuInit error."""
    fake = directory / "tensorflow"
    fake.mkdir()
    (fake / "__init__.py").write_text(
        textwrap.dedent(
            """
            import logging, os, types, warnings
            get_logger = lambda: logging.getLogger("tensorflow")
            os.write(2, b"WARNING: All log messages before absl::InitializeLog() is called are written to STDERR\\n")
            os.write(2, b"I0000 00:00:1795587557.032311     980 port.cc:153] oneDNN custom operations are on.\\n")
            warnings.warn("kept", UserWarning)
            os.write(2, b"E0000 00:00:1795587557.033012     980 cuda_dnn.cc:8579] an error\\n")
            CUINIT = b"E0000 00:00:1.5 1 cuda_platform.cc:52] failed call to cuInit: INTERNAL: CUDA error\\n"
            config = types.SimpleNamespace(list_physical_devices=lambda *kind: os.write(2, CUINIT) and [])
            """
        )
    )


@pytest.mark.parametrize("gpu", [None, "nvidia-smi"])
def test_by_default_errors_pass_and_the_missing_drivers_error_only_where_a_gpu_seems_present(tmp_path, gpu):
    fake_tensorflow(tmp_path)
    code = (
        "import os; from app.runtime.quiet_tensorflow import import_tensorflow\n"
        f"import_tensorflow(lambda: {gpu!r}); print(os.environ['TF_CPP_MIN_LOG_LEVEL'])\n"
    )
    env = {key: value for key, value in os.environ.items() if key != "TF_CPP_MIN_LOG_LEVEL"}
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env={**env, "PYTHONPATH": os.pathsep.join([str(tmp_path), ROOT])},
        capture_output=True, timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout == b"2\n"  # level 2: TensorFlow's errors are printed, its info and warnings not
    errors = [line for line in result.stderr.splitlines(keepends=True) if ABSL_LINE.match(line)]
    cuinit = b"E0000 00:00:1.5 1 cuda_platform.cc:52] failed call to cuInit: INTERNAL: CUDA error\n"
    assert errors == [OTHER_ERROR] + ([cuinit] if gpu else [])


def test_a_failing_import_still_shows_its_output_and_its_error(tmp_path):
    fake = tmp_path / "tensorflow"
    fake.mkdir()
    (fake / "__init__.py").write_text(
        "import os\nos.write(2, b'libfoo.so: cannot open\\n')\nraise ImportError('no libfoo')\n"
    )
    code = "from app.runtime.quiet_tensorflow import import_tensorflow; import_tensorflow()"
    result = run_python(code, {}, [str(tmp_path), ROOT])
    assert result.returncode == 1
    stderr = result.stderr.decode()
    assert stderr.startswith("libfoo.so: cannot open\n")
    assert stderr.rstrip().endswith("ImportError: no libfoo")


@pytest.mark.slow
def test_the_real_import_prints_no_start_up_log():
    code = "from app.runtime.quiet_tensorflow import import_tensorflow; import_tensorflow(); import tensorflow"
    env = {key: value for key, value in os.environ.items() if key != "TF_CPP_MIN_LOG_LEVEL"}
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, timeout=120)
    assert result.returncode == 0, result.stderr
    lines = result.stderr.splitlines()
    assert not [line for line in lines if line == ABSL_BANNER or ABSL_LINE.match(line)], result.stderr


@pytest.mark.slow
@pytest.mark.parametrize("root_configured_first", [False, True])
def test_tensorflow_warnings_print_once_after_absl_configures_the_root_logger(root_configured_first):
    # absl's first log call runs logging.basicConfig(); TensorFlow's checkpoint saving makes
    # one. Its logger's records then reached stderr twice, through its handler and the root's.
    code = textwrap.dedent(
        f"""
        import logging
        if {root_configured_first}:
            logging.basicConfig(format="root: %(message)s")
        from app.runtime.quiet_tensorflow import import_tensorflow
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
