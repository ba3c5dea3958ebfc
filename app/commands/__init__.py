"""The commands, one module each: each parses its flags, builds its configurations and
calls the library (docs/layout.md).

    train.py, export.py       run as `python train.py` and `python export.py` at the root
    translate.py, score.py, evaluate.py, serve.py, client.py, pictures.py, prepare.py,
    preflight.py              run as `python -m app.NAME`: `app/NAME.py` is a thin alias,
                              so that a command's name never shadows the package that does
                              its work (`app.evaluate` beside `app/evaluation/`)

`python -m app.commands.NAME` runs any of them too, and once installed train, export,
translate, score, evaluate and serve are the console commands `transformer-NAME`.

`train_plan.py` is no command: it holds train.py's flags and `plan_run`, which turns them
into a `RunPlan` once, for train.py and the two commands that take its flags (preflight,
prepare).
"""
