"""Which `tf.distribute` strategy trains the model.

    auto          MirroredStrategy over every visible GPU; the default strategy without GPUs
    mirrored      MirroredStrategy over every visible GPU, or over --cpu-replicas CPUs
    multi-worker  MultiWorkerMirroredStrategy, cluster from the TF_CONFIG variable

`--cpu-replicas N` splits the CPU into N logical devices and mirrors over them, so the
multi-replica code path runs, and is tested, on a machine without GPUs.
"""

import json
import os

import tensorflow as tf

from app.training.devices import check_strategy


def make_strategy(kind="auto", cpu_replicas=None):
    """Creates the strategy. Must run before TensorFlow touches any device."""
    check_strategy(kind, cpu_replicas)
    gpus = tf.config.list_physical_devices("GPU")
    # Mirroring goes over the GPUs where there are any: CPU replicas asked for there would
    # be silently left out, and the run's batches cut for another count than the user's.
    if cpu_replicas and gpus and kind != "multi-worker":
        raise ValueError(
            f"--cpu-replicas {cpu_replicas} splits the CPU, but {len(gpus)} GPU(s) are visible and training "
            "mirrors over those: leave out --cpu-replicas, or hide the GPUs (CUDA_VISIBLE_DEVICES=) to train "
            "on CPU replicas"
        )
    if cpu_replicas:
        _split_cpu(cpu_replicas)

    if kind == "multi-worker":
        if "TF_CONFIG" not in os.environ:
            raise ValueError("--strategy multi-worker needs the TF_CONFIG environment variable")
        check_tf_config(os.environ["TF_CONFIG"])
        options = tf.distribute.experimental.CommunicationOptions(
            implementation=tf.distribute.experimental.CommunicationImplementation.AUTO
        )
        return tf.distribute.MultiWorkerMirroredStrategy(communication_options=options)

    if cpu_replicas and not gpus:
        return tf.distribute.MirroredStrategy([f"/cpu:{i}" for i in range(cpu_replicas)])
    if gpus:
        return tf.distribute.MirroredStrategy()  # every visible GPU, even just one
    if kind == "mirrored":
        return tf.distribute.MirroredStrategy(["/cpu:0"])
    return tf.distribute.get_strategy()


def check_tf_config(text):
    """ValueError naming the problem unless `text` is a TF_CONFIG TensorFlow can use:

        {"cluster": {"worker": ["host0:port", "host1:port"], ...},
         "task": {"type": "worker", "index": 0}}

    TensorFlow's own checks run later, with messages that do not say TF_CONFIG, and
    some shapes (a list, a bare string) it takes for "no cluster" without a word.
    """
    def bad(problem):
        return ValueError(f"TF_CONFIG {problem}: {text!r}")

    try:
        config = json.loads(text)
    except json.JSONDecodeError as error:
        raise bad(f"is not valid JSON ({error})") from None
    if not isinstance(config, dict):
        raise bad('must be a JSON object with "cluster" and "task"')
    cluster, task = config.get("cluster"), config.get("task")
    if not isinstance(cluster, dict) or not cluster:
        raise bad('needs "cluster", an object of job name -> list of "host:port"')
    for job, addresses in cluster.items():
        if not isinstance(addresses, list) or not addresses or not all(isinstance(a, str) for a in addresses):
            raise bad(f'has cluster job {job!r} as {json.dumps(addresses)}, not a list of "host:port" strings')
    if not isinstance(task, dict):
        raise bad('needs "task", an object {"type": <a job of the cluster>, "index": <its number>}')
    kind, index = task.get("type"), task.get("index")
    if kind not in cluster:
        raise bad(f"has task type {kind!r}, which is not a job of the cluster ({', '.join(map(repr, cluster))})")
    if not isinstance(index, int) or isinstance(index, bool) or not 0 <= index < len(cluster[kind]):
        raise bad(f"has task index {index!r}; job {kind!r} has tasks 0 to {len(cluster[kind]) - 1}")


