"""A preparation that a test kills mid-split (tests/data/test_prepare_resume.py).

    python -m tests.data.slow_preparation CORPUS_PREFIX MODEL_DIR [SECONDS_PER_CHUNK]

Prepares files:PREFIX.en,PREFIX.de in one process, in chunks of 100 pairs and shards of
300, sleeping SECONDS_PER_CHUNK after each chunk it tokenizes, and prints how many pairs
it tokenized: a run that resumes tokenizes only the pairs after the last shard.
"""

import sys
import time

import data.prepare
from data.config import DataConfig
from data.dataset import prepare_data

CHUNK, SHARD = 100, 300


def main(prefix, model_dir, seconds_per_chunk=0.0, log=None):
    """Prepares as the module says; `log` takes each line (default: print them).

    Sets data.prepare's chunk and shard sizes and its encoder for good: a caller that is not
    a process of its own restores them (tests/data/test_prepare_resume.py)."""
    log = log or (lambda line: print(line, flush=True))
    data.prepare._CHUNK, data.prepare.SHARD_PAIRS = CHUNK, SHARD
    encode, tokenized = data.prepare._encode_chunk, []

    def slow_encode(chunk):
        tokenized.append(len(chunk[0]))
        time.sleep(seconds_per_chunk)
        return encode(chunk)

    data.prepare._encode_chunk = slow_encode
    config = DataConfig(dataset=f"files:{prefix}.en,{prefix}.de", vocab_size=300, batch_tokens=1024, max_length=64)
    prepare_data(config, model_dir, workers=1, log=log)
    log(f"tokenized {sum(tokenized)} pairs")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], *map(float, sys.argv[3:]))
