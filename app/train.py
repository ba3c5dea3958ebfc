"""`python -m app.train`: an alias of the command in app/commands/train.py."""

from app.commands.train import main

if __name__ == "__main__":
    raise SystemExit(main())
