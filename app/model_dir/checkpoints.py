"""Checkpoints: the newest K, the best by validation BLEU, the data position, averaging.

Layout of a model directory:

    DIR/checkpoints/ckpt-N.*     the newest K checkpoints (and the one an interrupt saved,
                                 until the next supersedes it): the newest holds everything
                                 a run resumes from (weights, optimizer state, the random
                                 generators' state and training progress); the older ones,
                                 kept for averaging, hold the weights alone
    DIR/checkpoints/ckpt-N.weights.*   the newest's weights alone, ready to take its place
                                 when a newer one lands
    DIR/checkpoints/checkpoint   the index naming the kept checkpoints, the newest last
    DIR/best/ckpt-N.*            the weights of the best evaluation so far
    DIR/best/best.json           its step and score

Atomicity: TensorFlow writes a checkpoint's data files first (under temporary names,
merged into place) and rewrites the index file last, by writing a temporary file and
renaming it. A crash while saving therefore leaves the index pointing at the previous,
complete checkpoint, which is what restoring reads. A checkpoint that a newer one
supersedes becomes weights-only without ever being named while incomplete: the index
names its `.weights` copy while the copy is written over its files
(`CheckpointTracker._keep_weights_only`).

Weights are tracked by their Keras paths (`encoder_layer_0/self_attention/query/kernel`),
so export and averaging restore the weights alone, without building an optimizer.
"""

import json
import os
import re
import shutil
import tempfile
import weakref

import numpy as np
import tensorflow as tf
from google.protobuf import text_format

from data.atomic_files import write_atomically
from data.errors import first_line


# What a kept checkpoint's weights-only copy adds to its name: `ckpt-N.weights`.
WEIGHTS_ONLY = ".weights"


class CheckpointError(ValueError):
    """A checkpoint or record of a model directory that cannot be read, named."""


# What TensorFlow raises for a checkpoint whose files are gone, cut short or unreadable:
# NotFoundError, DataLossError, a bare OpError for a missing data file, and IndexError
# ("Read less bytes than requested") for one cut short.
_UNREADABLE = (tf.errors.OpError, IndexError)


def _unreadable(path, error):
    return CheckpointError(
        f"checkpoint {path} cannot be read ({type(error).__name__}: {first_line(error)}); "
        "its files are missing or damaged"
    )


def cannot_write(path, error, latest):
    """The CheckpointError for a file of the model directory that `error` kept from being
    written, saying which checkpoint `latest` a run of the same command resumes from."""
    # A TensorFlow error opens with the function it ran in and ends with its op; the
    # reason ("No space left on device") is in between.
    reason = re.sub(r"^\{\{[^}]*\}\}\s*|\s*\[Op:\w+\]$", "", first_line(error))
    return CheckpointError(
        f"cannot write {path} ({type(error).__name__}: {reason}); free some space or make "
        f"{os.path.dirname(path)} writable, then run the same command to resume from {latest or 'the start'}"
    )


def _save_numbered(manager, step, latest):
    """`manager.save(checkpoint_number=step)`: the new checkpoint's path.

    Raises:
        CheckpointError: on a full or read-only disk, naming the checkpoint and `latest`,
            the one to resume from; TensorFlow's half-written `ckpt-N_temp` directory is
            removed first.
    """
    try:
        return manager.save(checkpoint_number=step)
    except (tf.errors.OpError, OSError) as error:
        path = os.path.join(manager.directory, f"ckpt-{step}")
        shutil.rmtree(f"{path}_temp", ignore_errors=True)
        raise cannot_write(path, error, latest) from None


class Progress(tf.Module):
    """Where training is: optimizer steps, the position in the data, and where it ends.

    A checkpoint written before a field existed restores the others and leaves that one
    at its initial value (`CheckpointTracker.restore_latest`).
    """

    def __init__(self, planned_steps=0, cooldown_steps=0):
        super().__init__(name="progress")
        self.step = tf.Variable(0, dtype=tf.int64, trainable=False, name="step")
        self.epoch = tf.Variable(0, dtype=tf.int64, trainable=False, name="epoch")
        # Batches of the current epoch already trained on (micro-batches, not steps).
        self.batch_in_epoch = tf.Variable(0, dtype=tf.int64, trainable=False, name="batch_in_epoch")
        # The run's length and its annealed end, as the learning-rate schedule reads them;
        # a time budget (app.training.time_budget) may shorten the run while it trains.
        self.planned_steps = tf.Variable(planned_steps, dtype=tf.int64, trainable=False, name="planned_steps")
        self.cooldown_steps = tf.Variable(cooldown_steps, dtype=tf.int64, trainable=False, name="cooldown_steps")
        # Wall-clock seconds spent by the invocations of the run, up to this checkpoint.
        self.seconds = tf.Variable(0.0, dtype=tf.float64, trainable=False, name="seconds")
        # 1 in a checkpoint saved because the run was interrupted (CheckpointTracker.save).
        self.saved_on_interrupt = tf.Variable(0, dtype=tf.int64, trainable=False, name="saved_on_interrupt")

    def set_plan(self, planned_steps, cooldown_steps):
        self.planned_steps.assign(planned_steps)
        self.cooldown_steps.assign(cooldown_steps)

    def advance(self, batches):
        self.step.assign_add(1)
        self.batch_in_epoch.assign_add(batches)

    def next_epoch(self):
        self.epoch.assign_add(1)
        self.batch_in_epoch.assign(0)


