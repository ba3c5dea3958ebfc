"""`python -m app.serve`: an alias of the command in app/commands/serve.py."""

from app.commands.serve import main

if __name__ == "__main__":
    raise SystemExit(main())
