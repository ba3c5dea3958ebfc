"""The commands, one module each, run as `python -m app.NAME` or their console scripts.

`app/NAME.py` is a thin alias of `app/commands/NAME.py` that keeps `python -m app.NAME`
working; `python -m app.commands.NAME` runs the same command.

`train_plan.py` is no command: it holds train.py's flags and `plan_run`, which turns them
into a `RunPlan` once, for train.py and the two commands that take its flags (preflight,
prepare).
"""
