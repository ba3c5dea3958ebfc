"""Imports TensorFlow without the start-up log lines that TF_CPP_MIN_LOG_LEVEL fails to hide.

Since TensorFlow 2.19 its C++ code logs through absl before absl's log is initialized, and
those lines ignore TF_CPP_MIN_LOG_LEVEL (tensorflow/tensorflow#100442): every command
would open with six lines such as

    WARNING: All log messages before absl::InitializeLog() is called are written to STDERR
    I0000 00:00:1795587557.032311     980 port.cc:153] oneDNN custom operations are on. ...
    I0000 00:00:1795587557.033011     980 cudart_stub.cc:31] Could not find cuda drivers ...

The entry points (train.py, export.py, app.evaluate, app.serve, app.pictures) call
`import_tensorflow()` once their flags are parsed, before anything else imports
TensorFlow. It captures file descriptor 2 for the import and the first look at the
devices only, then writes back every line except absl log lines below the level
TF_CPP_MIN_LOG_LEVEL asks for (I=0, W=1, E=2, F=3), absl's banner and the known harmless
error lines (`HARMLESS_ERRORS`): warnings and errors the user asked to see, Python warnings
and tracebacks all pass.

The default level is 2: TensorFlow's info and warning lines stay out, its error lines are
printed (level 3 would hide those too, and with them the reason a run fails).

It also has TensorFlow's Python log print each record once (`_print_each_record_once`).
"""

import os
import re
import sys
import tempfile

# The entry points' level: errors and fatal messages, as TF_CPP_MIN_LOG_LEVEL=2.
DEFAULT_LEVEL = "2"
ABSL_BANNER = b"WARNING: All log messages before absl::InitializeLog() is called are written to STDERR"
# absl's prefix: severity, MMDD hh:mm:ss.micros, thread id, file:line]. Before
# InitializeLog the date and time read 0000 00:00:<seconds since 1970>.
ABSL_LINE = re.compile(rb"([IWEF])\d{4} \d\d:\d\d:\d+\.\d+ +\d+ [^ \]]+:\d+\] ")
SEVERITIES = "IWEF"
# Error lines that every start on a machine without an NVIDIA GPU prints, though nothing is
# wrong: TensorFlow's CUDA build asks the (absent) driver for devices at the first look.
# Kept where a GPU seems present (app.runtime.gpu_warning), where it tells why none is used.
HARMLESS_ERRORS = (re.compile(rb"failed call to cuInit: .*CUDA error"),)


def import_tensorflow(gpu_present=None):
    """Imports TensorFlow (once), filtering what its C++ start-up writes to stderr.

    The devices are listed inside the capture too (which initializes no device: thread
    and device settings can still be made), since the CUDA platform's first look logs
    there. `gpu_present`: () -> bool, whether the machine seems to have an NVIDIA GPU
    (default `app.runtime.gpu_warning.nvidia_gpu_present`); where not, the harmless errors of
    the missing driver are dropped.
    """
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", DEFAULT_LEVEL)
    if "tensorflow" in sys.modules:
        return
    if gpu_present is None:
        from app.runtime.gpu_warning import nvidia_gpu_present as gpu_present
    min_level = _min_level(os.environ["TF_CPP_MIN_LOG_LEVEL"])
    harmless = () if gpu_present() else HARMLESS_ERRORS
    sys.stderr.flush()
    saved_stderr = os.dup(2)
    with tempfile.TemporaryFile() as captured:
        os.dup2(captured.fileno(), 2)
        try:
            import tensorflow

            tensorflow.config.list_physical_devices()
        finally:
            sys.stderr.flush()
            os.dup2(saved_stderr, 2)
            os.close(saved_stderr)
            captured.seek(0)
            kept = filter_startup_log(captured.read(), min_level, harmless)
            if kept:
                os.write(2, kept)
    _print_each_record_once(sys.modules["tensorflow"].get_logger())


def _print_each_record_once(tensorflow_logger):
    """Stops the "tensorflow" logger passing records on to the root logger's handlers.

    TensorFlow gives its logger a stderr handler when the root logger has none, and
    keeps passing records to the root. absl's first log call (TensorFlow's checkpoint
    code makes one at the first save) runs `logging.basicConfig()`, giving the root a
    stderr handler too, and from then on every TensorFlow warning printed twice. A
    logger without its own handler (the root had one first) keeps passing them on.
    """
    if tensorflow_logger.handlers:
        tensorflow_logger.propagate = False


def filter_startup_log(text, min_level, harmless=()):
    """bytes -> bytes: `text` without absl lines below `min_level` (0-3), the banner, and
    absl lines matching a pattern of `harmless` (compiled bytes regexes, searched)."""
    if min_level <= 0:
        return text
    kept = []
    for line in text.splitlines(keepends=True):
        if line.rstrip(b"\r\n") == ABSL_BANNER:
            continue
        match = ABSL_LINE.match(line)
        if match and SEVERITIES.index(match[1].decode()) < min_level:
            continue
        if match and any(pattern.search(line, match.end()) for pattern in harmless):
            continue
        kept.append(line)
    return b"".join(kept)


def _min_level(value):
    # TensorFlow reads the variable as an integer and treats anything else as 0.
    try:
        return int(value)
    except ValueError:
        return 0
