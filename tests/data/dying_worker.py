"""A chunk function for the preparation pool whose worker process dies, as one killed for
memory would (tests/data/test_shards.py). Its own module: a spawned worker imports it
without the test module's TensorFlow."""

import os


def die(chunk):
    os._exit(9)
