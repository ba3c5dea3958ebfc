"""`python -m app.score`: an alias of the command in app/commands/score.py."""

from app.commands.score import main

if __name__ == "__main__":
    raise SystemExit(main())
