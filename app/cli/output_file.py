"""The `--output` file of a command that writes text: app.translate, app.score, app.evaluate.

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


def output_file_problem(path, inputs, what):
    """Why `--output path` cannot take the command's output, or None.

    Args:
        path: the `--output` flag's value.
        inputs: `{flag: path}` of the files the command reads; `STDIN` and None are
            skipped. The output must not overwrite any of them.
        what: what the file is to hold, for the messages ("the translations").
    """
    if os.path.isdir(path):
        return f"--output {path} is a directory; name a file to write {what} to"
    directory = os.path.dirname(path) or "."
    if not os.path.isdir(directory):
        problem = "is not a directory" if os.path.exists(directory) else "does not exist"
        return f"--output {path}: its directory {directory} {problem}"
    if not os.access(directory, os.W_OK):
        return f"--output {path}: its directory {directory} is not writable"
    for flag, read in inputs.items():
        if read not in (None, STDIN) and os.path.exists(path) and os.path.samefile(path, read):
            return f"--output {path} is the {flag} file; {what} would overwrite it"
    return None


def write_output(path, text):
    """Writes `text` to the file `path`, whole or not at all, or as UTF-8 to standard
    output where `path` is None. Returns the exit status: 0, or 1 after saying on
    standard error why the file could not be written (checked by `output_file_problem`
    before the work, but a disk can fill meanwhile)."""
    if path is None:
        sys.stdout.buffer.write(text.encode("utf-8"))
        sys.stdout.flush()
        return 0
    from data.atomic_files import write_atomically

    try:
        write_atomically(path, text)
    except OSError as error:
        print(f"error: could not write --output {path}: {error}", file=sys.stderr)
        return 1
    return 0
