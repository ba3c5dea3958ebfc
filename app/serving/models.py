"""The versions of one model under its base path, loaded and hot-reloaded as TF Serving does.

    base_path/1/, base_path/2/, ...     numeric directories are versions
    base_path/.tmp-2-1234/              anything else is ignored (app/export/saved_model.py writes there)

Every --file_system_poll_wait_seconds the server loads what `ModelManager.to_load()` names:
the versions on disk its `VersionPolicy` (model_config.py) asks for, the newest by default.
A new version is loaded and warmed up beside the ones being served; only then does it
become AVAILABLE, and only then are versions the policy no longer asks for unloaded (TF
Serving's availability-preserving policy). A request holds its `LoadedVersion` until it is
answered, so unloading never fails one in flight. Version labels ("stable" -> 3) name
loaded versions (`set_labels`). Status states and messages follow TF Serving's
GetModelStatus; where the base path holds no version at all, the 404 answers add what to
do (`no_export_yet`).
"""

import dataclasses
import logging
import math
import os
import re
import time

import numpy as np

from app.export.locate import DEFAULT_EXPORT_BASE
from app.export.locate import versions
from app.serving.model_config import VersionPolicy
from app.serving.rest_api import DEFAULT_SIGNATURE, ServingError, TensorSpec, signature_def_json

log = logging.getLogger("app.serve")

START, LOADING, AVAILABLE, UNLOADING, END = "START", "LOADING", "AVAILABLE", "UNLOADING", "END"
# The most a failed version's retry interval grows: 64 times --load_retry_interval_micros.
MAX_BACKOFF = 64
# A version whose process dies again within this many seconds of dying waits the retry
# interval before its next load (`ModelManager._forget_dead`).
DEATH_WINDOW_SECONDS = 600.0


@dataclasses.dataclass
class VersionStatus:
    """One line of `model_version_status`."""

    state: str = START
    error_code: str = "OK"
    error_message: str = ""
    failed_loads: int = 0

    def to_json(self, version):
        return {
            "version": str(version),
            "state": self.state,
            "status": {"error_code": self.error_code, "error_message": self.error_message},
        }


