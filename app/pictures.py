"""`python -m app.pictures`: an alias of the command in app/commands/pictures.py."""

from app.commands.pictures import main

if __name__ == "__main__":
    raise SystemExit(main())
