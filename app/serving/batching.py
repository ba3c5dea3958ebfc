"""Dynamic batching: concurrent requests for one signature of one version become one call.

    batcher = Batcher(BatchingParameters(max_batch_size=32, batch_timeout_micros=5000))
    outputs = await batcher.run(version, "serving_default", inputs)   # in the event loop

A free worker takes the queue whose oldest request has waited longest, waits until that
request is `batch_timeout_micros` old or `max_batch_size` rows are queued, concatenates up
to `max_batch_size` rows along dimension 0 and calls the model once in a thread; each
request gets its own rows of every output back. While the workers are busy, requests
queue up, so the busier the server, the larger the batches. A request of more rows than
one call takes is served a slice at a time, its rest going behind the requests that came
meanwhile: a one-sentence request sent beside a 64-sentence one waits for one batch, not
for all of the large one.

Requests are merged only when the model would give each the same answer alone:
same version, same signature, and equal values of every non-string input (for
`translate_with_options`: the same alpha and max_extra_length; the export would take
them per sentence, but this rule needs to know nothing of a signature's inputs). A
request whose own rows disagree on such an input, or whose inputs disagree on the batch
size, runs alone. String inputs may differ in length: they are [B] string tensors,
tokenized and padded inside the graph after batching.

Without batching (`enabled=False`) every request is a queue of its own, so it is never
merged and runs as soon as one of `UNBATCHED_THREADS` workers is free: as in TF Serving,
where each request runs on its own HTTP thread, concurrent requests run concurrently.

Either way, the queue holds at most `max_enqueued_batches * max_batch_size` rows (more is
503), and a request whose caller no longer wants it (`still_wanted()` is false: its client
closed the connection) is dropped, answered 499, before it is batched or run, so that
abandoned requests neither cost model time nor push live ones into 503s.

The parameters are TF Serving's (serving/batching_parameters.txt).
"""

import asyncio
import concurrent.futures
import dataclasses
import itertools
import os
import re
import time

import numpy as np

from app.serving.rest_api import ServingError


@dataclasses.dataclass(frozen=True)
class BatchingParameters:
    """TF Serving's BatchingParameters, the fields this server uses."""

    # The most rows in one model call; a larger request is answered over several calls.
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


# Model calls that may run at once without batching: TF Serving's default number of HTTP
# request threads (http_num_threads = 4 * NumSchedulableCPUs), each of which runs its own
# request. Bounded, so that a burst queues (and, past the queue bound, gets 503) rather
# than starting a thread, and a model call's memory, per request.
UNBATCHED_THREADS = 4 * (len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1)


def _always():
    return True


@dataclasses.dataclass
class _Task:
    key: tuple
    version: object
    signature_name: str
    inputs: dict  # name -> np.ndarray [rows, ...]
    rows: int
    future: asyncio.Future
    arrival: float  # when it joined the back of its queue: at its arrival, or after its last slice
    still_wanted: object  # () -> bool, false once the client has gone
    splittable: bool = True  # every input has `rows` rows, so a slice of rows is a request too
    taken: int = 0  # rows already handed to a model call
    answered: dict = dataclasses.field(default_factory=dict)  # first row of a slice -> its outputs
    answered_rows: int = 0

    @property
    def waiting_rows(self):
        return self.rows - self.taken

    def gone(self):
        """True if nobody waits for the answer: the caller's future is done (failed or
        cancelled) or its client left."""
        return self.future.done() or not self.still_wanted()

    def take(self, most):
        """`(first row, rows, inputs)` of the next slice of at most `most` rows (all that
        wait if the task cannot be split)."""
        start = self.taken
        count = min(most, self.waiting_rows) if self.splittable else self.waiting_rows
        self.taken += count
        if start == 0 and count == self.rows:
            return start, count, self.inputs
        return start, count, {name: value[start : start + count] for name, value in self.inputs.items()}

    def answer(self, start, rows, outputs):
        """Records the outputs of the slice from row `start`; once every row has its
        outputs, answers the request with them, in order (slices may end out of order)."""
        self.answered[start] = outputs
        self.answered_rows += rows
        if self.answered_rows == self.rows and not self.future.done():
            parts = [self.answered[first] for first in sorted(self.answered)]
            self.future.set_result(
                parts[0] if len(parts) == 1 else {name: np.concatenate([p[name] for p in parts]) for name in parts[0]}
            )


def client_connected(request):
    """`still_wanted` for an aiohttp request: its connection is neither closed nor closing.

    aiohttp (3.14 here) cancels no handler whose client disconnects, unless its runner is
    made with handler_cancellation=True, so the future the handler awaits is never
    cancelled; the transport is what tells.
    """
    transport = request.transport
    return transport is not None and not transport.is_closing()


