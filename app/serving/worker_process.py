"""Every served version in one worker process, which loads new versions beside the others.

    worker = WorkerProcess([("en-de", 3, "models/en-de/3"), ("en-fr", 1, "models/en-fr/1")],
                           CpuThreads(intra_op=1))
    version = worker.versions[("en-de", 3)]      # a WorkerVersion, or the load's RemoteError
    version.run("serving_default", {"inputs": np.array([b"A man."], object)})
    handle = worker.worker                       # keep this, not the WorkerProcess
    handle.load([("en-de", 4, "models/en-de/4")], timeout=900)   # beside 3, which keeps answering
    del version            # unloaded in the worker once no request holds it
    del worker, handle     # the last reference: the process ends, and its memory with it

TensorFlow keeps much of what `tf.saved_model.load` allocates for as long as the process
lives: loading a version and dropping it grew the process by the version's size every time,
even with its functions removed from the eager context and malloc trimmed
(docs/local-server.md#memory). And TensorFlow's runtime is most of a process: about 1.6 GB of
the 1.65 GB a process serving the 2.35M-parameter default holds. So the server process never
imports TensorFlow, and every version it serves runs in one child process (a fresh
interpreter, no inherited TensorFlow state) that the server talks to over a pipe: a second
model costs its weights and traced functions, not a second runtime. A new version is loaded
into the serving worker, on a thread of its own while the others answer (`_Handle.load`), and
a version dropped by the server and by every request is unloaded there (its session closed,
the heap trimmed): a rollout of one model loads that version only. What unloads leave behind
(`_Handle.held_for_unloaded`) is bounded: past a threshold the server starts a fresh worker
holding what is served, moves the versions over (ServerCore, core.py), and the old worker
ends once the last request holding one of its versions has been answered, the operating
system taking back all of its memory.

`WorkerVersion` has the interface of `models.LoadedVersion` (version, path, signatures,
inputs, outputs, signature_def, input_specs, run, warm_up), so the managers, the batcher and
the handlers do not know where a version runs. Calls may come from several threads at once;
the worker runs them on as many threads (`max_calls`), as the model would in-process.

A worker that dies (killed for memory, say) fails the calls in flight with a 503 and says so
in each of its versions' `alive`; the managers then load them again at once (models.py).
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

# How the command line of a worker says intra_op None.
AUTO = "auto"
# How long an ended worker may take to exit before it is killed.
EXIT_GRACE_SECONDS = 10.0
# The worker's own methods, beside a version's (run): load more versions, unload one.
LOAD, UNLOAD = "__load__", "__unload__"


@dataclasses.dataclass(frozen=True)
class CpuThreads:
    """TensorFlow's two CPU pools in the worker (0: TensorFlow's choice). None for
    `intra_op`: what decoded fastest (app/runtime/decoding_threads.py), for the searches that
    may run at once in the worker. CTranslate2 versions take `intra_op` as their threads
    per call (None: the cores, shared among the calls that may run at once)."""

    intra_op: int | None = None
    inter_op: int = 0


class RemoteError(Exception):
    """An error raised in the worker; `type_name` is its type there."""

    def __init__(self, type_name, message):
        super().__init__(message)
        self.type_name = type_name


class WorkerProcess:
    """The versions `entries` ((model name, version, path) each) loaded and warmed up in one
    child process (see the module docstring). Blocks until every one has loaded or failed,
    or for `timeout` seconds at most (then the child is killed: RemoteError "LoadTimeout").

    Attributes:
        versions: (model name, version) -> `WorkerVersion`, or the `RemoteError` its load raised.
        pid: the child's process id.

    Raises:
        RemoteError: the child ended before it said how its loads went.
    """

    def __init__(self, entries, threads=CpuThreads(), max_calls=1, timeout=None, warmup_iterations=1):
        entries = [(name, int(version), str(path)) for name, version, path in entries]
        # A fresh interpreter, not multiprocessing's spawn, which would run the caller's
        # __main__ again in the child; the pipe is a socket pair passed by descriptor.
        parent_end, child_end = socket.socketpair()
        command = [
            sys.executable, "-m", __name__, str(child_end.fileno()),
            AUTO if threads.intra_op is None else str(threads.intra_op), str(threads.inter_op), str(max_calls),
            str(warmup_iterations),
        ]
        self._process = subprocess.Popen(command, pass_fds=[child_end.fileno()], env=_child_environment())
        child_end.close()  # the child's copy is the only one left: its exit reads as EOF here
        connection = multiprocessing.connection.Connection(parent_end.detach())
        described = ", ".join(_describe(name, version) for name, version, _ in entries)
        try:
            connection.send(entries)
            if timeout is not None and not connection.poll(timeout):  # a load that hangs
                self._process.kill()
                self._process.wait()
                connection.close()
                raise _load_timeout(described, timeout)
            results = connection.recv()
        except (EOFError, OSError):
            self._process.wait()
            connection.close()
            raise RemoteError(
                "ProcessExited", f"the worker loading {described} exited with code {self._process.returncode}"
            ) from None
        self.pid = self._process.pid
        channel = _Channel(connection, described, self._process)
        # The child ends with the last reference to the channel's holder: every version
        # holds it, and requests in flight hold their version, so replacing a worker never
        # fails them. The finalizer must not hold the handle.
        self._handle = _Handle(channel)
        self.versions = self._handle.take(entries, results)
        self._handle.measure_start()
        if not self._handle.keys:  # nothing loaded: the child exits by itself
            self.close()
            _wait(self._process, EXIT_GRACE_SECONDS)

    @property
    def worker(self):
        """What this worker's versions share (`WorkerVersion.worker`): keep this, not the
        `WorkerProcess`, whose `versions` would keep every version it loaded."""
        return self._handle

    def close(self):
        """Ends the child now (the server's shutdown); later calls get a 503."""
        self._handle.stop()


class _Handle:
    """What a worker's versions share: its channel, ended when the last of them is dropped,
    and what it holds."""

    def __init__(self, channel):
        self.channel = channel
        self.keys = frozenset()  # (model name, version) of every version it holds
        self.retiring = False  # a load timed out: it takes no more (`WorkerProcess.load`)
        self._costs = {}  # (model name, version) -> bytes its load and warm-up added, while held
        self._start = 0  # bytes of the worker once its first versions loaded (`measure_start`)
        self._finalizer = weakref.finalize(self, channel.stop)

    def take(self, entries, results):
        """`{(model name, version): WorkerVersion or RemoteError}` of the child's answer to a load."""
        versions = {}
        for (name, version, path), (ok, value) in zip(entries, results):
            if ok:
                versions[(name, version)] = WorkerVersion(self, name, version, path, value)
                self.add(name, version, value.get("cost", 0))
            else:
                versions[(name, version)] = RemoteError(*value)
        return versions

    def load(self, entries, timeout=None):
        """Loads and warms up more versions in this worker, beside those it serves (which
        keep answering): `{(model name, version): WorkerVersion or RemoteError}`, as
        `versions`. Blocks (call from a thread).

        Raises:
            RemoteError: "LoadTimeout" where the child has not answered in `timeout` seconds
                (a load that hangs, a stalled network mount): the worker then takes no more
                loads (`retiring`), and what it serves moves to a fresh one.
        """
        entries = [(name, int(version), str(path)) for name, version, path in entries]
        try:
            results = self.channel.call(LOAD, None, entries, timeout=timeout)
        except concurrent.futures.TimeoutError:
            self.retiring = True
            described = ", ".join(_describe(name, version) for name, version, _ in entries)
            raise _load_timeout(described, timeout) from None
        return self.take(entries, results)

    def add(self, name, version, cost):
        self.keys |= {(name, version)}
        self._costs[(name, version)] = cost

    def measure_start(self):
        """Notes the worker's memory once its first versions loaded: what it grows by later
        is accounted for by later loads (`held_for_unloaded`). The first versions count as
        costing nothing: their loads also set TensorFlow's runtime up, which no unload
        gives back, so their costs are no measure of what unloading them frees."""
        self._start = resident_bytes(self.channel.pid)
        self._costs = dict.fromkeys(self._costs, 0)

    def unload(self, key):
        """Unloads a version no request holds any more (its `WorkerVersion` was dropped)."""
        if key not in self.keys:
            return
        self.keys -= {key}
        self._costs.pop(key, None)
        self.channel.unload(key)

    def held_for_unloaded(self):
        """Bytes the worker has grown by since its first versions loaded beyond what the
        later loads of the versions it serves took: what the versions it unloaded left
        behind (TensorFlow and the allocator keep some of what a load allocated) and the
        model's caches for the shapes of requests."""
        if self.channel.died or self.channel.stopped:
            return 0
        return max(0, resident_bytes(self.channel.pid) - self._start - sum(self._costs.values()))

    def stop(self):
        self._finalizer()


class WorkerVersion:
    """One version in a worker, with `models.LoadedVersion`'s interface."""

    def __init__(self, handle, model_name, version, path, description):
        self._handle = handle
        self.model_name = model_name
        self.version = version
        self.path = path
        self.signatures = {name: None for name in description["inputs"]}
        self.inputs = description["inputs"]
        self.outputs = description["outputs"]
        self.signature_def = description["signature_def"]
        # Dropped by the server and by every request (a version unloaded, or moved to
        # another worker): unloaded from this worker, which goes on serving the others.
        weakref.finalize(self, handle.unload, (model_name, version))

    @property
    def worker(self):
        """Which worker runs this version (the same object for every version of one worker)."""
        return self._handle

    @property
    def pid(self):
        return self._handle.channel.pid

    @property
    def alive(self):
        """False once the worker has died (not when it was stopped)."""
        return not self._handle.channel.died

    def input_specs(self, signature_name):
        if signature_name not in self.inputs:
            raise ServingError(f'Serving signature name: "{signature_name}" not found in signature def')
        return self.inputs[signature_name]

    def run(self, signature_name, inputs):
        """Calls a signature on arrays in the worker; name -> np.ndarray. Blocks (call from a thread)."""
        return self._handle.channel.call("run", (self.model_name, self.version), signature_name, inputs)

    def warm_up(self):
        """Nothing: the worker warmed every version up before saying it had loaded."""

    def close(self):
        """Ends the whole worker now (the server's shutdown)."""
        self._handle.stop()


def VersionProcess(version, path, threads=CpuThreads(), max_calls=1, model_name=""):  # noqa: N802 (a constructor)
    """One version alone in a worker: its `WorkerVersion`, or the load's `RemoteError` raised
    (the worker has then ended). The loader of a `ModelManager` that is not part of a server."""
    loaded = WorkerProcess([(model_name, version, path)], threads, max_calls).versions[(model_name, version)]
    if isinstance(loaded, RemoteError):
        raise loaded
    return loaded


class _Channel:
    """The parent's end of the pipe: numbered calls out, answers matched back by a reader thread."""

    def __init__(self, connection, described, process):
        self._connection = connection
        self._described = described
        self._process = process
        self.pid = process.pid
        self._pending = {}  # call number -> concurrent.futures.Future
        self._lock = threading.Lock()
        self._numbers = itertools.count()
        self._stopped = False
        self.died = False
        threading.Thread(target=self._read_answers, name=f"worker-{process.pid}-answers", daemon=True).start()

    @property
    def stopped(self):
        return self._stopped

    def call(self, method, key, *args, timeout=None):
        """The child's answer to `method` of version `key` (or the worker's own LOAD and
        UNLOAD); `concurrent.futures.TimeoutError` after `timeout` seconds (its answer,
        should it come, is then dropped)."""
        future = self.send(method, key, *args)
        try:
            ok, value = future.result(timeout)
        except concurrent.futures.TimeoutError:
            with self._lock:
                self._pending = {n: pending for n, pending in self._pending.items() if pending[0] is not future}
            raise
        if ok:
            return value
        type_name, message, status = value
        if type_name == "ServingError":
            raise ServingError(message, status=status)
        raise RemoteError(type_name, message)

    def send(self, method, key, *args):
        """Sends a call; the future of its (ok, value) answer."""
        future = concurrent.futures.Future()
        with self._lock:
            if self._stopped or self.died:
                raise self._gone(key)
            number = next(self._numbers)
            self._pending[number] = (future, key)
            try:
                self._connection.send((number, method, key, args))
            except (OSError, ValueError):  # the pipe broke: the reader fails what is pending
                pass
        return future

    def unload(self, key):
        """Tells the child to unload version `key`, not waiting for its answer (this runs
        when the version's last reference goes, in whatever thread that is)."""
        try:
            self.send(UNLOAD, key)
        except ServingError:  # stopped or dead: nothing to unload
            pass

    def _gone(self, key):
        what = "was unloaded" if self._stopped and not self.died else "ended unexpectedly"
        whose = _describe(*key) if key else "the worker"
        return ServingError(f"the process of {whose} {what}; try again", status=503, retry_after=1)

    def _read_answers(self):
        while True:
            try:
                number, ok, value = self._connection.recv()
            except (EOFError, OSError):
                break
            with self._lock:
                future, _ = self._pending.pop(number, (None, None))
            if future is not None:
                future.set_result((ok, value))
        with self._lock:
            if not self._stopped:
                self.died = True
                exit_code = _wait(self._process, EXIT_GRACE_SECONDS)
                log.error("the worker of %s ended unexpectedly (exit code %s)", self._described, exit_code)
            pending, self._pending = self._pending, {}
        for future, key in pending.values():
            future.set_exception(self._gone(key))
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
        threading.Thread(target=self._reap, name=f"worker-{self.pid}-exit", daemon=True).start()

    def _reap(self):
        if _wait(self._process, EXIT_GRACE_SECONDS) is None:
            log.warning("the worker of %s did not exit; killing it", self._described)
            self._process.kill()
            self._process.wait()


def _describe(model_name, version):
    """"en-de version 3" ("version 3" for a version of no named model)."""
    return f"{model_name} version {version}" if model_name else f"version {version}"


def _load_timeout(described, timeout):
    """The RemoteError of a load of `described` versions that did not end in `timeout` s
    (`ModelManager.failed` reads its type as DEADLINE_EXCEEDED)."""
    return RemoteError("LoadTimeout", f"the load of {described} did not end in {timeout:g} s")


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


def _child_main(connection, threads, max_calls, warmup_iterations):
    """The child: load and warm up each version, say how each went, then answer calls until
    told to stop or the server is gone."""
    # Ctrl-C in a terminal reaches the whole process group; the server decides when this ends.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    from app.serving.models import _first_line

    try:
        entries = connection.recv()
    except (EOFError, OSError):
        os._exit(1)
    loaded = {}
    _set_threads(entries, threads, max_calls)

    def load_each(entries):
        """Loads and warms up each entry; (ok, description or error) each, as the server reads them."""
        results = []
        for name, version, path in entries:
            before = resident_bytes()
            try:
                loaded[(name, version)] = _load(version, path, threads, max_calls, warmup_iterations)
                description = loaded[(name, version)]
                results.append((True, {"inputs": description.inputs, "outputs": description.outputs,
                                       "signature_def": description.signature_def,
                                       "cost": resident_bytes() - before}))
            except BaseException as error:  # noqa: BLE001 (whatever it was, the server reports it)
                log.warning("%s version %s did not load: %s", name, version, error)
                results.append((False, (type(error).__name__, _first_line(str(error)))))
        return results

    try:
        connection.send(load_each(entries))
    except (OSError, ValueError):
        os._exit(1)
    if not loaded:
        os._exit(1)
    sending = threading.Lock()

    def answer(number, method, key, args):
        try:
            if method == LOAD:
                result = (True, load_each(*args))
            elif method == UNLOAD:
                version = loaded.pop(key)
                if hasattr(version, "close"):
                    version.close()
                del version
                result = (True, None)
            else:
                result = (True, getattr(loaded[key], method)(*args))
        except ServingError as error:
            result = (False, ("ServingError", error.message, error.status))
        except Exception as error:  # noqa: BLE001 (sent back as the request's 500)
            result = (False, (type(error).__name__, str(error), 500))
        with sending:
            connection.send((number,) + result)

    # Loads run on a thread of their own, so that the versions already served keep answering.
    # At the end the calls in flight are answered, but a load is not waited for: one that
    # hangs (a stalled mount) must not keep the process alive.
    loads = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="load")
    with concurrent.futures.ThreadPoolExecutor(max_calls, thread_name_prefix="model") as calls:
        while True:
            try:
                message = connection.recv()
            except (EOFError, OSError):  # the server is gone
                break
            if message is None:
                break
            if message[1] == LOAD:
                loads.submit(answer, *message)
            elif max_calls == 1:  # one call at a time: run it here, a thread handoff less per call
                answer(*message)
            else:
                calls.submit(answer, *message)
    # Not a return: TensorFlow's teardown at interpreter exit is slow and may log.
    os._exit(0)


