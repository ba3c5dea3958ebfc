"""Each served version in a process of its own, so that unloading it gives its memory back.

    version = VersionProcess(2, "saved_models/translator/2", CpuThreads(intra_op=1))
    version.warm_up()
    version.run("serving_default", {"inputs": np.array([b"A man."], object)})
    del version            # the last reference: its process ends, and its memory with it

TensorFlow keeps much of what `tf.saved_model.load` allocates for as long as the process
lives: loading a version and dropping it grew the process by the version's size every time,
even with its functions removed from the eager context and malloc trimmed
(docs/serving.md#memory). A server that receives a new version every day would run out of
memory. So the server process never imports TensorFlow; each version is loaded, warmed up
and run in a child process (`spawn`: a fresh interpreter, no inherited TensorFlow state),
and the server talks to it over a pipe. The child ends when the version is unloaded and the
last request holding it has been answered, or when its load fails; the operating system
takes back all of its memory.

The proxy has the interface of `models.LoadedVersion` (version, path, signatures, inputs,
outputs, signature_def, input_specs, run, warm_up), so the manager, the batcher and the
handlers do not know where a version runs. Calls may come from several threads at once;
the child runs them on as many threads (`max_calls`), as the model would in-process.

A child that dies (killed for memory, say) fails the calls in flight with a 503 and says
so in `alive`; the manager then loads the version again (models.py).
"""

import concurrent.futures
import dataclasses
import itertools
import logging
import multiprocessing.connection
import os
import signal
import socket
import subprocess
import sys
import threading
import weakref

from app.serving.rest_api import ServingError

log = logging.getLogger("app.serve")

# How the command line of a version's process says intra_op None.
AUTO = "auto"
# How long an ended version's process may take to exit before it is killed.
EXIT_GRACE_SECONDS = 10.0


@dataclasses.dataclass(frozen=True)
class CpuThreads:
    """TensorFlow's two CPU pools in a version's process (0: TensorFlow's choice). None for
    `intra_op`: what decoded fastest (app/cli/decoding_threads.py), for the searches that
    may run at once in the process. CTranslate2 versions take `intra_op` as their threads
    per call (None: the cores, shared among the calls that may run at once)."""

    intra_op: int | None = None
    inter_op: int = 0


class RemoteError(Exception):
    """An error raised in a version's process; `type_name` is its type there."""

    def __init__(self, type_name, message):
        super().__init__(message)
        self.type_name = type_name


class VersionProcess:
    """One version loaded in a child process (see the module docstring).

    Blocks until the version is loaded; raises `RemoteError` if it is not (the child
    has then ended).
    """

    def __init__(self, version, path, threads=CpuThreads(), max_calls=1):
        self.version = version
        self.path = path
        # A fresh interpreter, not multiprocessing's spawn, which would run the caller's
        # __main__ again in the child; the pipe is a socket pair passed by descriptor.
        parent_end, child_end = socket.socketpair()
        command = [
            sys.executable, "-m", __name__, str(child_end.fileno()), str(version), path,
            AUTO if threads.intra_op is None else str(threads.intra_op), str(threads.inter_op), str(max_calls),
        ]
        self._process = subprocess.Popen(command, pass_fds=[child_end.fileno()], env=_child_environment())
        child_end.close()  # the child's copy is the only one left: its exit reads as EOF here
        connection = multiprocessing.connection.Connection(parent_end.detach())
        try:
            kind, *details = connection.recv()
        except (EOFError, OSError):
            self._process.wait()
            connection.close()
            raise RemoteError(
                "ProcessExited", f"the process loading version {version} exited with code {self._process.returncode}"
            ) from None
        if kind == "failed":
            self._process.wait(EXIT_GRACE_SECONDS)
            connection.close()
            raise RemoteError(*details)
        description = details[0]
        self.signatures = {name: None for name in description["inputs"]}
        self.inputs = description["inputs"]
        self.outputs = description["outputs"]
        self.signature_def = description["signature_def"]
        self.pid = self._process.pid
        self._channel = _Channel(connection, version, self._process)
        # The child ends with the last reference to this proxy: requests in flight hold
        # one, so unloading never fails them. The finalizer must not hold the proxy.
        self._finalizer = weakref.finalize(self, self._channel.stop)

    @property
    def alive(self):
        """False once the child has died (not when it was stopped)."""
        return not self._channel.died

    def input_specs(self, signature_name):
        if signature_name not in self.inputs:
            raise ServingError(f'Serving signature name: "{signature_name}" not found in signature def')
        return self.inputs[signature_name]

    def run(self, signature_name, inputs):
        """Calls a signature on arrays in the child; name -> np.ndarray. Blocks (call from a thread)."""
        return self._channel.call("run", signature_name, inputs)

    def warm_up(self):
        return self._channel.call("warm_up")

    def close(self):
        """Ends the child now (the server's shutdown); later calls get a 503."""
        self._finalizer()


