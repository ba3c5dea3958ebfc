"""Rehearses a training run for a few minutes and says whether it will work, and how long
it will take, before you start the long one. Takes train.py's flags; writes nothing.

    python -m app.preflight --size base                       # every visible GPU
    python -m app.preflight --size base --dataset tfds:wmt14_translate/de-en --steps-per-loop 10
    python -m app.preflight --size base --cpu-replicas 2 --batch-tokens 2000   # no GPU: CPU replicas

It prints the devices TensorFlow sees (and warns of NVIDIA GPUs it does not), the
precision and XLA setting the run would take, whether its corpus is there (files that
exist, a TFDS dataset prepared or its download hosts answering), which batches it trained
on, the first call's tracing and compiling time, the steady time per step, target tokens
per second beside what the input pipeline delivers, model FLOPs utilization of this
process's devices, peak memory, what a checkpoint and an evaluation take, whether every
replica still holds the same weights, and the run's wall time, start to finish, as a
range. The last line is the verdict; the exit code is 1 when a check failed.

The updates are real (the run's model, optimizer, strategy, precision, step function and
batch size). Where the corpus is prepared in the run's model directory (`python -m
app.prepare` with the same flags, or an earlier start of the run), they train on its own
batches, in the run's order, and an evaluation is timed on its validation set;
otherwise on synthetic batches cut by the same buckets, of the lengths of the corpus's
first pairs (or --preflight-length where it cannot be read). Checkpoints are timed in a
temporary directory; nothing is written anywhere else.
"""

import time

# The estimate's start counts from here, as train.py's time budget counts from its import.
STARTED = time.monotonic()

import argparse  # noqa: E402
import dataclasses  # noqa: E402
import sys  # noqa: E402
from typing import TYPE_CHECKING  # noqa: E402

from app.cli.flag_types import positive_int  # noqa: E402

if TYPE_CHECKING:  # imported where the plan is made: it imports TensorFlow
    from app.training.run_plan import RunPlan


@dataclasses.dataclass(frozen=True)
class PreflightPlan:
    """A rehearsal: of which run, and for how long."""

    # The run rehearsed, planned as train.py plans it (its data_config names the corpus
    # checked; its batch_tokens, the synthetic batches' size).
    run: "RunPlan"
    # Updates of each of the rehearsal's two passes over the same batches, after the first
    # call (--preflight-steps).
    steps: int
    # A pass stops after this many seconds, even before `steps` (--preflight-seconds).
    max_seconds: int
    # Tokens in every synthetic sentence, each side (--preflight-length).
    length: int


def parse_args(argv=None):
    from app.commands.train_plan import add_run_arguments

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_run_arguments(parser)  # train.py's, but fine-tuning's and --dry-run: a run from scratch that trains
    group = parser.add_argument_group("preflight")
    group.add_argument(
        "--preflight-steps", type=positive_int, default=20,
        help="updates of each of the two timed passes over the same batches, after the first call: the first "
        "meets their shapes, the second gives the steady pace (default 20; whole calls of --steps-per-loop)",
    )
    group.add_argument(
        "--preflight-seconds", type=positive_int, default=60,
        help="end a timed pass after this many seconds, even before --preflight-steps (default 60)",
    )
    group.add_argument(
        "--preflight-length", type=positive_int, default=32,
        help="tokens in every synthetic sentence, each side, where the corpus can be neither read nor "
        "found prepared (default 32, about a WMT sentence in 37k subwords)",
    )
    return parser.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)  # no TensorFlow yet: a bad flag costs no import
    from app.runtime.quiet_tensorflow import import_tensorflow

    import_tensorflow()
    from app.commands.train_plan import device_config_from_args
    from app.training.devices import start_devices

    try:
        devices = device_config_from_args(args)
        strategy = start_devices(devices, log=None)  # its report says what it runs on
        plan = plan_preflight(args, devices)  # after the strategy: --precision auto may time matrix products
    except ValueError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    return run(plan, strategy)


def plan_preflight(args, devices):
    """The `PreflightPlan` of parsed flags `args` (left as they are) on `devices`
    (`train_plan.device_config_from_args`): the run as train.py plans it
    (`app.commands.train_plan.plan_run`), without reading a corpus. The vocabulary
    is --vocab-size, the run's own (its settings.json, if --model-dir holds one), or the
    size's.

    Raises:
        ValueError: what train.py would refuse of these flags, named.
    """
    from app.commands.train_plan import plan_run

    return PreflightPlan(
        run=plan_run(args, devices), steps=args.preflight_steps, max_seconds=args.preflight_seconds,
        length=args.preflight_length,
    )


