"""`python -m app.export_model`: an alias of the command in app/commands/export.py."""

from app.commands.export import main

if __name__ == "__main__":
    raise SystemExit(main())
