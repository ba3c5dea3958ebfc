"""`python -m app.preflight`: an alias of the command in app/commands/preflight.py."""

from app.commands.preflight import main

if __name__ == "__main__":
    raise SystemExit(main())
