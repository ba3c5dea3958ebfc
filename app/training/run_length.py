"""How long a run is, in optimizer steps: from `train_steps` and `epochs`, how many of its
first epochs train in both directions, and the length a resumed run picks up again."""

from app.training.time_budget import cooldown_has_begun


def run_length(config, data):
    """The run's length in optimizer steps, from `train_steps` and `epochs` (an epoch
    counted as one pass over the pairs one way).

    Raises:
        ValueError: if an epoch holds fewer batches than one update accumulates.
    """
    batches = len(data.train_plan(0, config.seed))
    steps_per_epoch = batches // config.accumulate
    if steps_per_epoch < 1:
        raise ValueError(
            f"the training data makes {batches} batches per epoch, fewer than --accumulate {config.accumulate}"
        )
    return _total_steps(config, steps_per_epoch)


def plan_bidirectional_epochs(config, data, max_steps, log):
    """How many epochs, from the first, train in both directions: the whole epochs that
    fit in `config.bidirectional_fraction` of the run's `max_steps`.

    Whole epochs, so that an epoch is one order of one set of pairs and a resumed run
    picks up the same batches. A corpus whose one epoch in both directions is longer
    than that fraction (WMT at most lengths) gets none, and the log says so.
    """
    if not config.bidirectional_fraction:
        return 0
    plan = data.train_plan(0, config.seed, both_directions=True)
    steps_per_epoch = len(plan) // config.accumulate
    epochs = int(config.bidirectional_fraction * max_steps) // max(steps_per_epoch, 1)
    forward = f"{data.config.source_lang}->{data.config.target_lang}"
    backward = f"{data.config.target_lang}->{data.config.source_lang}"
    if epochs == 0:
        log(
            f"bidirectional training off: one epoch of {forward} and {backward} is {steps_per_epoch:,} steps, "
            f"more than {config.bidirectional_fraction:.0%} of the run's {max_steps:,}"
        )
    else:
        steps = epochs * steps_per_epoch
        which = "the first epoch trains" if epochs == 1 else f"the first {epochs} epochs train"
        log(
            f"bidirectional training: {which} ({steps:,} steps, {steps / max_steps:.0%} of the run) "
            f"on {forward} and {backward} together, the rest on {forward}"
        )
    return epochs


def _total_steps(config, steps_per_epoch):
    limits = []
    if config.train_steps is not None:
        limits.append(config.train_steps)
    if config.epochs is not None:
        limits.append(config.epochs * steps_per_epoch)
    return min(limits)


def resumed_plan(config, progress, max_steps):
    """The run's length and cooldown on (re)starting: `max_steps` and its cooldown, unless a
    time budget had already moved the end and the cooldown of that run has begun, which
    keeps both as the checkpoint has them (the cooldown possibly re-sloped,
    `app.training.time_budget.cooldown_for_new_end`)."""
    planned, cooldown = int(progress.planned_steps), int(progress.cooldown_steps)
    step = int(progress.step)
    if config.time_budget_minutes and 0 < planned <= max_steps and cooldown_has_begun(step, planned, cooldown):
        return planned, cooldown
    return max_steps, config.resolved_cooldown(max_steps)
