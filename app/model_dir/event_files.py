"""A resumed run's TensorBoard event files, cut back to the checkpoint it resumed from.

A run stopped after its newest checkpoint had written summaries of steps that, resumed
from that checkpoint, it trains and summarizes again. `metrics.jsonl` drops its records of
those steps (`app.training.metrics_log`); the event files must too, or TensorBoard draws both and each
curve doubles back at the resumed step. TensorBoard purges such steps itself only after a
`SessionLog.START` event, which TensorFlow 2's summary writers do not write.
"""

import glob
import os

import tensorflow as tf
from tensorflow.core.util import event_pb2

from data.atomic_files import replaced_atomically


def drop_events_after(directory, step):
    """Rewrites each event file in `directory` without its events of steps after `step`.

    A last record cut off by the stop goes too. A file is replaced whole (written beside
    it, flushed, renamed over it) or not at all; one with nothing to drop is left as it is.

    Returns:
        The number of events dropped, over all files.
    """
    dropped = 0
    for path in sorted(glob.glob(os.path.join(glob.escape(directory), "*tfevents*"))):
        kept, cut_off = _events_up_to(path, step)
        if cut_off:
            _write_records_atomically(path, kept)
            dropped += cut_off
    return dropped


def _events_up_to(path, step):
    """The records of event file `path` of steps up to `step`, and how many others it holds
    (a record cut off mid-write counted among them)."""
    kept, others = [], 0
    records = iter(tf.data.TFRecordDataset(path))
    while True:
        try:
            record = next(records).numpy()
        except StopIteration:
            break
        except tf.errors.DataLossError:  # "truncated record": the stop came mid-write
            others += 1
            break
        if event_pb2.Event.FromString(record).step > step:
            others += 1
        else:
            kept.append(record)
    return kept, others


def _write_records_atomically(path, records):
    # The temporary name holds no "tfevents": TensorBoard, reading the directory
    # meanwhile, takes only such files for event files.
    with replaced_atomically(path, temporary_prefix=".rewrite-") as temporary:
        with tf.io.TFRecordWriter(temporary) as writer:
            for record in records:
                writer.write(record)
