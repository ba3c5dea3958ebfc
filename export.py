"""Exports a trained model for serving: the command is app/export_model.py (`python export.py --help`)."""

import sys

from app.export_model import main, parse_args  # noqa: F401  (parse_args: tests read the flags)

if __name__ == "__main__":
    sys.exit(main())