class LoadedVersion:
    """One SavedModel version: its signatures, their specs and their metadata JSON.

    Loaded as TF Serving's C++ loader loads it, into a graph and a session
    (`tf.compat.v1.saved_model.load`), not with `tf.saved_model.load`: the same graph and
    kernels run (the answers are the same), but a second version in a process then costs
    250 MB rather than 385 MB (the tests' tiny export, docs/local-server.md#memory), since no
    Python function object is rebuilt for each of the export's functions.
    """

    def __init__(self, version, path):
        import tensorflow as tf
        import tensorflow_text  # noqa: F401  (registers TF-Text's ops, as TF Serving has them)

        self.version = version
        self.path = path
        graph = tf.Graph()
        config = tf.compat.v1.ConfigProto(  # the pools set_cpu_threads sized for this process
            intra_op_parallelism_threads=tf.config.threading.get_intra_op_parallelism_threads(),
            inter_op_parallelism_threads=tf.config.threading.get_inter_op_parallelism_threads(),
        )
        self._session = tf.compat.v1.Session(graph=graph, config=config)
        from tensorflow.python.util import deprecation

        with graph.as_default(), deprecation.silence():  # "use tf.saved_model.load": not for this
            meta_graph = tf.compat.v1.saved_model.loader.load(self._session, ["serve"], path)
        # The Python graph keeps a Python object for each function of the library (660 for
        # an export of the default model's size) beside the runtime's own copy, which is all
        # the session runs: 0.17 GB of a version's 0.55 GB (docs/lab-notebook/
        # 2026-11-28-one-worker-for-every-model.md). Nothing is added to the graph from here
        # on (finalize), so nothing looks them up.
        graph._functions.clear()  # noqa: SLF001 (a private registry; TensorFlow is pinned, tests cover it)
        graph.finalize()
        # "__saved_model_init_op" and the like are the loader's, not the model's.
        signatures = {name: s for name, s in meta_graph.signature_def.items() if not name.startswith("__")}
        self.signatures = {name: None for name in signatures}
        self._feeds = {name: {key: info.name for key, info in s.inputs.items()} for name, s in signatures.items()}
        self._fetches = {name: {key: info.name for key, info in s.outputs.items()} for name, s in signatures.items()}
        self.inputs = {name: {key: _spec_of_info(info) for key, info in s.inputs.items()}
                       for name, s in signatures.items()}
        self.outputs = {name: {key: _spec_of_info(info) for key, info in s.outputs.items()}
                        for name, s in signatures.items()}
        self.signature_def = signature_def_json(signature_dicts(meta_graph))
        # Nothing here holds a message of the MetaGraphDef (a sub-message keeps its whole
        # parent, the graph's function library of tens of MB parsed): it goes now, and the
        # heap it took back to the system.
        del meta_graph, signatures
        _give_back_freed_memory()

    def input_specs(self, signature_name):
        if signature_name not in self.signatures:
            raise ServingError(f'Serving signature name: "{signature_name}" not found in signature def')
        return self.inputs[signature_name]

    def run(self, signature_name, inputs):
        """Calls a signature on arrays; returns name -> np.ndarray. Blocks (call from a thread)."""
        import tensorflow as tf

        specs, feeds = self.inputs[signature_name], self._feeds[signature_name]
        feed = {feeds[name]: np.asarray(value, dtype=specs[name].dtype) for name, value in inputs.items()}
        try:
            return self._session.run(self._fetches[signature_name], feed)
        except tf.errors.InvalidArgumentError as error:
            # The model rejected the input (e.g. translate_with_options' options disagree).
            raise ServingError(_first_line(error.message)) from None

    def close(self):
        """Frees the session (its variables and kernels) and gives the heap back: the
        version was unloaded from a worker that goes on serving others."""
        self._session.close()
        self._session = None
        _give_back_freed_memory()

    def warm_up(self, iterations=1):
        """Runs the requests of the SavedModel's warm-up file, each `iterations` times, so
        that no client's request is the one that builds a signature's executor (warmup.py
        says the rules, TF Serving's). No file: nothing to run, as in TF Serving.

        Raises:
            WarmupError: the file cannot be read, or one of its requests failed (the
                version must not load, as in TF Serving).
        """
        from app.serving.tensor_proto import request_arrays
        from app.serving.warmup import WarmupError, read_warmup_requests, warmup_path

        requests = read_warmup_requests(self.path)
        if requests is None:
            log.info("version %s: no warm-up file at %s", self.version, warmup_path(self.path))
            return
        started = time.monotonic()
        for number, request in enumerate(requests, start=1):
            signature_name = request.model_spec.signature_name or DEFAULT_SIGNATURE
            try:
                inputs = request_arrays(request.inputs, self.path, self.input_specs(signature_name))
                for _ in range(iterations):
                    self.run(signature_name, inputs)
            except ServingError as error:
                raise WarmupError(
                    f"{warmup_path(self.path)}: warm-up request {number} ({signature_name}) failed: {error.message}"
                ) from None
        log.info("version %s: warmed up by %d requests in %.1f s", self.version, len(requests),
                 time.monotonic() - started)


def is_ctranslate2(path):
    """Whether the version directory `path` holds a CTranslate2 export (app/export/ctranslate2.py)."""
    return os.path.exists(os.path.join(path, "model.bin")) and not os.path.exists(os.path.join(path, "saved_model.pb"))


def load_version(version, path, intra_threads=0):
    """The version in directory `path`, in this process: a CTranslate2 export (model.bin) or a
    SavedModel (saved_model.pb), with the same interface. The server loads them in its worker
    process (worker_process.py); this is what that process runs."""
    if is_ctranslate2(path):
        from app.serving.ctranslate2_version import CTranslate2Version

        return CTranslate2Version(version, path, intra_threads=intra_threads)
    return LoadedVersion(version, path)


def _spec_of_info(info):
    """The `TensorSpec` of a signature's TensorInfo (-1 sizes as None, as TensorFlow's specs)."""
    import tensorflow as tf

    dtype = tf.as_dtype(info.dtype)
    shape = None if info.tensor_shape.unknown_rank else tuple(
        None if dim.size < 0 else dim.size for dim in info.tensor_shape.dim)
    return TensorSpec(np.dtype(np.object_ if dtype == tf.string else dtype.as_numpy_dtype), shape)


# Lines of a TensorFlow error message that say where, not what.
_NOISE = re.compile(r"Graph execution error:|Detected at node |<stack traces unavailable>|\s*\[\[|\s*$")


def _first_line(message):
    """The line of an error message that says what went wrong (e.g. "assertion failed: [...]")."""
    lines = [line for line in message.splitlines() if not _NOISE.match(line)]
    return lines[0].strip() if lines else "the model rejected the request"