def run(plan, strategy, out=print, started=None):
    """Rehearses the run of `plan` (a `PreflightPlan`) under `strategy`, prints the report,
    returns the exit code. `started`: `time.monotonic()` when the command began."""
    import tensorflow as tf

    from app.runtime.gpu_warning import nvidia_gpu_present, unseen_gpu_warning
    from app.training.precision import choose_auto_precision
    from app.training.rehearsal import gpu_names

    started = STARTED if started is None else started
    out(f"TensorFlow {tf.version.VERSION}; devices: {_describe_devices(tf)}")
    warning = unseen_gpu_warning(
        nvidia_gpu_present(), len(tf.config.list_physical_devices("GPU")), tf.version.VERSION
    )
    if warning:
        out(warning)
    gpus = gpu_names(strategy)
    replicas = strategy.num_replicas_in_sync
    out(f"strategy: {type(strategy).__name__} over {replicas} replica(s)"
        + (f": {', '.join(gpus)}" if gpus else " on the CPU"))
    model_config, train_config, data_config = plan.run.model_config, plan.run.train_config, plan.run.data_config
    auto = f" (auto: {choose_auto_precision().reason})" if plan.run.auto_precision else ""
    out(f"precision: {train_config.precision}{auto}; XLA: {'on (--jit)' if train_config.jit else 'off'}")
    data_source, data_problem = _data_source(data_config)
    out(f"data: {data_config.dataset} {data_config.source_lang}->{data_config.target_lang}: "
        f"{data_problem or data_source}")
    corpus = _rehearsal_data(plan, replicas, readable=data_problem is None)
    if corpus.data is not None:
        model_config = dataclasses.replace(model_config, vocab_size=corpus.data.tokenizer.vocab_size)
    out(f"model: {plan.run.size}, layers {model_config.num_layers}, d_model {model_config.d_model}, "
        f"d_ff {model_config.d_ff}, heads {model_config.num_heads}, vocabulary {model_config.vocab_size}")
    rehearsal, extras, measured, pipeline = _measure(plan, strategy, model_config, corpus, started)
    _report(plan, rehearsal, extras, pipeline, gpus, out)
    _report_estimate(plan, corpus, measured, rehearsal, out)
    from app.training.rehearsal import checks

    return _verdict(plan, rehearsal, checks(rehearsal, warning, data_problem, data_source), gpus, out)


@dataclasses.dataclass(frozen=True)
class _RehearsalData:
    """What the rehearsal trains on, and what it knows of the run's data."""

    batches: object  # RehearsalBatches
    data: object  # the prepared corpus (data.dataset.PreparedData), or None
    total_steps: object  # the run's length in steps; None where it depends on a corpus not prepared


