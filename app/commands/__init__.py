"""The commands, one module each, run as `python -m app.NAME` or their console scripts.

`app/NAME.py` is a thin alias of `app/commands/NAME.py` that keeps `python -m app.NAME`
working; `python -m app.commands.NAME` runs the same command.
"""
