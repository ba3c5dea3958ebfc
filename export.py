"""Exports a trained model for serving: the command is app/commands/export.py (`python export.py --help`)."""

import sys

from app.commands.export import main, parse_args  # noqa: F401  (parse_args: tests read the flags)

if __name__ == "__main__":
    sys.exit(main())