def _saved_fields(progress, saved):
    """A module holding those variables of `progress` that a checkpoint holds, given the
    names of its variables, `saved`.

    Restoring through it leaves a field added to Progress since the checkpoint was written
    at its initial value, where restoring `progress` itself would fail the check that
    every object was matched.
    """
    fields = tf.Module(name="progress")
    for name, variable in vars(progress).items():
        if isinstance(variable, tf.Variable) and f"progress/{name}/.ATTRIBUTES/VARIABLE_VALUE" in saved:
            setattr(fields, name, variable)
    return fields


def named_weights(model):
    """`{keras path: variable}` for every weight of the model."""
    return {variable.path: variable for variable in model.weights}


def random_states(model):
    """The state of every random generator of the model, in the model's order: Keras keeps
    each dropout's `SeedGenerator` state (int64 [2] on TensorFlow: the seed and the
    draws made) among its variables but not among its weights.

    A list, not keyed by path as the weights are: a generator's path carries a number
    counted over the process (`seed_generator_14`), which another process building the
    same model numbers otherwise.
    """
    weights = {id(variable) for variable in model.weights}
    return [variable for variable in model.variables if id(variable) not in weights]


class CheckpointTracker:
    """Saves and restores one training run's checkpoints."""

    def __init__(self, model_dir, model, optimizer, progress, keep=5, chief=True):
        self.model_dir = model_dir
        self.chief = chief
        weights = named_weights(model)
        # Dropout's generators: without their state a resumed run would draw again the
        # masks of its first steps. A model without dropout has none, and a checkpoint none.
        self._random = random_states(model)
        random = {"random": self._random} if self._random else {}
        checkpoint = tf.train.Checkpoint(weights=weights, optimizer=optimizer, progress=progress, **random)
        self._weights, self._optimizer, self._progress = weights, optimizer, progress
        self._weights_only = tf.train.Checkpoint(weights=weights)
        # Under MultiWorkerMirroredStrategy every worker takes part in a save (TensorFlow's
        # rule: a save may need collective reads); only the chief's lands in the model
        # directory, the others write to scratch directories, removed by close() or, at
        # the latest, when the tracker is garbage collected or the process exits.
        self._scratch = [] if chief else [tempfile.mkdtemp(prefix="ckpt-worker-") for _ in range(2)]
        self._cleanup = weakref.finalize(self, _remove_directories, self._scratch)
        directory = os.path.join(model_dir, "checkpoints") if chief else self._scratch[0]
        self._checkpoint, self._keep = checkpoint, keep
        self.manager = tf.train.CheckpointManager(checkpoint, directory, max_to_keep=keep)
        self._room = 0  # Checkpoints the manager keeps beyond `keep`: those saved on an interrupt.
        best_directory = os.path.join(model_dir, "best") if chief else self._scratch[1]
        self.best_manager = tf.train.CheckpointManager(
            tf.train.Checkpoint(weights=weights), best_directory, max_to_keep=1
        )
        self._best_record = os.path.join(best_directory, "best.json")
        # Every worker reads the chief's records, so that all resume from the same
        # checkpoint and best score and take the same save decisions (a worker with an
        # empty scratch directory would otherwise start again from step 0).
        self._chief_checkpoints = os.path.join(model_dir, "checkpoints")
        best = _read_json(os.path.join(model_dir, "best", "best.json"), {})
        self.best_score, self.best_step = best.get("score"), best.get("step")
        self._latest = None  # The newest checkpoint of this run, restored or saved.
        # The newest checkpoint, where an interrupt saved it (the chief's record only):
        # removed once a later one is saved.
        self._stopgap = None

    def latest(self):
        return self._latest

    def restore_latest(self):
        """Restores the newest checkpoint, if any; returns its path or None."""
        path = tf.train.latest_checkpoint(self._chief_checkpoints)
        if path:
            try:
                saved = {name for name, _ in tf.train.list_variables(path)}
                # Progress fields the checkpoint predates keep their initial values, and so
                # do the random generators where it predates their saving (such a run
                # resumes as it always did, its dropout masks drawn afresh); every other
                # object must be matched.
                parts = dict(weights=self._weights, optimizer=self._optimizer,
                             progress=_saved_fields(self._progress, saved))
                if self._random and any(name.startswith("random/") for name in saved):
                    parts["random"] = self._random
                tf.train.Checkpoint(**parts).restore(path).assert_existing_objects_matched()
            except _UNREADABLE as error:
                raise _unreadable(path, error) from None
            self._latest = path
            if int(self._progress.saved_on_interrupt):
                self._progress.saved_on_interrupt.assign(0)
                if self.chief:
                    self._stopgap = path
                    self._make_room(1)
        return path

    def save(self, step, on_interrupt=False):
        """Saves a checkpoint numbered by the step, unless one for this step exists.

        A checkpoint saved `on_interrupt`, off the run's cadence, is there to resume from:
        the next checkpoint saved supersedes it and removes it. It does not count among the
        `keep` newest, so a run interrupted and resumed keeps the checkpoints of one that
        was not, and export averages the same weights. Saved again for this step without
        `on_interrupt` (the run's final save, where an interrupt came after its last step),
        it is written again unmarked, a checkpoint like the others.
        """
        saved_already = self._latest is not None and self._latest.endswith(f"-{step}")
        if saved_already and (on_interrupt or self._latest != self._stopgap):
            return self._latest
        stopgap = on_interrupt and self.chief
        # Room beyond `keep` for the checkpoint saved now on an interrupt, and for the one
        # saved on an earlier interrupt until it is removed below; none for that one when
        # it is the checkpoint written again, so the sweep keeps what an uninterrupted run's would.
        self._make_room(int(self._stopgap is not None and not saved_already) + int(stopgap))
        self._progress.saved_on_interrupt.assign(int(on_interrupt))
        try:
            # Its weights alone first, so that the full checkpoint, once the index names
            # it, always has the copy that replaces it when a newer one lands.
            self._write_weights_only(os.path.join(self.manager.directory, f"ckpt-{step}{WEIGHTS_ONLY}"))
            path = _save_numbered(self.manager, step, self._latest)
        finally:
            self._progress.saved_on_interrupt.assign(0)
        superseded, self._stopgap = self._stopgap, path if stopgap else None
        self._latest = path
        if superseded and superseded != path:
            self._remove(superseded)
        self._keep_weights_only()
        self._make_room(int(stopgap))
        return path

    def _write_weights_only(self, prefix):
        """Writes the model's weights alone as checkpoint `prefix`.

        One there already (the same step saved again) is removed first: TensorFlow writes
        over a checkpoint's data files before its `.index`, and a crash in between would
        leave a copy that looks complete.
        """
        try:
            _remove_checkpoint_files(prefix)
            self._weights_only.write(prefix)
        except (tf.errors.OpError, OSError) as error:
            shutil.rmtree(f"{prefix}_temp", ignore_errors=True)
            raise cannot_write(prefix, error, self._latest) from None

    def _keep_weights_only(self):
        """Makes every kept checkpoint but the newest weights-only, and removes the
        weights-only copies of checkpoints no longer kept.

        A kept checkpoint `ckpt-M` with a copy `ckpt-M.weights` becomes that copy in three
        steps, each leaving the index naming complete checkpoints only: the index names the
        copy in its place; the copy's files are written over `ckpt-M`'s; the index names
        `ckpt-M` again, and the copy is removed. A crash midway leaves the copy named, and
        the next save finishes the change. A checkpoint saved before these copies existed
        has none and stays whole until the run stops keeping it.
        """
        directory = self.manager.directory
        state = tf.train.get_checkpoint_state(directory)
        if not state:
            return
        names = [os.path.basename(kept) for kept in state.all_model_checkpoint_paths]
        kept = [name.removesuffix(WEIGHTS_ONLY) for name in names]
        pending = [
            name for name, named in zip(kept[:-1], names[:-1])
            if named != name or tf.io.gfile.exists(os.path.join(directory, name + WEIGHTS_ONLY + ".index"))
        ]
        try:
            if pending:
                self._write_index(state, [name + WEIGHTS_ONLY if name in pending else name for name in kept])
                for name in pending:
                    _copy_checkpoint(os.path.join(directory, name + WEIGHTS_ONLY), os.path.join(directory, name))
                self._write_index(state, kept)
            # The copies of those just changed, and of checkpoints the manager no longer keeps
            # (or data files left of one whose removal a crash cut short).
            for written in tf.io.gfile.glob(os.path.join(directory, f"ckpt-*{WEIGHTS_ONLY}.*")):
                name = os.path.basename(written).split(WEIGHTS_ONLY + ".")[0]
                if name in pending or name not in kept:
                    _remove_checkpoint_files(os.path.join(directory, name + WEIGHTS_ONLY))
        except (tf.errors.OpError, OSError) as error:
            raise cannot_write(os.path.join(directory, "checkpoint"), error, self._latest) from None

    def _write_index(self, state, names, timestamps=None):
        """Rewrites the index of the kept checkpoints atomically, as a save does: `names`
        and their `timestamps` (default: those of `state`, a `CheckpointState`, the same
        checkpoints under other names) in place of those of `state`."""
        # Written here, not by tf.compat.v1.train.update_checkpoint_state, which logs a
        # deprecation warning into the log of every resumed run. Names, not paths: the index
        # stays relative, as the manager writes it, so that the model directory can be moved.
        index = type(state)(
            model_checkpoint_path=names[-1], all_model_checkpoint_paths=names,
            all_model_checkpoint_timestamps=state.all_model_checkpoint_timestamps if timestamps is None else timestamps,
            last_preserved_timestamp=state.last_preserved_timestamp,
        )
        write_atomically(os.path.join(self.manager.directory, "checkpoint"), text_format.MessageToString(index))
        self._room = None  # The manager's list is stale: _make_room builds it again.

    def _make_room(self, room):
        """Makes the manager keep `keep` + `room` checkpoints: the sweep after a save drops
        the oldest beyond that many, so a checkpoint saved on an interrupt, not counted,
        must not push out one that is."""
        if room != self._room:
            # Built again, not changed: the manager has no public setter. It reads its list
            # of kept checkpoints from the index.
            self.manager = tf.train.CheckpointManager(
                self._checkpoint, self.manager.directory, max_to_keep=self._keep + room
            )
            self._room = room

    def _remove(self, path):
        """Removes kept checkpoint `path`: from the index first (rewritten atomically, as a
        save rewrites it), so that a crash midway leaves files no index names rather than an
        index naming missing files; then its files."""
        directory, name = self.manager.directory, os.path.basename(path)
        state = tf.train.get_checkpoint_state(directory)
        names = [os.path.basename(kept) for kept in state.all_model_checkpoint_paths]
        timestamps = list(state.all_model_checkpoint_timestamps)
        written = os.path.join(directory, "checkpoint")  # What an error names: the index, then a file.
        try:
            if name in names:  # Unless removed by hand: the manager keeps room for it.
                position = names.index(name)
                del names[position], timestamps[position]
                self._write_index(state, names, timestamps)
            # Its files and those of its weights-only copy (`ckpt-N.weights.*`).
            for written in tf.io.gfile.glob(os.path.join(directory, name) + ".*"):
                tf.io.gfile.remove(written)
        except (tf.errors.OpError, OSError) as error:
            raise cannot_write(written, error, self._latest) from None

    def offer_best(self, evaluation, step):
        """Keeps these weights if their score beats the best so far; returns whether it did.

        The score is validation BLEU, or minus the validation loss when BLEU was not computed.
        """
        score = evaluation["bleu"] if "bleu" in evaluation else -evaluation["valid_loss"]
        if self.best_score is not None and score <= self.best_score:
            return False
        path = _save_numbered(self.best_manager, step, self._latest)
        if self.chief:
            try:
                record = {"step": step, "score": score, "checkpoint": path, **evaluation}
                _write_json_atomically(self._best_record, record)
            except OSError as error:
                raise cannot_write(self._best_record, error, self._latest) from None
        self.best_score, self.best_step = score, step
        return True

    def best_path(self):
        return self.best_manager.latest_checkpoint

    def close(self):
        """Removes a non-chief worker's scratch checkpoints (the chief has none)."""
        self._cleanup()


