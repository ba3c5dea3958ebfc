"""The package: pyproject.toml declares what the code imports, agrees with the pins of
requirements*.txt and constraints.txt, and builds a wheel with its data and commands."""

import ast
import importlib
import importlib.metadata
import os
import re
import shutil
import subprocess
import sys
import tomllib
import zipfile

import pytest
from packaging.requirements import Requirement

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGES = ("app", "data", "layers")
# Imported only under another Keras backend than TensorFlow (the layers run there too, as
# the GPU benchmarks time them): the user who picks that backend installs it.
OTHER_BACKENDS = {"jax"}

with open(os.path.join(ROOT, "pyproject.toml"), "rb") as _file:
    PROJECT = tomllib.load(_file)["project"]


def _requirements(names):
    return [Requirement(line) for line in names]


def _pins(filename):
    """{distribution: version} of the `name==version` lines of a requirements file."""
    pins = {}
    with open(os.path.join(ROOT, filename)) as file:
        for line in file:
            line = line.split("#", 1)[0].strip()
            if line and not line.startswith("-"):
                requirement = Requirement(line)
                (specifier,) = requirement.specifier
                pins[_canonical(requirement.name)] = specifier.version
    return pins


def _canonical(name):
    return re.sub(r"[-_.]+", "-", name).lower()


def _declared():
    """{distribution: Requirement} of the core dependencies and every extra, self-references out."""
    declared = {_canonical(r.name): r for r in _requirements(PROJECT["dependencies"])}
    for extra in PROJECT["optional-dependencies"].values():
        for requirement in _requirements(extra):
            if _canonical(requirement.name) != _canonical(PROJECT["name"]):
                declared[_canonical(requirement.name)] = requirement
    return declared


def _third_party_imports():
    """{top-level module: first file importing it} over the package sources."""
    local = set(PACKAGES) | {"train", "export"}
    found = {}
    for package in PACKAGES:
        for directory, _, files in os.walk(os.path.join(ROOT, package)):
            for name in sorted(files):
                if not name.endswith(".py"):
                    continue
                path = os.path.join(directory, name)
                with open(path) as file:
                    tree = ast.parse(file.read())
                for node in ast.walk(tree):
                    if isinstance(node, ast.Import):
                        modules = [alias.name for alias in node.names]
                    elif isinstance(node, ast.ImportFrom) and node.level == 0:
                        modules = [node.module]
                    else:
                        continue
                    for module in modules:
                        top = module.split(".")[0]
                        if top not in sys.stdlib_module_names and top not in local | OTHER_BACKENDS:
                            found.setdefault(top, os.path.relpath(path, ROOT))
    return found


def test_every_imported_distribution_is_declared():
    distributions = importlib.metadata.packages_distributions()
    declared = _declared()
    missing = []
    for module, path in sorted(_third_party_imports().items()):
        names = {_canonical(name) for name in distributions.get(module, [module])}
        if not names & set(declared):
            missing.append(f"{module} (imported by {path}, from {sorted(names)})")
    assert not missing, "imported but not declared in pyproject.toml: " + "; ".join(missing)


def test_the_runtime_set_leaves_out_the_test_and_benchmark_tools():
    core = {_canonical(r.name) for r in _requirements(PROJECT["dependencies"])}
    assert {"numpy", "protobuf", "tensorflow", "tensorflow-text", "keras"} <= core
    assert not core & {"keras-hub", "pytest", "matplotlib", "aiohttp", "tensorflow-datasets", "ctranslate2"}
    assert "keras-hub" not in _pins("requirements.txt")


@pytest.mark.parametrize(
    "filename",
    ["requirements.txt", "requirements-test.txt", "requirements-ctranslate2.txt", "requirements-alignment.txt"],
)
def test_the_pins_satisfy_pyproject_and_match_the_constraints(filename):
    declared, constraints = _declared(), _pins("constraints.txt")
    for name, version in _pins(filename).items():
        pinned = constraints.get(name)
        assert pinned == version, f"{filename} pins {name}=={version}, constraints.txt {pinned}"
        if name in declared:
            range_ = declared[name]
            assert range_.specifier.contains(version), f"{name}=={version} is outside pyproject's {range_}"


def test_every_declared_distribution_is_pinned_by_the_constraints():
    constraints = _pins("constraints.txt")
    for name, requirement in _declared().items():
        assert name in constraints, f"{name} is declared in pyproject.toml but not pinned in constraints.txt"
        assert requirement.specifier.contains(constraints[name]), f"constraints.txt's {name} is outside {requirement}"


def test_console_commands_name_functions():
    for command, target in PROJECT["scripts"].items():
        module, function = target.split(":")
        assert callable(getattr(importlib.import_module(module), function)), command


@pytest.mark.slow
def test_the_wheel_holds_the_packages_data_and_commands(tmp_path):
    # Built from a copy: setuptools writes build/ and *.egg-info beside the sources.
    source = tmp_path / "source"
    listed = subprocess.run(["git", "-C", ROOT, "ls-files", "--cached", "--others", "--exclude-standard"],
                            check=True, capture_output=True, text=True).stdout.splitlines()
    for name in listed:
        if os.path.isfile(os.path.join(ROOT, name)):
            os.makedirs(source / os.path.dirname(name), exist_ok=True)
            shutil.copy2(os.path.join(ROOT, name), source / name)
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(tmp_path), source],
        check=True, capture_output=True, text=True,
    )
    (wheel,) = tmp_path.glob("transformer_mt-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        entry_points = next(archive.read(name).decode() for name in names if name.endswith("entry_points.txt"))
    wanted = {
        "app/serving/static/index.html", "data/multi30k/train.en.gz", "layers/__init__.py", "app/commands/score.py",
        # The page's modules, and the sentence splitter's wasm a folder further down.
        "app/serving/static/markup.js", "app/serving/static/vendor/sentencex/sentencex_wasm_bg.wasm",
    }
    assert wanted <= names
    assert not any(name.startswith(("tests/", "benchmarks/")) for name in names)
    for command, target in PROJECT["scripts"].items():
        assert f"{command} = {target}" in entry_points