def resident_bytes(pid="self"):
    """Resident memory of a process (this one by default), in bytes; 0 once it has exited or
    where /proc does not say."""
    try:
        with open(f"/proc/{pid}/status") as f:
            return next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmRSS:"))
    except (OSError, StopIteration, ValueError):
        return 0


def _set_threads(entries, threads, max_calls):
    """Sizes TensorFlow's pools once, before the first SavedModel loads: for the most
    searches any of the versions runs side by side. Nothing where every version is a
    CTranslate2 export (TensorFlow is then never imported)."""
    from app.runtime.decoding_threads import decoding_intra_op_threads
    from app.serving.models import is_ctranslate2

    saved_models = [path for _, _, path in entries if not is_ctranslate2(path)]
    if not saved_models:
        return
    intra_op = threads.intra_op
    if intra_op is None:
        intra_op = decoding_intra_op_threads(max_calls * max(_parallel_searches(path) for path in saved_models))
    from app.runtime.quiet_tensorflow import import_tensorflow

    import_tensorflow()
    from app.runtime.threads import describe_cpu_threads, set_cpu_threads

    set_cpu_threads(intra_op, threads.inter_op)
    log.info("worker: %s", describe_cpu_threads())


def _load(version, path, threads, max_calls, warmup_iterations):
    """One version, loaded and warmed up: each of its warm-up requests run
    `warmup_iterations` times (0: none, `--enable_model_warmup=false`)."""
    from app.runtime.decoding_threads import cpu_cores
    from app.serving.models import is_ctranslate2, load_version

    if is_ctranslate2(path):
        intra_op = threads.intra_op or max(1, cpu_cores() // max_calls)
        log.info("version %s: CTranslate2 with %d threads per call", version, intra_op)
        loaded = load_version(version, path, intra_threads=intra_op)
    else:
        loaded = load_version(version, path)
    if warmup_iterations:
        loaded.warm_up(warmup_iterations)
    return loaded


def _parallel_searches(path):
    """The searches one call of the export runs side by side (export_info.json; 1 where it
    does not say)."""
    from app.export.export_info import read_export_info

    try:
        return int(read_export_info(path).get("parallel_searches", 1))
    except (OSError, ValueError):
        return 1


if __name__ == "__main__":
    descriptor, intra_op, inter_op, max_calls, warmup_iterations = sys.argv[1:]
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s", stream=sys.stderr)
    _child_main(
        multiprocessing.connection.Connection(int(descriptor)),
        CpuThreads(None if intra_op == AUTO else int(intra_op), int(inter_op)), int(max_calls),
        int(warmup_iterations),
    )