class Batcher:
    """Merges concurrent `run` calls; `enabled=False` runs each request alone, up to `threads` at once.

    `threads`: model calls that may run at once; num_batch_threads with batching,
    UNBATCHED_THREADS without, unless given.
    """

    def __init__(self, parameters=BatchingParameters(), enabled=True, threads=None):
        self.parameters = parameters
        self.enabled = enabled
        self.batch_sizes = {}  # rows per model call -> number of calls
        self._queues = {}  # key -> list of _Task, oldest first
        self._changed = None
        self._workers = []
        self.threads = threads or (parameters.num_batch_threads if enabled else UNBATCHED_THREADS)
        self._executor = concurrent.futures.ThreadPoolExecutor(self.threads, thread_name_prefix="model")
        self._unique = itertools.count()

    def start(self):
        """Starts the workers; call inside the running event loop."""
        self._changed = asyncio.Event()
        self._workers = [asyncio.create_task(self._work()) for _ in range(self.threads)]

    async def stop(self):
        for worker in self._workers:
            worker.cancel()
        await asyncio.gather(*self._workers, return_exceptions=True)
        self._executor.shutdown(wait=True)

    async def run(self, version, signature_name, inputs, rows, still_wanted=_always):
        """The outputs (name -> np.ndarray [rows, ...]) of `signature_name` for these inputs.

        `still_wanted()`, called in the event loop before the request is batched (and when
        the queue is full), says whether its caller still waits; once it is false the
        request is dropped with a 499 ServingError instead of run.
        """
        limit = self.parameters.max_enqueued_batches * self.parameters.max_batch_size
        if self._queued_rows() >= limit:
            self._drop_gone()  # abandoned requests must not refuse live ones
            if self._queued_rows() >= limit:
                raise ServingError("The batch scheduling queue to which this task was submitted is full", status=503)
        splittable = self.enabled and _has_rows(inputs, rows)
        if self.enabled:
            key = (id(version), signature_name, self._options_key(inputs, rows))
        else:  # a key of its own: never merged, taken by the next free worker
            key = ("alone", next(self._unique))
        task = _Task(
            key, version, signature_name, inputs, rows, future=asyncio.get_running_loop().create_future(),
            arrival=time.monotonic(), still_wanted=still_wanted, splittable=splittable,
        )
        self._queues.setdefault(key, []).append(task)
        self._changed.set()
        return await task.future

    def _queued_rows(self):
        return sum(task.waiting_rows for queue in self._queues.values() for task in queue)

    def _drop_gone(self):
        """Removes every queued request nobody waits for any more (see `_Task.gone`)."""
        for key in list(self._queues):
            kept = []
            for task in self._queues[key]:
                if task.gone():
                    _answer_gone(task)
                else:
                    kept.append(task)
            if kept:
                self._queues[key] = kept
            else:
                del self._queues[key]

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
        # Without batching, nothing to wait for: each request is its own batch.
        timeout = self.parameters.batch_timeout_micros / 1e6 if self.enabled else 0
        while True:
            while not self._queues:
                self._changed.clear()
                await self._changed.wait()
            key = min(self._queues, key=lambda k: self._queues[k][0].arrival)
            deadline = self._queues[key][0].arrival + timeout
            most = self.parameters.max_batch_size
            while key in self._queues and sum(task.waiting_rows for task in self._queues[key]) < most:
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
                self._queue_rest(batch)

    def _take(self, key):
        """Removes up to max_batch_size rows from a queue, oldest first, as `(task, first row,
        rows, inputs)` slices. A request with more rows than fit gives a slice and leaves the queue
        until that slice has run; its rest then goes behind the requests that came meanwhile
        (`_queue_rest`): a large request is served a batch at a time, interleaved with small
        ones, which wait for one batch, not for all of it. (A request that cannot be split is
        taken whole, alone if it must be.)"""
        queue = self._queues[key]
        most = self.parameters.max_batch_size
        batch, rows = [], 0
        while queue and rows < most:
            task = queue[0]
            if task.gone():
                queue.pop(0)
                _answer_gone(task)
                continue
            if batch and not task.splittable and rows + task.waiting_rows > most:
                break
            piece = task.take(most - rows)
            batch.append((task, *piece))
            rows += piece[1]
            queue.pop(0)
            if task.waiting_rows:  # the rest of a large request: queued again once this slice is run
                break
        if not queue:
            del self._queues[key]
        return batch

    def _queue_rest(self, batch):
        """Puts the rest of each large request in `batch` back in its queue, behind the
        requests that came while its slice ran (see `_take`)."""
        for task, *_ in batch:
            if not task.waiting_rows:
                continue
            if task.gone():  # failed meanwhile, or its client left
                _answer_gone(task)
                continue
            task.arrival = time.monotonic()
            self._queues.setdefault(task.key, []).append(task)
            self._changed.set()

    async def _execute(self, batch):
        first = batch[0][0]
        rows = sum(size for _, _, size, _ in batch)
        loop = asyncio.get_running_loop()
        try:
            if len(batch) == 1:  # as it is: it may have inputs without rows, which run whole
                inputs = batch[0][3]
            else:
                inputs = {name: np.concatenate([part[name] for *_, part in batch]) for name in batch[0][3]}
            outputs = await loop.run_in_executor(self._executor, first.version.run, first.signature_name, inputs)
            whole = len(batch) == 1 and batch[0][1] == 0 and batch[0][2] == first.rows
            if not self.enabled or whole:
                # One request, all of it: its outputs as the model gave them, as TF Serving
                # answers (they need no batch dimension to be split along).
                self._count(rows)
                if not first.future.done():
                    first.future.set_result(outputs)
                return
            for name, value in outputs.items():
                if np.ndim(value) == 0 or len(value) != rows:
                    raise ServingError(
                        f"output {name} has no batch dimension of {rows} rows; cannot split it", status=500
                    )
        except Exception as error:
            for task, *_ in batch:
                if not task.future.done():
                    task.future.set_exception(error)
            return
        self._count(rows)
        offset = 0
        for task, start, size, _ in batch:
            if not task.future.done():
                task.answer(start, size, {name: value[offset : offset + size] for name, value in outputs.items()})
            offset += size

    def _count(self, rows):
        self.batch_sizes[rows] = self.batch_sizes.get(rows, 0) + 1


def _has_rows(inputs, rows):
    """Whether every input has `rows` rows (dimension 0), so that any slice of rows is a request."""
    return all(np.ndim(value) > 0 and len(value) == rows for value in inputs.values())


def _answer_gone(task):
    """Ends a dropped request: 499, nginx's "client closed request", which nobody reads but the metrics."""
    if not task.future.done():
        task.future.set_exception(ServingError("The client closed the connection before its request ran", status=499))