def saved_model_signatures(path):
    """`{name: SignatureDef as a dict}` of the SavedModel in `path`, as TF Serving's metadata
    endpoint writes each (proto JSON, defaults included): `rest_api.signature_def_json`'s input."""
    from tensorflow.core.protobuf import saved_model_pb2

    saved_model = saved_model_pb2.SavedModel()
    with open(os.path.join(path, "saved_model.pb"), "rb") as f:
        saved_model.ParseFromString(f.read())
    return signature_dicts(next(m for m in saved_model.meta_graphs if "serve" in m.meta_info_def.tags))


def signature_dicts(meta_graph):
    """`saved_model_signatures` of a MetaGraphDef already read."""
    from google.protobuf import json_format

    return {
        name: json_format.MessageToDict(
            signature, always_print_fields_with_no_presence=True, preserving_proto_field_name=True
        )
        for name, signature in meta_graph.signature_def.items()
    }


def _give_back_freed_memory():
    """Collects garbage, then asks glibc to return free heap pages to the system (a no-op
    where there is no glibc): a load parses and drops protos of tens of MB."""
    import ctypes
    import gc

    gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


def no_export_yet(base_path):
    """What to do where `base_path` holds no version: "no model exported under PATH yet: run
    python export.py" (with its --model-base-path where that is not the default)."""
    command = "python export.py"
    if os.path.normpath(base_path) != DEFAULT_EXPORT_BASE:
        command += f" --model-base-path {base_path}"
    return f"no model exported under {base_path} yet: run {command}"


def version_directories(base_path):
    """`{version: directory name}` under `base_path`, the name as it is on disk ("007" for
    version 7), by the rule every reader of an export base follows (`app.export.locate`)."""
    return {version: os.path.basename(directory) for version, directory in versions(base_path).items()}


def list_versions(base_path):
    """The integer versions under `base_path`, oldest first."""
    return list(version_directories(base_path))


def check_labels(model_name, labels, available, current, allow_unavailable=False):
    """Whether the labels (label -> version) of model `model_name` may point at their
    versions, by TF Serving's rule (server_core.cc, `UpdateModelVersionLabelMap`): a label
    may name only an `available` version, except, with `allow_unavailable`
    (--allow_version_labels_for_unavailable_models), a label that does not already name
    another version in `current` (the model's labels now).

    Raises:
        ServingError: FAILED_PRECONDITION naming the first version that may not be labelled.
    """
    for label, version in sorted(labels.items()):
        moves = label in current and current[label] != version
        if version in available or (allow_unavailable and not moves):
            continue
        raise ServingError(
            f"Request to assign label to version {version} of model {model_name}, which is not currently "
            "available for inference", code="FAILED_PRECONDITION",
        )


