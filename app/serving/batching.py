"""Dynamic batching: concurrent requests for one signature of one version become one call.

    batcher = Batcher(BatchingParameters(max_batch_size=32, batch_timeout_micros=5000))
    outputs = await batcher.run(version, "serving_default", inputs)   # in the event loop

A free worker takes the queue whose oldest request has waited longest, waits until that
request is `batch_timeout_micros` old or `max_batch_size` rows are queued, concatenates up
to `max_batch_size` rows along dimension 0 and calls the model once in a thread; each
request gets its own rows of every output back. While the workers are busy, requests
queue up, so the busier the server, the larger the batches.

Requests are merged only when the model would give each the same answer alone:
same version, same signature, and equal values of every non-string input (for
`translate_with_options`: the same alpha and max_extra_length; the export would take
them per sentence, but this rule needs to know nothing of a signature's inputs). A
request whose own rows disagree on such an input, or whose inputs disagree on the batch
size, runs alone. String inputs may differ in length: they are [B] string tensors,
tokenized and padded inside the graph after batching.

The parameters are TF Serving's (serving/batching_parameters.txt).
"""

import asyncio
import concurrent.futures
import dataclasses
import itertools
import re
import time

import numpy as np

from app.serving.rest_api import ServingError


@dataclasses.dataclass(frozen=True)
class BatchingParameters:
    """TF Serving's BatchingParameters, the fields this server uses."""

    # The most rows in one model call; a larger single request runs alone.
    max_batch_size: int = 32
    # How long the oldest queued request waits for others before its batch runs.
    batch_timeout_micros: int = 5000
    # Model calls that may run at once (threads).
    num_batch_threads: int = 1
    # Queued batches (of max_batch_size rows) beyond which requests are refused (503).
    max_enqueued_batches: int = 100

    def __post_init__(self):
        for name, least in (("max_batch_size", 1), ("batch_timeout_micros", 0), ("num_batch_threads", 1),
                            ("max_enqueued_batches", 1)):
            value = getattr(self, name)
            if not isinstance(value, int) or value < least:
                raise ValueError(f"batching parameter {name} must be an integer >= {least}, got {value!r}")

    @classmethod
    def from_file(cls, path):
        """Reads a TF Serving batching parameters text proto (`name { value: N }` lines).

        Fields TF Serving knows but this server does not use (`allowed_batch_sizes`, ...)
        are skipped; anything else, a misspelt field or a value that is not a whole
        number, is a ValueError naming it, as TF Serving refuses such a file.
        """
        with open(path, encoding="utf-8") as f:
            text = re.sub(r"#.*", "", f.read())
        fields = {field.name for field in dataclasses.fields(cls)}
        values = {}
        entry = re.compile(r"\s*(\w+)\s*(?:\{\s*value\s*:\s*([^\s}]+)\s*\}|:\s*(\S+))")
        position = 0
        while text[position:].strip():
            match = entry.match(text, position)
            if not match:
                raise ValueError(f"{path}: cannot read {text[position:].strip()[:40]!r}")
            name, wrapped, plain = match.groups()
            position = match.end()
            if name in fields:
                if wrapped is None:  # TF Serving's fields are wrapped integers
                    raise ValueError(f"{path}: write {name} {{ value: {plain} }}, as TF Serving reads it")
                if not re.fullmatch(r"-?\d+", wrapped):
                    raise ValueError(f"{path}: {name} must be a whole number, got {wrapped!r}")
                values[name] = int(wrapped)
            elif name not in TF_SERVING_ONLY_FIELDS:
                raise ValueError(f"{path}: unknown batching parameter {name!r}; known: {', '.join(sorted(fields))}")
        try:
            return cls(**values)
        except ValueError as error:
            raise ValueError(f"{path}: {error}") from None


# BatchingParameters fields of TF Serving that this server reads past: they tune its own
# batch scheduler (padding, split batches, thread pools), which this one does not have.
TF_SERVING_ONLY_FIELDS = frozenset({
    "allowed_batch_sizes", "pad_variable_length_inputs", "thread_pool_name", "enable_large_batch_splitting",
    "max_execution_batch_size", "batch_padding_policy", "mixed_priority_batching_policy",
    "low_priority_max_batch_size", "low_priority_batch_timeout_micros", "low_priority_max_enqueued_batches",
    "low_priority_allowed_batch_sizes",
})


@dataclasses.dataclass
class _Task:
    key: tuple
    version: object
    signature_name: str
    inputs: dict  # name -> np.ndarray [rows, ...]
    rows: int
    future: asyncio.Future
    arrival: float


