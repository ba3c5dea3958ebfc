"""The folder tree is the architecture: what may import what (docs/layout.md)."""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# Export and serving load what training wrote (app/model_dir) and never training itself, so
# that a serving host needs none of it; the model, decoding and the model directory are
# what both sides share.
NOT_FROM_TRAINING = [
    "export.py", "app/commands/export.py", "app/export", "app/serving", "app/commands/serve.py",
    "app/commands/client.py",
    "app/commands/translate.py", "app/commands/score.py",
    "app/model", "app/decoding", "app/model_dir", "app/cli",
    "app/visualization",
]


def imported_modules(path):
    """Every module a Python file imports, at any depth (lazy imports included)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            yield node.module
            yield from (f"{node.module}.{alias.name}" for alias in node.names)


def python_files(place):
    path = ROOT / place
    return [path] if path.is_file() else sorted(path.rglob("*.py"))


# Bottom to top (docs/layout.md): a module imports only from its own floor or lower ones.
FLOORS = [
    ["layers"],
    ["data"],
    ["app.model"],
    ["app.decoding", "app.model_dir", "app.evaluation"],
    ["app.runtime"],
    ["app.training", "app.export", "app.serving", "app.visualization"],
    # The commands' own floor: their shared flags, then the commands. The library never
    # imports either (`test_the_library_never_imports_the_commands_or_their_flags`).
    ["app.cli"],
    ["app.commands"],
]


def floor_of(module):
    """The floor of a project module (the `app/NAME.py` aliases above every package); None outside the project."""
    for floor, packages in enumerate(FLOORS):
        if any(module == package or module.startswith(package + ".") for package in packages):
            return floor
    if module == "app" or module.startswith("app."):
        return len(FLOORS)  # app/*.py: the aliases of the commands
    return None


def test_every_package_stands_on_a_floor():
    packages = {f"app.{path.parent.name}" for path in (ROOT / "app").glob("*/__init__.py")} | {"data", "layers"}
    assert packages == {p for floor in FLOORS for p in floor}, "add the package to FLOORS and docs/layout.md"


def test_imports_only_look_down():
    upward = []
    for place in ("layers", "data", "app"):
        for path in python_files(place):
            module = ".".join(path.relative_to(ROOT).with_suffix("").parts)
            own = floor_of(module)
            for imported in imported_modules(path):
                floor = floor_of(imported)
                if floor is not None and floor > own:
                    upward.append(f"{path.relative_to(ROOT)} (floor {own}) imports {imported} (floor {floor})")
    assert not upward, sorted(set(upward))


# Every package below the commands' floors.
LIBRARY = [package.replace(".", "/") for floor in FLOORS[: FLOORS.index(["app.cli"])] for package in floor]


@pytest.mark.parametrize("place", LIBRARY)
def test_the_library_never_imports_the_commands_or_their_flags(place):
    # A default the commands show in --help lives with the library code that owns it (the
    # export base in app/export/locate.py); the flags import it, never the reverse.
    upward = [
        f"{path.relative_to(ROOT)} imports {module}"
        for path in python_files(place)
        for module in imported_modules(path)
        if module.split(".")[:2] in (["app", "cli"], ["app", "commands"])
    ]
    assert not upward


@pytest.mark.parametrize("place", NOT_FROM_TRAINING)
def test_export_serving_and_what_they_share_import_nothing_from_training(place):
    files = python_files(place)
    assert files, f"{place} holds no Python file: update NOT_FROM_TRAINING"
    offending = {
        f"{path.relative_to(ROOT)}: {module}"
        for path in files
        for module in imported_modules(path)
        if module == "app.training" or module.startswith("app.training.")
    }
    assert not offending, sorted(offending)


def test_every_app_package_says_what_it_holds():
    packages = [path.parent for path in (ROOT / "app").glob("*/__init__.py")]
    assert len(packages) >= 7
    for package in packages:
        assert ast.get_docstring(ast.parse((package / "__init__.py").read_text())), f"{package} has no docstring"


def test_each_alias_only_runs_its_command():
    """`app/NAME.py` keeps `python -m app.NAME` working and holds nothing else; train and
    export run as `python train.py` and `python export.py` at the root instead."""
    aliases = sorted(path for path in (ROOT / "app").glob("*.py") if path.name != "__init__.py")
    assert [path.stem for path in aliases] == [
        "client", "evaluate", "pictures", "preflight", "prepare", "score", "serve", "translate"
    ]
    for path in aliases:
        command = path.stem
        assert (ROOT / "app" / "commands" / f"{command}.py").is_file(), path
        assert set(imported_modules(path)) == {f"app.commands.{command}", f"app.commands.{command}.main"}, path


def test_no_call_passes_more_than_six_arguments_by_position():
    """Past six, a reader counts commas to know which value is which: name them, or pass
    the configuration that holds them (docs/layout.md)."""
    crowded = [
        f"{path.relative_to(ROOT)}:{node.lineno} {ast.unparse(node.func)}(...) passes {len(node.args)} by position"
        for place in ("app", "data", "layers")
        for path in python_files(place)
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.Call) and len(node.args) > 6
    ]
    assert crowded == []


def test_every_function_fits_on_a_screen():
    """No function in app/, data/ or layers/ longer than 100 lines, from its `def` to its
    last line, nested functions counted in their parent's: split by meaning instead."""
    too_long = [
        f"{path.relative_to(ROOT)}:{node.lineno} {node.name} ({node.end_lineno - node.lineno + 1} lines)"
        for place in ("app", "data", "layers")
        for path in python_files(place)
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.end_lineno - node.lineno + 1 > 100
    ]
    assert too_long == []
