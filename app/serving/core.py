"""What both APIs serve from: the models, their loading and polling, the model config, the batcher.

    core = ServerCore(ModelSet(make_manager), batcher, initial_models, poll_seconds=1.0,
                      config_file="models.config", config_poll_seconds=60)
    await core.start()          # loads the first versions (the servers listen after)
    await core.reload_config(read_model_config("models.config"))   # HandleReloadConfigRequest
    await core.stop()

The REST server (server.py) and the gRPC one (grpc_api.py) are two doors to one core, as
TF Serving's are to its ServerCore: the same versions, the same batches. Every change to
what is loaded (a poll for new versions, a config reload) runs under one lock, one at a
time, in the event loop; the loads themselves run in a thread, while requests are served.
"""

import asyncio
import concurrent.futures
import logging
import math
import time

from app.serving.model_config import ModelConfigError, check_config, check_platforms, read_model_config
from app.serving.models import LOADING, no_export_yet
from app.serving.rest_api import ServingError

log = logging.getLogger("app.serve")

# How long after a worker for what is served failed to start the next is tried.
COMPACTION_RETRY_SECONDS = 60.0
# The memory a worker may hold for versions it unloaded before a fresh one takes what is
# served (--reclaim_unloaded_memory_mb): about two versions of the default model's size.
DEFAULT_RECLAIM_BYTES = 1024 * 2**20