def _split_cpu(count):
    cpu = tf.config.list_physical_devices("CPU")[0]
    try:
        tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * count)
    except RuntimeError:
        # Devices are already initialized (a second call in one process): keep what exists,
        # provided it is enough.
        have = len(tf.config.list_logical_devices("CPU"))
        if have < count:
            raise ValueError(f"--cpu-replicas {count} asked after TensorFlow started with {have} CPU devices") from None


def is_chief(strategy):
    """True on the worker that writes checkpoints, logs and the model directory."""
    resolver = getattr(strategy, "cluster_resolver", None)
    if resolver is None or not getattr(resolver, "cluster_spec", None) or not resolver.cluster_spec().as_dict():
        return True
    return resolver.task_type in (None, "chief") or (
        resolver.task_type == "worker" and resolver.task_id == 0 and "chief" not in resolver.cluster_spec().as_dict()
    )


def replica_differences(variables):
    """`{path: largest |difference|}` between each mirrored variable's replica copies and
    its first, for the variables whose copies differ (empty when every replica holds the
    same values). Under MirroredStrategy each replica updates its own copy from the same
    reduced gradients, so any difference is a bug: a checkpoint saves the first copy.

    Args:
        variables: Keras or TensorFlow variables; ones that are not mirrored are skipped.
    """
    import numpy as np

    differences = {}
    for variable in variables:
        inner = getattr(variable, "_value", variable)  # a Keras variable's tf.Variable
        copies = getattr(inner, "values", None)
        if not copies or len(copies) < 2:
            continue
        first = np.asarray(copies[0])
        differing = [np.asarray(copy) for copy in copies[1:] if not np.array_equal(np.asarray(copy), first)]
        if differing:
            largest = max(float(np.max(np.abs(copy.astype(np.float64) - first))) for copy in differing)
            differences[getattr(variable, "path", variable.name)] = largest
    return differences


class WorkersDisagree(ValueError):
    """The workers of a multi-worker run would train different models or data."""


def check_same_on_all_workers(strategy, values):
    """Raises WorkersDisagree unless every worker passed the same `{name: int}`.

    Under MultiWorkerMirroredStrategy each worker is its own process. One that resumed
    from another checkpoint (a model directory not shared by all workers) or tokenizes
    with another vocabulary would make the collective steps mix different models, or wait
    forever for a worker that has already stopped. Single-process strategies pass.
    """
    if not isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy):
        return
    names = sorted(values)
    gathered = _gather_from_workers(strategy)(tf.constant([[values[name] for name in names]], tf.int64)).numpy()
    for column, name in enumerate(names):
        seen = sorted(set(gathered[:, column].tolist()))
        if len(seen) > 1:
            raise WorkersDisagree(
                f"the workers disagree on the {name}: {seen}. Every worker must read the same "
                "model directory (a shared file system) and the same data, with the same flags"
            )


def max_over_workers(strategy):
    """Returns `reduce(values) -> values`: each float's maximum over all workers.

    Workers that time themselves see different clocks; decisions taken from those times
    (the length of a run under a time budget) must come out the same on every worker,
    so each takes them from the slowest worker's figures. In one process `reduce` returns
    the values as they are.
    """
    if not isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy):
        return lambda values: [float(value) for value in values]
    gather = _gather_from_workers(strategy)

    def reduce(values):
        gathered = gather(tf.constant([list(values)], tf.float64)).numpy()
        return gathered.max(axis=0).tolist()

    return reduce


def _gather_from_workers(strategy):
    """`gather(local [1, N]) -> [num_replicas_in_sync, N]`: every replica's row, on every worker.

    Built once per caller, so that repeated gathers reuse one trace.
    """

    @tf.function(autograph=False)  # A tf.function: TensorFlow warns about eager collectives.
    def gather(local):
        per_replica = strategy.run(tf.identity, args=(local,))
        return strategy.gather(per_replica, axis=0)

    return gather
