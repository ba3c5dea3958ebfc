"""`python -m app.evaluate`: an alias of the command in app/commands/evaluate.py."""

from app.commands.evaluate import main

if __name__ == "__main__":
    raise SystemExit(main())
