"""The `--output` file of a command that writes text: app.translate, app.score, app.evaluate
(and app.translate's `--alignments`, checked and written the same way).

    problem = output_file_problem(args.output, {"--input": args.input}, "the translations")
    if problem:
        parser.error(problem)           # before the model loads
    ...
    return write_output(args.output, text)   # stdout where there is no --output

A command writes its output only once all of it is computed, so a path that cannot take
it is refused first, for nothing to be lost to it; and the file is written whole or not
at all (data.atomic_files): a full disk or a kill mid-write leaves any earlier file as it
was.
"""

import os
import sys

# The name of standard input, as a command's file flags take it.
STDIN = "-"


def output_file_problem(path, inputs, what, flag="--output"):
    """Why `flag path` cannot take the command's output, or None.

    Args:
        path: the `--output` flag's value (or another output file's: `flag`).
        inputs: `{flag: path}` of the files the command reads, or writes besides this one
            (app.translate's --alignments and --output); `STDIN` and None are skipped. The
            output must not overwrite any of them.
        what: what the file is to hold, for the messages ("the translations").
        flag: the flag that names `path`, for the messages.
    """
    if os.path.isdir(path):
        return f"{flag} {path} is a directory; name a file to write {what} to"
    directory = os.path.dirname(path) or "."
    if not os.path.isdir(directory):
        problem = "is not a directory" if os.path.exists(directory) else "does not exist"
        return f"{flag} {path}: its directory {directory} {problem}"
    if not os.access(directory, os.W_OK):
        return f"{flag} {path}: its directory {directory} is not writable"
    for other, read in inputs.items():
        if read not in (None, STDIN) and _same_file(path, read):
            return f"{flag} {path} is the {other} file; {what} would overwrite it"
    return None


def _same_file(path, other):
    """Whether two paths name one file: the same file by any name, or, for a file not yet
    written, the same path."""
    if os.path.exists(path) and os.path.exists(other):
        return os.path.samefile(path, other)
    return os.path.realpath(path) == os.path.realpath(other)


def write_output(path, text, flag="--output"):
    """Writes `text` to the file `path`, whole or not at all, or as UTF-8 to standard
    output where `path` is None. Returns the exit status: 0, or 1 after saying on
    standard error why the file could not be written (checked by `output_file_problem`
    before the work, but a disk can fill meanwhile); `flag` names `path` there."""
    if path is None:
        sys.stdout.buffer.write(text.encode("utf-8"))
        sys.stdout.flush()
        return 0
    from data.atomic_files import write_atomically

    try:
        write_atomically(path, text)
    except OSError as error:
        print(f"error: could not write {flag} {path}: {error}", file=sys.stderr)
        return 1
    return 0
