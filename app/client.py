"""`python -m app.client`: an alias of the command in app/commands/client.py."""

from app.commands.client import main

if __name__ == "__main__":
    raise SystemExit(main())
