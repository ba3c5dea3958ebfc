"""The Python examples of the documentation run: every fenced ```python block of every
Markdown file (docs/, the README, ...) runs in a fresh interpreter and must exit 0.

How a block gets what a reader would have:

- **Its own process**, from a scratch directory, with the repository on `PYTHONPATH` (as
  from the repository root): a block may set TensorFlow's threads before its first op.
- **An export** at `saved_models/translator`, the path the docs use: a link to the test
  run's shared export (conftest.py's `exported`), made in that scratch directory when the
  block names `saved_models/`.
- **A server** at the docs' addresses: `http://localhost:8501` (REST) and `localhost:8500`
  (gRPC) are replaced by those of the test run's shared `python -m app.serve` of that
  export (conftest.py's `tiny_server`), when the block names either.
- **Names it only uses**, such as `source_ids` in docs/training.md, from `GIVEN`, put
  before the block: small values of the documented shapes and types.

A block that cannot run here (a GPU, the network) says so on the line above its fence,
`<!-- not run: the reason -->`, and is skipped with that reason.
"""

import ast
import builtins
import os
import re
import subprocess
import sys
import textwrap

import pytest

from tests.test_docs import REPO_ROOT, markdown_files

FENCE = re.compile(r"^\s*```(python|py)\s*$")
NOT_RUN = re.compile(r"^\s*<!--\s*not run:\s*(.*?)\s*-->\s*$")
REST_ADDRESS, GRPC_ADDRESS = "http://localhost:8501", "localhost:8500"

# The values of names a block uses without defining them, as Python put before it.
GIVEN = {
    "source_ids": "source_ids = numpy.array([[4, 5, 6, 2], [7, 8, 2, 0]], 'int32')  # [B, S], 0 = padding",
    "target_ids": "target_ids = numpy.array([[1, 9, 10], [1, 11, 0]], 'int32')  # [B, T], from the start token",
    "batch_size": "batch_size = 2",
    "token_ids": "token_ids = numpy.array([1, 1], 'int32')  # [N]: each hypothesis's start token",
    "step": "step = 0",
}


def python_blocks():
    """`(path, line of the fence, code, why it is not run or None)` for each ```python block."""
    blocks = []
    for path in markdown_files():
        lines = path.read_text(encoding="utf-8").split("\n")
        index = 0
        while index < len(lines):
            if FENCE.match(lines[index]):
                end = next(i for i in range(index + 1, len(lines)) if lines[i].strip() == "```")
                code = textwrap.dedent("\n".join(lines[index + 1:end])) + "\n"
                above = NOT_RUN.match(lines[index - 1]) if index else None
                blocks.append((path, index + 1, code, above.group(1) if above else None))
                index = end
            index += 1
    return blocks


BLOCKS = python_blocks()


def block_id(block):
    path, line, _, _ = block
    return f"{path.relative_to(REPO_ROOT)}:{line}"


def free_names(code):
    """The names `code` reads but neither assigns, imports nor has as a builtin."""
    tree = ast.parse(code)
    bound, read = set(dir(builtins)), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            (read if isinstance(node.ctx, ast.Load) else bound).add(node.id)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            bound.update((alias.asname or alias.name).split(".")[0] for alias in node.names)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bound.add(node.name)
        elif isinstance(node, ast.arg):
            bound.add(node.arg)
    return read - bound


def test_the_docs_have_python_examples():
    # The pages that teach the Python API keep theirs; losing one here means a broken fence.
    pages = {str(path.relative_to(REPO_ROOT)) for path, _, _, _ in BLOCKS}
    assert {"docs/python.md", "docs/serving.md", "docs/training.md"} <= pages


@pytest.mark.parametrize("block", BLOCKS, ids=block_id)
def test_each_block_parses_and_has_what_it_needs(block):
    _, _, code, not_run = block
    if not_run is not None:
        assert not_run, "say why a block is not run: <!-- not run: the reason -->"
        return
    unknown = free_names(code) - set(GIVEN)  # a SyntaxError fails here, before anything runs
    assert not unknown, f"the block uses {sorted(unknown)}, which it does not define: define them or add them to GIVEN"


@pytest.mark.slow
@pytest.mark.parametrize("block", BLOCKS, ids=block_id)
def test_each_block_runs(block, request, tmp_path):
    _, _, code, not_run = block
    if not_run is not None:
        pytest.skip(f"not run: {not_run}")
    if "saved_models/" in code:
        _, base, _, _ = request.getfixturevalue("exported")
        (tmp_path / "saved_models").mkdir()
        (tmp_path / "saved_models" / "translator").symlink_to(base)
    if REST_ADDRESS in code or GRPC_ADDRESS in code:
        server = request.getfixturevalue("tiny_server")
        code = code.replace(REST_ADDRESS, server.url).replace(GRPC_ADDRESS, server.grpc_address)
    given = [GIVEN[name] for name in sorted(free_names(code))]
    if given:
        code = "\n".join(["import numpy", *given, code])
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "TF_CPP_MIN_LOG_LEVEL": "3"}
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, f"{block_id(block)} failed:\n{result.stderr[-3000:]}"
    if "print(" in code:
        assert result.stdout.strip(), f"{block_id(block)} printed nothing"