def checkpoint_paths(model_dir):
    """The model directory's kept checkpoints, oldest first."""
    state = tf.train.get_checkpoint_state(os.path.join(model_dir, "checkpoints"))
    return list(state.all_model_checkpoint_paths) if state else []


def best_checkpoint(model_dir):
    return tf.train.latest_checkpoint(os.path.join(model_dir, "best"))


def restore_weights(model, path):
    """Loads the weights of checkpoint `path` into `model` (optimizer state is ignored).

    Raises:
        ValueError: naming them, if the checkpoint holds weights the model has no place
            for, or lacks weights the model has (a model built from another
            configuration than the checkpoint's).
    """
    weights = named_weights(model)
    saved = saved_weight_paths(path)
    for names, what in (
        (sorted(saved - set(weights)), "holds {} weight(s) the model has none for"),
        (sorted(set(weights) - saved), "lacks {} weight(s) the model has"),
    ):
        if names:
            shown = ", ".join(names[:4]) + (f" and {len(names) - 4} more" if len(names) > 4 else "")
            raise ValueError(
                f"{path} {what.format(len(names))} ({shown}): "
                "the model was built from another configuration than the checkpoint's"
            )
    # read(), not restore(): it ignores the save counter, which weights-only use needs not.
    try:
        status = tf.train.Checkpoint(weights=weights).read(path)
        status.expect_partial().assert_existing_objects_matched()
    except _UNREADABLE as error:
        raise _unreadable(path, error) from None