def _rehearsal_data(plan, replicas, readable):
    """The prepared corpus's batches where the run's model directory holds them; else
    synthetic batches of the corpus's sampled lengths, or of one length."""
    import numpy as np

    from app.training.rehearsal_batches import SUBWORDS_PER_WORD, corpus_batches, sampled_lengths, synthetic_batches
    from app.training.run_length import run_length
    from data.buckets import BucketScheme
    from data.corpora import open_corpus
    from data.dataset import open_prepared
    from data.errors import DataError

    run, length = plan.run, plan.length
    data_config, train_config = run.data_config, run.train_config
    data = None
    if readable:
        try:
            data = open_prepared(data_config, run.model_dir, replicas)
        except DataError:
            data = None
    if data is not None:
        return _RehearsalData(corpus_batches(data, train_config.seed), data, run_length(train_config, data))
    scheme = BucketScheme.for_budget(data_config.batch_tokens, data_config.max_length, replicas)
    lengths = None
    if readable:
        corpus = open_corpus(data_config.dataset, data_config.source_lang, data_config.target_lang)
        lengths = sampled_lengths(corpus.pairs("train"), data_config.max_length)
    if lengths is not None:
        # Drawn again to a corpus's size: a bucket of a 2,000-pair sample would end in a
        # part-filled batch far more often than one of the whole corpus does.
        sampled = len(lengths[0])
        pairs = 100 * data_config.batch_tokens // max(1, int(lengths[1].mean()))
        drawn = np.random.default_rng(train_config.seed).integers(0, len(lengths[0]), max(pairs, len(lengths[0])))
        lengths = (lengths[0][drawn], lengths[1][drawn])
        description = (f"synthetic: the lengths of the corpus's first {sampled:,} pairs, in words x "
                       f"{SUBWORDS_PER_WORD} "
                       f"(not prepared in {run.model_dir}: `python -m app.prepare` with these flags for its own)")
    else:
        count = max(1, 4 * data_config.batch_tokens // length)
        lengths = ([length] * count, [length + 1] * count)
        description = f"synthetic: sentences of {length} tokens (--preflight-length; the corpus cannot be read)"
    batches = synthetic_batches(
        *lengths, scheme, run.model_config.vocab_size, train_config.seed, description, gold=train_config.guided
    )
    return _RehearsalData(batches, None, train_config.train_steps)


def _measure(plan, strategy, model_config, corpus, started):
    """`(Rehearsal, RunExtras, run_estimate.Measured, input pipeline tokens/s)`."""
    from app.training.rehearsal import build_run, input_pipeline_rate, rehearse, time_run_extras
    from app.training.run_estimate import Measured

    train_config = plan.run.train_config
    parts = build_run(model_config, train_config, strategy, corpus.total_steps)
    startup = time.monotonic() - started
    rehearsal = rehearse(
        parts, model_config, train_config, strategy, corpus.batches, steps=plan.steps, max_seconds=plan.max_seconds
    )
    evaluate_fn = None
    if corpus.data is not None and plan.run.bleu:
        from app.training.validation import make_bleu_evaluator

        validation = corpus.data.text["validation"]
        evaluate_fn = make_bleu_evaluator(
            corpus.data.tokenizer, list(validation.source), list(validation.target), train_config.eval_sentences
        )
    extras = time_run_extras(parts, model_config, train_config, strategy, corpus.data, evaluate_fn)
    pipeline = input_pipeline_rate(corpus.batches)
    # The rehearsed batches are a sample of the run's: the pace scaled by how much more (or
    # less) the run's batches compute on average, on their padded shapes.
    run_batches = (corpus.total_steps or plan.steps) * train_config.accumulate
    rehearsed = corpus.batches.mean_padded_flops(model_config, plan.steps * train_config.accumulate)
    scale = corpus.batches.mean_padded_flops(model_config, run_batches) / rehearsed
    measured = Measured(
        startup_seconds=startup, first_call_seconds=rehearsal.first_call_seconds,
        first_call_steps=rehearsal.first_call_steps, first_call_shapes=rehearsal.first_call_shapes,
        seconds_per_step=rehearsal.seconds_per_step * scale, step_time_error=rehearsal.step_time_error * scale,
        seconds_per_new_shape=rehearsal.seconds_per_new_shape,
        checkpoint_seconds=extras.checkpoint_seconds, best_save_seconds=extras.best_save_seconds,
        first_evaluation_seconds=extras.first_evaluation_seconds, evaluation_seconds=extras.evaluation_seconds,
    )
    return rehearsal, extras, measured, pipeline


def _report(plan, rehearsal, extras, pipeline, gpus, out):
    """The rehearsal's measurements, one line each."""
    from app.training.peaks import device_peak

    train_config, data_config = plan.run.train_config, plan.run.data_config
    out(f"batches: {rehearsal.batches}")
    out(f"  {data_config.batch_tokens} tokens a side over {rehearsal.replicas} replica(s), accumulating "
        f"{train_config.accumulate}: {rehearsal.tokens_per_step / rehearsal.local_replicas:,.0f} target tokens "
        "(padding excluded) per replica per step")
    out(f"first call: {rehearsal.first_call_seconds:.1f} s for {rehearsal.first_call_steps} update(s), "
        f"of which tracing and compiling about {rehearsal.trace_seconds:.1f} s")
    compiles = (f"; a new batch shape's first batch {rehearsal.seconds_per_new_shape:.2f} s more"
                + (" (its XLA compile)" if rehearsal.jit else ""))
    out(f"steady: {rehearsal.seconds_per_step * 1000:.1f} ms per step (+-{rehearsal.step_time_error * 1000:.1f}) over "
        f"{rehearsal.steps} updates ({train_config.steps_per_loop} per call), "
        f"{rehearsal.tokens_per_second:,.0f} target tokens/s{compiles}")
    keeps_up = pipeline >= rehearsal.tokens_per_second
    out(f"input pipeline: {pipeline:,.0f} target tokens/s alone, "
        f"{pipeline / rehearsal.tokens_per_second:.1f}x what training takes"
        + ("" if keeps_up else " -- warning: it cannot keep up; the run will wait for its batches "
           "(more cores, or data prepared on a faster disk)"))
    peak = device_peak(gpus, train_config.precision)
    out(f"model FLOPs: {rehearsal.flops_per_second / 1e12:.3g} TFLOP/s on this process's {rehearsal.local_replicas} "
        f"replica(s), {rehearsal.flops_per_second / peak.total:.1%} of the peak {peak.describe()}")
    memory = ", ".join(f"{value / 2**30:.2f} GiB" for value in rehearsal.peak_memory_bytes)
    out(f"peak memory: {memory}" + (" per GPU" if gpus else " (the process's resident memory)"))
    evaluation = ""
    if extras.evaluation_seconds is not None:
        evaluation = (f"; an evaluation {extras.evaluation_seconds:.1f} s "
                      f"(the first {extras.first_evaluation_seconds:.1f} s)")
    out(f"a checkpoint: {extras.checkpoint_seconds:.1f} s{evaluation}")


def _report_estimate(plan, corpus, measured, rehearsal, out):
    """The run's wall time, start to finish, as a range, and what it is made of."""
    from app.training.rehearsal import format_duration
    from app.training.run_estimate import estimate_run, run_schedule

    train_config = plan.run.train_config
    steps = corpus.total_steps
    if not steps:
        out(f"estimate: {format_duration(rehearsal.seconds_per_step)} per step; the run's length in steps "
            "depends on the corpus (--epochs): prepare it first for the whole run's estimate")
        return
    shapes = len(corpus.batches.run_shapes(steps * train_config.accumulate))
    out(f"the run's batches: {shapes} shapes, {measured.seconds_per_step / rehearsal.seconds_per_step:.2f}x the "
        f"rehearsed ones' FLOPs on average (padded): {measured.seconds_per_step * 1000:.1f} ms per step over the run")
    estimate = estimate_run(run_schedule(train_config, steps, shapes), measured)
    parts = ", ".join(f"{name} {format_duration(seconds)}" for name, seconds in estimate.parts.items())
    line = (f"estimate: {format_duration(estimate.seconds)} ({format_duration(estimate.low)} to "
            f"{format_duration(estimate.high)}) for {steps:,} steps, start to finish: {parts}")
    if not estimate.evaluations_measured:
        line += "; evaluations not included (no prepared corpus to evaluate on), nor the data's preparation"
    budget = train_config.time_budget_minutes
    if budget:
        line += f"; --time-budget {budget:g} min ends the run sooner if it must"
    out(line)


def _verdict(plan, rehearsal, results, gpus, out):
    """Prints each check and the verdict; returns the exit code."""
    for check in results:
        out(f"  [{'ok' if check.passed else 'FAILED'}] {check.name}: {check.detail}")
    failed = [check.name for check in results if not check.passed]
    if failed:
        out(f"preflight failed: {'; '.join(failed)}")
        return 1
    where = ", ".join(gpus) if gpus else "the CPU"
    out(f"preflight passed: {plan.run.size} on {rehearsal.replicas} replica(s) ({where})")
    return 0


def _data_source(data_config):
    """`(where the corpus of `data_config` comes from, None)`, or `(None, why it cannot be
    read)`: files checked to exist, a TFDS builder prepared or its hosts answering; nothing read."""
    from data.corpora import describe_source
    from data.errors import DataError

    try:
        return describe_source(data_config.dataset, data_config.source_lang, data_config.target_lang), None
    except DataError as error:
        return None, str(error)


def _describe_devices(tf):
    """"1 CPU, 8 GPU" as TensorFlow lists its physical devices."""
    kinds = {}
    for device in tf.config.list_physical_devices():
        kinds[device.device_type] = kinds.get(device.device_type, 0) + 1
    return ", ".join(f"{count} {kind}" for kind, count in kinds.items())


if __name__ == "__main__":
    sys.exit(main())