class ServerCore:
    """The served models and what keeps them current (see the module docstring).

    Args:
        models: the `ModelSet`, empty until `start`.
        batcher: the `Batcher` every model call goes through.
        initial_models: the `ServedModel`s to serve at start (the flags' one, or the config file's).
        poll_seconds: how often to look for new versions (0: at start only, as TF Serving).
        config_file: the model config file to re-read, or None.
        config_poll_seconds: how often to re-read it (0: never, as TF Serving's default).
        start_worker: `[(model name, version, path), ...] -> WorkerProcess` (worker_process.py):
            every served version in one worker, which loads each new version beside the
            others and unloads what goes; replaced by a fresh one only to give back what
            unloaded versions left (`_reclaim`). None: each manager loads its versions with
            its own loader (tests' fake models).
        load_timeout_seconds: how long a load may take before its version fails
            (DEADLINE_EXCEEDED) and the change lock is let go (None: no limit).
        reclaim_bytes: what the worker may hold for unloaded versions (`_reclaim`).
    """

    def __init__(self, models, batcher, initial_models, poll_seconds=1.0, config_file=None, config_poll_seconds=0.0,
                 start_worker=None, load_timeout_seconds=None, reclaim_bytes=DEFAULT_RECLAIM_BYTES):
        self.models = models
        self.start_worker = start_worker
        self.batcher = batcher
        self.initial_models = None if initial_models is None else tuple(initial_models)
        self.poll_seconds = poll_seconds
        self.config_file = config_file
        self.config_poll_seconds = config_poll_seconds
        self._changing = None  # asyncio.Lock: one poll or reload at a time
        self._loading = None  # the thread that loads versions
        self._tasks = []
        self._config_error = None  # what the config file's last poll failed with, logged once
        self._compaction_failed_at = -math.inf  # when a worker for what is served last failed to start
        self.load_timeout_seconds = load_timeout_seconds
        self.reclaim_bytes = reclaim_bytes
        self._worker = None  # the worker's handle new versions load into (worker_process.py)

    async def start(self):
        """Loads the first versions, then polls in the background."""
        self._changing = asyncio.Lock()
        self._loading = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="load")
        self.batcher.start()
        await self.reload_config(self.initial_models)
        polling = self.poll_seconds > 0  # TF Serving's 0: the versions there at start, no later ones
        for manager in self.models.managers.values():
            if not manager.loaded and not manager.versions_on_disk:
                log.warning("%s (%s)", no_export_yet(manager.base_path),
                            "polling for it" if polling else "polling is off: restart the server then")
            elif not manager.loaded:
                log.warning("no servable version of %s under %s %s", manager.name, manager.base_path,
                            "yet; polling" if polling else "and polling is off")
        # Without polling for new versions, a version whose process died is still loaded
        # again: the poll then looks for nothing new on disk.
        self._tasks.append(asyncio.create_task(self._every(self.poll_seconds or 1.0, self.poll)))
        if self.config_file and self.config_poll_seconds > 0:
            self._tasks.append(asyncio.create_task(self._every(self.config_poll_seconds, self.reread_config_file)))

    async def stop(self):
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self.batcher.stop()
        for manager in self.models.managers.values():
            for loaded in list(manager.loaded.values()):
                if hasattr(loaded, "close"):  # a version in a worker process: end the worker now
                    loaded.close()
        if self._worker is not None:
            self._worker.stop()
        # A version still loading is not waited for: it would be thrown away. (Its thread
        # cannot be stopped; the command exits without joining it.)
        self._loading.shutdown(wait=False, cancel_futures=True)

    async def _every(self, seconds, step):
        while True:
            await asyncio.sleep(seconds)
            try:
                await step()
            except Exception:  # a bad poll must not stop later ones
                log.exception("%s failed", step.__name__)

    async def poll(self):
        """Loads what the served models want (new versions, where polling is on; versions
        whose process died, always)."""
        async with self._changing:
            await self._load_wanted(list(self.models.managers.values()), look_on_disk=self.poll_seconds > 0)

    async def _load_wanted(self, managers, look_on_disk=True):
        """Loads what `managers` (the models that will be served) want, publishes it, and
        unloads what they no longer do."""
        wanted = [(manager, version, path) for manager in managers for version, path in manager.to_load(look_on_disk)]
        for manager, version, _ in wanted:
            manager.start_loading(version)
        if self.start_worker is None:
            await self._load_each(wanted)
        elif wanted:
            await self._load_into_worker(managers, wanted)
        for manager in managers:
            manager.unload_removed()
        if self.start_worker is not None:
            await self._reclaim(managers)

    async def _load_each(self, wanted):
        loop = asyncio.get_running_loop()
        for manager, version, path in wanted:
            try:
                loaded = await loop.run_in_executor(self._loading, manager.load, version, path)
            except Exception as error:
                manager.failed(version, error)
            else:
                manager.publish(loaded)

    def _live_worker(self):
        """The worker new versions load into, None where there is none that can take them
        (none yet, or it died, or a load in it timed out)."""
        worker = self._worker
        if worker is None or worker.retiring or worker.channel.died or worker.channel.stopped:
            return None
        return worker

    async def _load_into_worker(self, managers, wanted):
        """Loads the wanted versions, and only them, into the serving worker, whose versions
        keep answering meanwhile; into a fresh worker where there is no live one."""
        worker = self._live_worker()
        if worker is None:
            await self._load_in_new_worker(managers, wanted)
            return
        loop = asyncio.get_running_loop()
        entries = [(manager.name, version, path) for manager, version, path in wanted]
        try:
            versions = await loop.run_in_executor(self._loading, worker.load, entries, self.load_timeout_seconds)
        except Exception as error:  # the load timed out, or the worker died under it
            log.error("loading %s: %s", ", ".join(f"{m.name} version {v}" for m, v, _ in wanted),
                      getattr(error, "message", error))
            for manager, version, _ in wanted:
                manager.failed(version, error)
            return
        for manager, version, _ in wanted:
            loaded = versions[(manager.name, version)]
            if isinstance(loaded, Exception):
                manager.failed(version, loaded)
            else:
                manager.publish(loaded)

    async def _load_in_new_worker(self, managers, wanted):
        """A new worker holding the wanted versions and those that stay served; it takes
        their requests over once it is loaded and warm. The old worker ends when its last
        version is dropped (worker_process.py)."""
        wanted_by = {}
        for manager, version, _ in wanted:
            wanted_by.setdefault(manager.name, set()).add(version)
        staying = [(manager, version, loaded.path) for manager in managers
                   for version, loaded in manager.loaded.items()
                   if version in manager.staying(wanted_by.get(manager.name, ()))]
        worker = await self._start_worker(wanted + staying)
        if worker is None:
            return
        for manager, version, _ in wanted:
            loaded = worker.versions[(manager.name, version)]
            if isinstance(loaded, Exception):
                manager.failed(version, loaded)
            else:
                manager.publish(loaded)
        for manager, version, _ in staying:
            loaded = worker.versions[(manager.name, version)]
            if not isinstance(loaded, Exception):
                manager.move(loaded)

    async def _reclaim(self, managers):
        """A fresh worker takes exactly the served versions, and the old one ends with its
        last request, giving its memory back, where: the served versions are spread over
        several workers (a version that moved after a timed-out load, say), the serving
        worker takes no more loads, or it holds more than `reclaim_bytes` for versions it
        unloaded (`_Handle.held_for_unloaded`). Otherwise nothing is loaded again: adding
        a version loads that version only."""
        served = [(manager, version, loaded) for manager in managers for version, loaded in manager.loaded.items()]
        if not served:
            self._worker = None  # no version left: the worker ends (once no request holds one)
            return
        workers = {id(loaded.worker): loaded.worker for _, _, loaded in served}
        worker = self._live_worker()
        held = worker.held_for_unloaded() if worker is not None else 0
        if worker is not None and len(workers) == 1 and id(worker) in workers and held <= self.reclaim_bytes:
            return
        if worker is None and len(workers) == 1:
            only = next(iter(workers.values()))
            if not (only.retiring or only.channel.died or only.channel.stopped):
                self._worker = only
                return
        if time.monotonic() - self._compaction_failed_at < COMPACTION_RETRY_SECONDS:
            return  # a worker that could not start a moment ago: not again at every poll
        why = (f"its worker holds {held / 2**20:.0f} MB for versions it unloaded" if held > self.reclaim_bytes
               else f"{len(workers)} workers serve them")
        log.info("moving %d versions to a fresh worker: %s", len(served), why)
        fresh = await self._start_worker([(manager, version, loaded.path) for manager, version, loaded in served])
        if fresh is None:
            self._compaction_failed_at = time.monotonic()
            return
        for manager, version, _ in served:
            loaded = fresh.versions.get((manager.name, version))
            if loaded is not None and not isinstance(loaded, Exception):
                manager.move(loaded)
            else:  # it stays where it is served; trying again at every poll would churn
                self._compaction_failed_at = time.monotonic()

    async def _start_worker(self, entries):
        """A `WorkerProcess` of `entries` ((manager, version, path) each), which becomes the
        worker later versions load into; None where it ended before saying how its loads
        went (its error logged)."""
        loop = asyncio.get_running_loop()
        try:
            worker = await loop.run_in_executor(
                self._loading, self.start_worker, [(manager.name, version, path) for manager, version, path in entries]
            )
        except Exception as error:
            log.error("a worker process failed: %s", error)
            for manager, version, _ in entries:
                if manager.status.get(version) is not None and manager.status[version].state == LOADING:
                    manager.failed(version, error)
            return None
        self._worker = worker.worker  # the handle, not the WorkerProcess: its `versions` would pin them
        return worker

    async def reload_config(self, models):
        """Serves `models` (`ServedModel`s; None, an empty config file, changes nothing) by
        TF Serving's `ServerCore::ReloadConfig` (server_core.cc), step by step: its checks
        (`check_config`), the labels (`ModelSet.set_labels`), the platforms
        (`check_platforms`), then loads what is new, swaps it in and unloads what went.

        Raises:
            ServingError: INVALID_ARGUMENT for a config TF Serving refuses, FAILED_PRECONDITION
                for a label on a version that is not available; nothing is changed then.
        """
        if models is None:
            log.info("Taking no action for empty config.")
            return
        async with self._changing:
            try:
                check_config(models, self.models.config)
                self.models.set_labels(models)
                check_platforms(models)
            except ModelConfigError as error:
                raise ServingError(str(error)) from None
            change = self.models.change_to(models)
            await self._load_wanted(change.to_poll)
            changed = models != self.models.config
            self.models.commit(change)
            if changed:
                log.info("serving %s", "; ".join(
                    f"{m.name} ({m.policy.describe()}) from {m.base_path}" for m in self.models.config) or "no model")

    async def reread_config_file(self):
        """Reads the config file and serves it, at every poll, changed or not, as TF Serving
        does (server.cc, `PollFilesystemAndReloadConfig`): a label refused because its version
        was not available yet is set at the first poll after it is. A file that cannot be
        read or served is logged (once until it changes, or its error does) and the config
        before it stays served."""
        try:
            models = read_model_config(self.config_file)
            await self.reload_config(models)
        except (ModelConfigError, ServingError) as error:
            message = getattr(error, "message", str(error))
            if message != self._config_error:
                log.error("model config %s not applied, still serving the one before: %s", self.config_file, message)
            self._config_error = message
        else:
            if self._config_error:
                log.info("model config %s applied", self.config_file)
            self._config_error = None