def saved_weight_paths(path):
    """The Keras paths of the model weights in checkpoint `path` (optimizer state left out)."""
    prefix, suffix = "weights/", "/.ATTRIBUTES/VARIABLE_VALUE"
    try:
        names = tf.train.load_checkpoint(path).get_variable_to_shape_map()
    except _UNREADABLE as error:
        raise _unreadable(path, error) from None
    # A checkpoint key escapes "/" in a dict key as ".S" and "." as "..".
    unescape = {"S": "/", ".": "."}
    return {
        re.sub(r"\.(.)", lambda match: unescape.get(match.group(1), match.group(0)), name[len(prefix) : -len(suffix)])
        for name in names
        if name.startswith(prefix) and name.endswith(suffix)
    }


def average_checkpoints(model, paths):
    """Sets `model`'s weights to the element-wise mean of the checkpoints `paths`.

    The paper averaged the last 5 (base) or 20 (big) checkpoints, written 10 minutes apart.
    """
    if not paths:
        raise ValueError("no checkpoints to average")
    weights = named_weights(model)
    totals = {name: np.zeros(v.shape, dtype=np.float64) for name, v in weights.items()}
    for path in paths:
        restore_weights(model, path)
        for name, variable in weights.items():
            totals[name] += np.asarray(variable.numpy(), dtype=np.float64)
    for name, variable in weights.items():
        variable.assign((totals[name] / len(paths)).astype(variable.dtype))
    return model