class _Channel:
    """The parent's end of the pipe: numbered calls out, answers matched back by a reader thread."""

    def __init__(self, connection, version, process):
        self._connection = connection
        self._version = version
        self._process = process
        self._pending = {}  # call number -> concurrent.futures.Future
        self._lock = threading.Lock()
        self._numbers = itertools.count()
        self._stopped = False
        self.died = False
        threading.Thread(target=self._read_answers, name=f"version-{version}-answers", daemon=True).start()

    def call(self, method, *args):
        future = concurrent.futures.Future()
        with self._lock:
            if self._stopped or self.died:
                raise self._gone()
            number = next(self._numbers)
            self._pending[number] = future
            try:
                self._connection.send((number, method, args))
            except (OSError, ValueError):  # the pipe broke: the reader fails what is pending
                pass
        ok, value = future.result()
        if ok:
            return value
        type_name, message, status = value
        if type_name == "ServingError":
            raise ServingError(message, status=status)
        raise RemoteError(type_name, message)

    def _gone(self):
        what = "was unloaded" if self._stopped and not self.died else "ended unexpectedly"
        return ServingError(f"the process of version {self._version} {what}; try again", status=503)

    def _read_answers(self):
        while True:
            try:
                number, ok, value = self._connection.recv()
            except (EOFError, OSError):
                break
            with self._lock:
                future = self._pending.pop(number, None)
            if future is not None:
                future.set_result((ok, value))
        with self._lock:
            if not self._stopped:
                self.died = True
                exit_code = _wait(self._process, EXIT_GRACE_SECONDS)
                log.error("the process of version %s ended unexpectedly (exit code %s)", self._version, exit_code)
            pending, self._pending = self._pending, {}
        for future in pending.values():
            future.set_exception(self._gone())
        self._connection.close()

    def stop(self):
        """Asks the child to exit once its calls are answered; kills it if it lingers.
        Returns at once (it may run in the event loop, when a request drops the last reference)."""
        with self._lock:
            if self._stopped:
                return
            self._stopped = True
            try:
                self._connection.send(None)
            except (OSError, ValueError):
                pass
        threading.Thread(target=self._reap, name=f"version-{self._version}-exit", daemon=True).start()

    def _reap(self):
        if _wait(self._process, EXIT_GRACE_SECONDS) is None:
            log.warning("the process of version %s did not exit; killing it", self._version)
            self._process.kill()
            self._process.wait()


def _wait(process, seconds):
    """The exit code of `process` once it has ended, or None if it runs `seconds` later."""
    try:
        return process.wait(seconds)
    except subprocess.TimeoutExpired:
        return None


def _child_environment():
    """The server's environment, with the directory that holds `app` first on the path, so
    that the child imports this same code wherever the server was started from."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    environment = dict(os.environ)
    environment["PYTHONPATH"] = os.pathsep.join(filter(None, [root, environment.get("PYTHONPATH")]))
    return environment


def _child_main(connection, version, path, threads, max_calls):
    """The child: load, say what it serves, then answer calls until told to stop or the
    server is gone."""
    # Ctrl-C in a terminal reaches the whole process group; the server decides when this ends.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        loaded = _load(version, path, threads, max_calls)
        description = {"inputs": loaded.inputs, "outputs": loaded.outputs, "signature_def": loaded.signature_def}
        connection.send(("ready", description))
    except BaseException as error:  # noqa: BLE001 (whatever it was, the server reports it)
        from app.serving.models import _first_line

        try:
            connection.send(("failed", type(error).__name__, _first_line(str(error))))
        finally:
            os._exit(1)
    sending = threading.Lock()

    def answer(number, method, args):
        try:
            result = (True, getattr(loaded, method)(*args))
        except ServingError as error:
            result = (False, ("ServingError", error.message, error.status))
        except Exception as error:  # noqa: BLE001 (sent back as the request's 500)
            result = (False, (type(error).__name__, str(error), 500))
        with sending:
            connection.send((number,) + result)

    with concurrent.futures.ThreadPoolExecutor(max_calls, thread_name_prefix="model") as calls:
        while True:
            try:
                message = connection.recv()
            except (EOFError, OSError):  # the server is gone
                break
            if message is None:
                break
            if max_calls == 1:  # one call at a time: run it here, a thread handoff less per call
                answer(*message)
            else:
                calls.submit(answer, *message)
    # Not a return: TensorFlow's teardown at interpreter exit is slow and may log.
    os._exit(0)


def _load(version, path, threads, max_calls):
    from app.cli.decoding_threads import cpu_cores, decoding_intra_op_threads
    from app.serving.models import is_ctranslate2, load_version

    intra_op = threads.intra_op
    if is_ctranslate2(path):
        if intra_op is None:
            intra_op = max(1, cpu_cores() // max_calls)
        log.info("version %s: CTranslate2 with %d threads per call", version, intra_op)
        return load_version(version, path, intra_threads=intra_op)
    if intra_op is None:
        intra_op = decoding_intra_op_threads(max_calls * _parallel_searches(path))
    # This process loads one version, so TensorFlow starts here: its pools can be sized.
    from app.cli.quiet_tensorflow import import_tensorflow

    import_tensorflow()
    from app.cli.threads import describe_cpu_threads, set_cpu_threads

    set_cpu_threads(intra_op, threads.inter_op)
    log.info("version %s: %s", version, describe_cpu_threads())
    return load_version(version, path)


def _parallel_searches(path):
    """The searches one call of the export runs side by side (export_info.json; 1 where it
    does not say)."""
    from app.export.export_info import read_export_info

    try:
        return int(read_export_info(path).get("parallel_searches", 1))
    except (OSError, ValueError):
        return 1


if __name__ == "__main__":
    descriptor, version, path, intra_op, inter_op, max_calls = sys.argv[1:]
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s", stream=sys.stderr)
    _child_main(
        multiprocessing.connection.Connection(int(descriptor)), int(version), path,
        CpuThreads(None if intra_op == AUTO else int(intra_op), int(inter_op)), int(max_calls),
    )