class Batcher:
    """Merges concurrent `run` calls; `enabled=False` runs each request alone (still in a thread)."""

    def __init__(self, parameters=BatchingParameters(), enabled=True):
        self.parameters = parameters
        self.enabled = enabled
        self.batch_sizes = {}  # rows per model call -> number of calls
        self._queues = {}  # key -> list of _Task, oldest first
        self._changed = None
        self._workers = []
        self._executor = concurrent.futures.ThreadPoolExecutor(parameters.num_batch_threads, thread_name_prefix="model")
        self._unique = itertools.count()

    def start(self):
        """Starts the workers; call inside the running event loop."""
        self._changed = asyncio.Event()
        self._workers = [asyncio.create_task(self._work()) for _ in range(self.parameters.num_batch_threads)]

    async def stop(self):
        for worker in self._workers:
            worker.cancel()
        await asyncio.gather(*self._workers, return_exceptions=True)
        self._executor.shutdown(wait=True)

    async def run(self, version, signature_name, inputs, rows):
        """The outputs (name -> np.ndarray [rows, ...]) of `signature_name` for these inputs."""
        if not self.enabled:
            outputs = await asyncio.get_running_loop().run_in_executor(
                self._executor, version.run, signature_name, inputs
            )
            self._count(rows)
            return outputs
        queued = sum(task.rows for queue in self._queues.values() for task in queue)
        if queued >= self.parameters.max_enqueued_batches * self.parameters.max_batch_size:
            raise ServingError("The batch scheduling queue to which this task was submitted is full", status=503)
        key = (id(version), signature_name, self._options_key(inputs, rows))
        task = _Task(
            key, version, signature_name, inputs, rows, asyncio.get_running_loop().create_future(), time.monotonic()
        )
        self._queues.setdefault(key, []).append(task)
        self._changed.set()
        return await task.future

    def _options_key(self, inputs, rows):
        """What must be equal for two requests to share a call (see the module docstring)."""
        options = []
        for name in sorted(inputs):
            array = inputs[name]
            if array.ndim == 0 or len(array) != rows:
                return ("alone", next(self._unique))
            if array.dtype == np.object_:
                continue
            if rows and not np.all(array == array[:1]):
                return ("alone", next(self._unique))
            options.append((name, array[:1].tobytes(), array.shape[1:]))
        return tuple(options)

    async def _work(self):
        timeout = self.parameters.batch_timeout_micros / 1e6
        while True:
            while not self._queues:
                self._changed.clear()
                await self._changed.wait()
            key = min(self._queues, key=lambda k: self._queues[k][0].arrival)
            deadline = self._queues[key][0].arrival + timeout
            while key in self._queues and sum(t.rows for t in self._queues[key]) < self.parameters.max_batch_size:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                self._changed.clear()
                try:
                    await asyncio.wait_for(self._changed.wait(), remaining)
                except asyncio.TimeoutError:
                    break
            if key not in self._queues:
                continue  # another worker took this queue meanwhile
            batch = self._take(key)
            if batch:
                await self._execute(batch)

    def _take(self, key):
        """Removes the oldest tasks of a queue, up to max_batch_size rows (at least one task)."""
        queue = self._queues[key]
        batch, rows = [], 0
        while queue and (not batch or rows + queue[0].rows <= self.parameters.max_batch_size):
            task = queue.pop(0)
            if task.future.cancelled():
                continue  # its client went away
            batch.append(task)
            rows += task.rows
        if not queue:
            del self._queues[key]
        return batch

    async def _execute(self, batch):
        first = batch[0]
        inputs = {name: np.concatenate([task.inputs[name] for task in batch]) for name in first.inputs}
        rows = sum(task.rows for task in batch)
        loop = asyncio.get_running_loop()
        try:
            outputs = await loop.run_in_executor(self._executor, first.version.run, first.signature_name, inputs)
            for name, value in outputs.items():
                if np.ndim(value) == 0 or len(value) != rows:
                    raise ServingError(
                        f"output {name} has no batch dimension of {rows} rows; cannot split it", status=500
                    )
        except Exception as error:
            for task in batch:
                if not task.future.done():
                    task.future.set_exception(error)
            return
        self._count(rows)
        start = 0
        for task in batch:
            if not task.future.done():
                task.future.set_result({name: value[start : start + task.rows] for name, value in outputs.items()})
            start += task.rows

    def _count(self, rows):
        self.batch_sizes[rows] = self.batch_sizes.get(rows, 0) + 1
