"""Rehearses a training run for a minute or two and says whether it will work, and how long
it will take, before you start the long one. Takes train.py's flags; writes nothing.

    python -m app.preflight --size base                       # every visible GPU
    python -m app.preflight --size base --dataset tfds:wmt14_translate/de-en --steps-per-loop 10
    python -m app.preflight --size base --cpu-replicas 2 --batch-tokens 2000   # no GPU: CPU replicas

It prints the devices TensorFlow sees (and warns of NVIDIA GPUs it does not), the
precision and XLA setting the run would take, whether its corpus is there (files that
exist, a TFDS dataset prepared or its download hosts answering), tokens per replica per step, the first
call's tracing and compiling time, the steady time per step, target tokens per second,
model FLOPs utilization against the devices' peak, peak memory, whether every replica
still holds the same weights, and the wall time of the run's training steps. The last
line is the verdict; the exit code is 1 when a check failed.

The updates are real (the run's model, optimizer, strategy, precision, step function and
batch size) but the batches are synthetic: sentences of --preflight-length tokens with
random ids. No corpus is read and no model directory is touched.
"""

import argparse
import dataclasses
import sys
from typing import TYPE_CHECKING

from app.cli.flag_types import positive_int

if TYPE_CHECKING:  # imported where the plan is made: it imports TensorFlow
    from app.training.run_plan import RunPlan


@dataclasses.dataclass(frozen=True)
class PreflightPlan:
    """A rehearsal: of which run, and for how long."""

    # The run rehearsed, planned as train.py plans it (its data_config names the corpus
    # checked; its batch_tokens, the synthetic batches' size).
    run: "RunPlan"
    # Updates timed after the first call (--preflight-steps).
    steps: int
    # Timing stops after this many seconds, even before `steps` (--preflight-seconds).
    max_seconds: int
    # Tokens in every synthetic sentence, each side (--preflight-length).
    length: int


def parse_args(argv=None):
    from app.cli.flags import add_data_arguments, add_model_arguments
    from app.commands.train_plan import add_training_arguments

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_model_arguments(parser)
    add_data_arguments(parser)
    add_training_arguments(parser)
    # What train.py's plan reads of the flags this command leaves out: a run from scratch that trains.
    parser.set_defaults(init_from=None, init_checkpoint=None, dry_run=False)
    group = parser.add_argument_group("preflight")
    group.add_argument(
        "--preflight-steps", type=positive_int, default=20,
        help="updates timed after the first call (default 20; whole calls of --steps-per-loop)",
    )
    group.add_argument(
        "--preflight-seconds", type=positive_int, default=60,
        help="stop timing after this many seconds, even before --preflight-steps (default 60)",
    )
    group.add_argument(
        "--preflight-length", type=positive_int, default=32,
        help="tokens in every synthetic sentence, each side (default 32, about a WMT sentence in 37k subwords)",
    )
    return parser.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)  # no TensorFlow yet: a bad flag costs no import
    from app.cli.quiet_tensorflow import import_tensorflow

    import_tensorflow()
    from app.cli.threads import set_cpu_threads
    from app.training.strategy import make_strategy

    try:
        set_cpu_threads(args.intra_op_threads, args.inter_op_threads)
        strategy = make_strategy(args.strategy, args.cpu_replicas)
        plan = plan_preflight(args)  # after the strategy: --precision auto may time matrix products
    except ValueError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    return run(plan, strategy)


def plan_preflight(args):
    """The `PreflightPlan` of parsed flags `args` (left as they are): the run as train.py
    plans it (`app.commands.train_plan.plan_run`), without reading a corpus. The vocabulary
    is --vocab-size, the run's own (its settings.json, if --model-dir holds one), or the
    size's.

    Raises:
        ValueError: what train.py would refuse of these flags, named.
    """
    from app.commands.train_plan import plan_run

    return PreflightPlan(
        run=plan_run(args), steps=args.preflight_steps, max_seconds=args.preflight_seconds,
        length=args.preflight_length,
    )


def run(plan, strategy, out=print):
    """Rehearses the run of `plan` (a `PreflightPlan`) under `strategy`, prints the report,
    returns the exit code."""
    import tensorflow as tf

    from app.cli.gpu_warning import nvidia_gpu_present, unseen_gpu_warning
    from app.training.peaks import device_peak
    from app.training.precision import choose_auto_precision
    from app.training.rehearsal import checks, format_duration, gpu_names, rehearse

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
    batch_tokens = data_config.batch_tokens
    auto = f" (auto: {choose_auto_precision().reason})" if plan.run.auto_precision else ""
    out(f"precision: {train_config.precision}{auto}; XLA: {'on (--jit)' if train_config.jit else 'off'}")
    out(f"model: {plan.run.size}, layers {model_config.num_layers}, d_model {model_config.d_model}, "
        f"d_ff {model_config.d_ff}, heads {model_config.num_heads}, vocabulary {model_config.vocab_size}")
    data_source, data_problem = _data_source(data_config)
    out(f"data: {data_config.dataset} {data_config.source_lang}->{data_config.target_lang}: "
        f"{data_problem or data_source}")

    rehearsal = rehearse(
        model_config, train_config, strategy, batch_tokens, length=plan.length, steps=plan.steps,
        max_seconds=plan.max_seconds,
    )
    out(f"batches: {batch_tokens} tokens a side over {replicas} replica(s), accumulating {train_config.accumulate}: "
        f"{rehearsal.tokens_per_replica_per_step} target tokens per replica per step "
        f"({rehearsal.rows_per_replica} sentences of {rehearsal.length})")
    out(f"first call: {rehearsal.first_call_seconds:.1f} s for {rehearsal.first_call_steps} update(s), "
        f"of which tracing and compiling about {rehearsal.trace_seconds:.1f} s")
    out(f"steady: {rehearsal.seconds_per_step * 1000:.1f} ms per step over {rehearsal.steps} updates "
        f"({train_config.steps_per_loop} per call), {rehearsal.tokens_per_second:,.0f} target tokens/s")
    peak, source = device_peak(gpus, train_config.precision)
    out(f"model FLOPs: {rehearsal.flops_per_second / 1e12:.3g} TFLOP/s, "
        f"{rehearsal.flops_per_second / peak:.1%} of the peak {peak / 1e12:.4g} TFLOP/s ({source})")
    memory = ", ".join(f"{value / 2**30:.2f} GiB" for value in rehearsal.peak_memory_bytes)
    out(f"peak memory: {memory}" + (" per GPU" if gpus else " (the process's resident memory)"))

    steps = train_config.train_steps
    if steps:
        budget = train_config.time_budget_minutes
        line = f"estimate: {format_duration(steps * rehearsal.seconds_per_step)} for {steps:,} steps"
        line += " (training steps only; validation and checkpoints add to it)"
        if budget:
            line += f"; --time-budget {budget:g} min ends the run sooner if it must"
        out(line)
    else:
        out(f"estimate: {format_duration(rehearsal.seconds_per_step)} per step; the run's length in steps "
            "depends on the corpus (--epochs)")

    results = checks(rehearsal, warning, data_problem, data_source)
    for check in results:
        out(f"  [{'ok' if check.passed else 'FAILED'}] {check.name}: {check.detail}")
    failed = [check.name for check in results if not check.passed]
    if failed:
        out(f"preflight failed: {'; '.join(failed)}")
        return 1
    where = ", ".join(gpus) if gpus else "the CPU"
    out(f"preflight passed: {plan.run.size} on {replicas} replica(s) ({where}), "
        + (f"about {format_duration(steps * rehearsal.seconds_per_step)} of training" if steps else "ready to train"))
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