def _copy_checkpoint(source, target):
    """Writes checkpoint `source`'s files over checkpoint `target`'s (prefixes): its data
    files, then its `.index`; data files of `target` that `source` has not are removed."""
    stale = set(tf.io.gfile.glob(target + ".data-*"))
    for data_file in tf.io.gfile.glob(source + ".data-*"):
        copied = target + data_file[len(source):]
        tf.io.gfile.copy(data_file, copied, overwrite=True)
        stale.discard(copied)
    tf.io.gfile.copy(source + ".index", target + ".index", overwrite=True)
    for data_file in stale:
        tf.io.gfile.remove(data_file)


def _remove_checkpoint_files(prefix):
    """Removes checkpoint `prefix`'s files, its `.index` first: a checkpoint whose `.index`
    is there is complete (TensorFlow writes it last), so a crash midway leaves data files
    that no `.index` claims, never an `.index` over missing data."""
    for written in tf.io.gfile.glob(prefix + ".index") + tf.io.gfile.glob(prefix + ".data-*"):
        tf.io.gfile.remove(written)


def _remove_directories(directories):
    for directory in directories:
        shutil.rmtree(directory, ignore_errors=True)


def _read_json(path, default):
    """The JSON object at `path`, `default` if there is no file; ValueError naming it if
    it is damaged (written atomically, it can only be damaged from outside)."""
    try:
        with open(path) as f:
            payload = json.load(f)
    except FileNotFoundError:
        return default
    except json.JSONDecodeError as error:
        raise CheckpointError(
            f"{path} is not valid JSON ({error}); restore it, or delete it to start its record afresh"
        ) from None
    if not isinstance(payload, dict):
        raise CheckpointError(f"{path} holds {type(payload).__name__}, not a JSON object; restore it or delete it")
    return payload


def _write_json_atomically(path, payload):
    write_atomically(path, json.dumps(payload, indent=2))
