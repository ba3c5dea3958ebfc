"""How many threads one op gets when the project decodes on the CPU and nobody said.

A decoding step is a chain of small ops. Split over many threads, each op spends more on
handing out and gathering its shards than it gains, and the threads of the intra-op pool
compete for the cores with the inter-op threads that run independent ops, which is where
decoding's parallelism is: the export's parallel searches, and concurrent requests. On 2
cores one thread per op decoded the default export faster than TensorFlow's choice of two
(the figures: docs/serving.md#threads). On more cores a larger model's matrix products
are worth splitting, so the pool grows with the cores: half of them, shared among the
searches that run at once, and never less than one thread.

No TensorFlow here: the server decides before a version's process starts TensorFlow.
"""

import os


def cpu_cores():
    """The cores this process may run on (taskset and container limits included)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def decoding_intra_op_threads(concurrent_searches, cores=None):
    """Intra-op threads for decoding with `concurrent_searches` searches running at once
    (a call's parallel searches times the calls that may run at once): 1 on 2 cores."""
    cores = cpu_cores() if cores is None else cores
    return max(1, cores // (2 * max(1, concurrent_searches)))