class ModelManager:
    """The versions of the model `name` under `base_path`.

    Args:
        policy: which versions on disk to keep loaded (`VersionPolicy`). TF Serving's
            default, `latest { num_versions: 1 }`: an older version stops being
            addressable once a newer one is available.
        max_num_load_retries: a version that fails to load is retried on later polls, at
            most this many times (TF Serving's flag of the same name). A version whose
            directory goes away is forgotten: created again, it is tried afresh.
        load_retry_interval_seconds: the least time between two tries of a version that
            failed (TF Serving's --load_retry_interval_micros, one minute by default):
            time for a version still being copied into place to be complete. It doubles
            with each further failure (`retry_wait`).
        loader: `(version, path) -> LoadedVersion` or what has its interface; the server's
            loads every version in one worker process instead (core.py, worker_process.py).
        clock: seconds, for the retry interval; tests may replace it.
    """

    def __init__(
        self,
        name,
        base_path,
        policy=VersionPolicy(),
        max_num_load_retries=5,
        loader=LoadedVersion,
        load_retry_interval_seconds=60.0,
        clock=time.monotonic,
    ):
        self.name = name
        self.base_path = base_path
        self.policy = policy
        self.labels = {}  # label -> version (`set_labels`)
        self.max_num_load_retries = max_num_load_retries
        self.load_retry_interval_seconds = load_retry_interval_seconds
        self._loader = loader
        self._clock = clock
        self.loaded = {}  # version -> LoadedVersion, servable
        self._aspired = set()  # the versions on disk the policy asked for at the last poll
        self.status = {}  # version -> VersionStatus, every version ever seen
        self._failed_at = {}  # version -> clock time of its last failed load
        self._deaths = {}  # version -> clock times its process died (`_forget_dead`)
        self._directories = None  # version -> directory name, at the last look on disk
        self._load_seconds = {}  # version -> how long its last load took, for Retry-After
        self._base_path_problem = None  # what was wrong with base_path at the last poll
        self.versions_on_disk = 0  # how many version directories the last poll found

    def retry_wait(self, failed_loads):
        """Seconds from a version's last failed load to its next try: the retry interval,
        doubled with each failure (at most `MAX_BACKOFF` times), so that a version that
        keeps failing is tried ever more rarely."""
        return self.load_retry_interval_seconds * min(2 ** max(failed_loads - 1, 0), MAX_BACKOFF)

    def to_load(self, look_on_disk=True):
        """The (version, path) pairs to load now, newest first. Without `look_on_disk`
        (polling is off), only versions already known: those whose process died, say."""
        self._forget_dead()
        if look_on_disk or self._directories is None:
            self._check_base_path()
            self._directories = version_directories(self.base_path)
        directories = self._directories
        self.versions_on_disk = len(directories)
        for version in [v for v in self._failed_at if v not in directories]:
            del self._failed_at[version]  # gone from disk: a new one of that number starts afresh
            self.status[version].failed_loads = 0
        aspired = self.policy.aspired(list(directories))
        self._aspired = set(aspired)
        pending = []
        for version in reversed(aspired):
            status = self.status.setdefault(version, VersionStatus())
            if version in self.loaded or status.state == LOADING:
                continue
            if status.failed_loads > self.max_num_load_retries:
                continue
            failed_at = self._failed_at.get(version)
            if failed_at is not None and self._clock() - failed_at < self.retry_wait(status.failed_loads):
                continue
            pending.append((version, os.path.join(self.base_path, directories[version])))
        return pending

    def _forget_dead(self):
        """Versions whose process died (worker_process.py) stop being served and are
        loaded again at once: a process killed for memory is not the version's fault. Only
        a version that dies again within `DEATH_WINDOW_SECONDS` waits the retry interval,
        doubled with each further death, so that one that kills its process on every load
        does not take the machine with it. Until it is back, requests for it are told to
        retry (`reviving`)."""
        now = self._clock()
        for version, loaded in list(self.loaded.items()):
            if getattr(loaded, "alive", True):
                continue
            del self.loaded[version]
            deaths = [t for t in self._deaths.get(version, []) if now - t < DEATH_WINDOW_SECONDS] + [now]
            self._deaths[version] = deaths
            status = self.status[version]
            status.state, status.error_code = START, "UNAVAILABLE"  # to_load takes it up again
            status.error_message = f"its process ended unexpectedly; loading it again ({len(deaths)} in 10 min)"
            if len(deaths) > 1:
                self._failed_at[version] = now
                status.failed_loads = len(deaths) - 1
            log.warning("model %s version %s: %s", self.name, version, status.error_message)

    def reviving(self, version=None):
        """The version (the newest reviving one for None) being loaded again after its
        process died, or None."""
        candidates = [v for v, deaths in self._deaths.items() if deaths and v not in self.loaded
                      and v in self._aspired and self.status[v].error_code == "UNAVAILABLE"]
        if version is not None:
            return version if version in candidates else None
        return max(candidates, default=None)

    def _check_base_path(self):
        """Logs, once per change, a base path that is missing or not a directory (as TF
        Serving does); the versions already loaded stay served."""
        if os.path.isdir(self.base_path):
            problem = None
        elif os.path.exists(self.base_path):
            problem = "is not a directory"
        else:
            problem = "does not exist"
        if problem and problem != self._base_path_problem:
            log.warning("the base path %s of model %s %s; serving what is loaded", self.base_path, self.name, problem)
        elif self._base_path_problem and not problem:
            log.info("the base path %s of model %s is back", self.base_path, self.name)
        self._base_path_problem = problem

    def load(self, version, path):
        """Loads and warms up one version (blocking); then `publish` it."""
        started = time.monotonic()
        loaded = self._loader(version, path)
        loaded.warm_up()
        self._load_seconds[version] = time.monotonic() - started
        return loaded

    def staying(self, wanted):
        """The loaded versions that stay served while the versions `wanted` load: those the
        policy asks for; all of them where it asks for none that is loaded or wanted (they
        are served until one it asks for is)."""
        aspired_and_loaded = [version for version in self.loaded if version in self._aspired]
        return aspired_and_loaded if aspired_and_loaded or wanted else list(self.loaded)

    def move(self, loaded):
        """Serves `loaded` in place of the loaded version of its number (the same version in
        a new worker process); requests in flight finish on the one they hold."""
        self.loaded[loaded.version] = loaded

    def start_loading(self, version):
        self.status[version].state = LOADING
        log.info("model %s version %s is loading", self.name, version)

    def unload_removed(self):
        """Unloads versions whose directories are gone, when a newer-on-disk one is served."""
        self._unload_extra()

    def publish(self, loaded):
        """Makes a loaded version servable, then unloads versions the policy no longer asks for."""
        self.loaded[loaded.version] = loaded
        self.status[loaded.version] = VersionStatus(AVAILABLE)
        self._failed_at.pop(loaded.version, None)
        log.info("model %s version %s is AVAILABLE (%s)", self.name, loaded.version, loaded.path)
        self._unload_extra()

    def failed(self, version, error):
        status = self.status[version]
        type_name = getattr(error, "type_name", type(error).__name__)  # as raised in the version's process
        status.state, status.error_code = END, "DEADLINE_EXCEEDED" if type_name == "LoadTimeout" else "UNKNOWN"
        status.error_message = f"{type_name}: {_first_line(str(error))}"
        status.failed_loads += 1
        self._failed_at[version] = self._clock()
        log.warning("model %s version %s failed to load: %s", self.name, version, status.error_message)

    def _unload_extra(self):
        """Unloads versions the policy no longer asks for, once one it asks for is served."""
        keep = self._aspired & set(self.loaded)
        if not keep:
            return  # nothing newer is servable yet: keep serving what there is
        for version in sorted(self.loaded):
            if version not in keep:
                # Requests in flight hold their own reference; the version's process ends
                # with the last (worker_process.py).
                del self.loaded[version]
                self.status[version] = VersionStatus(END)
                log.info("model %s version %s unloaded", self.name, version)

    def latest(self):
        return self.loaded[max(self.loaded)] if self.loaded else None

    def not_found(self, message):
        """A 404 `ServingError` with TF Serving's `message`, and what to do where nothing is
        loaded because the base path holds no version (nothing was exported yet)."""
        if not self.loaded and not self.versions_on_disk:
            message = f"{message}: {no_export_yet(self.base_path)}"
        return ServingError(message, status=404)

    def get(self, version=None, label=None):
        """The version to serve: `version`, the one `label` names, or the newest; a 404
        error where there is none, a 503 (with Retry-After) where it is being loaded again
        after its process died, and TF Serving's 400 for a label it does not have."""
        if label is not None:
            if label not in self.labels:
                raise ServingError(f"Unrecognized servable version label: {label}")
            version = self.labels[label]
        reviving = self.reviving(version)
        if version is None:
            loaded = self.latest()
            if loaded is not None and (reviving is None or loaded.version > reviving):
                return loaded
            if reviving is None:
                raise self.not_found(f"Servable not found for request: Latest({self.name})")
        elif version in self.loaded:
            return self.loaded[version]
        elif reviving is None:
            raise self.not_found(f"Servable not found for request: Specific({self.name}, {version})")
        wait = max(1, math.ceil(self._load_seconds.get(reviving, 1.0)))
        raise ServingError(
            f"version {reviving} of model {self.name} is being loaded again after its process ended; "
            f"retry in {wait} s", status=503, retry_after=wait,
        )

    def set_labels(self, labels):
        """Points the labels (label -> version) at their versions (the module's `check_labels` first)."""
        if labels != self.labels:
            log.info("model %s labels: %s", self.name,
                     ", ".join(f"{label} -> {version}" for label, version in sorted(labels.items())) or "none")
        self.labels = dict(labels)

    def unload_all(self):
        """Stops serving every version (the model left the config); requests in flight finish."""
        for version in sorted(self.loaded):
            del self.loaded[version]
            self.status[version] = VersionStatus(END)
            log.info("model %s version %s unloaded", self.name, version)

    def status_json(self, version=None):
        """GetModelStatus's response, newest version first (get_model_status_impl.cc: every
        version ever seen, or `version`)."""
        if version is not None:
            if version not in self.status:
                raise ServingError(f"Could not find version {version} of model {self.name}", status=404)
            return {"model_version_status": [self.status[version].to_json(version)]}
        if not self.status:
            raise self.not_found(f"Could not find any versions of model {self.name}")
        return {"model_version_status": [self.status[v].to_json(v) for v in sorted(self.status, reverse=True)]}

    def metadata_json(self, version=None):
        loaded = self.get(version)
        return {
            "model_spec": {"name": self.name, "signature_name": "", "version": str(loaded.version)},
            "metadata": {"signature_def": loaded.signature_def},
        }
