"""`python -m app.translate`: an alias of the command in app/commands/translate.py."""

from app.commands.translate import main

if __name__ == "__main__":
    raise SystemExit(main())
