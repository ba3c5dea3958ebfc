"""`python -m app.prepare`: an alias of the command in app/commands/prepare.py."""

from app.commands.prepare import main

if __name__ == "__main__":
    raise SystemExit(main())
