"""The documentation's links hold: every relative link in a Markdown file names a file
that exists and, with an anchor, a heading of that file (GitHub's slugs); every page of
docs/ is at most `MAX_PAGE_LINES` long; every lab notebook entry is named by its date and
listed in the notebook's index; docs/layout.md's tree and tables name every package and
module, and only ones that exist. (tests/test_doc_examples.py runs the pages' Python.)"""

import re
import subprocess
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
NOTEBOOK = REPO_ROOT / "docs" / "lab-notebook"
SKIPPED_DIRS = {".venv", ".git", "runs", "saved_models", "node_modules"}

LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def markdown_files():
    return sorted(
        path for path in REPO_ROOT.rglob("*.md")
        if not any(part in SKIPPED_DIRS or part.startswith(".") for part in path.relative_to(REPO_ROOT).parts)
    )


def prose_lines(text):
    """The lines outside fenced code blocks."""
    inside = False
    for line in text.split("\n"):
        if line.lstrip().startswith("```"):
            inside = not inside
        elif not inside:
            yield line


def slug(heading):
    """GitHub's anchor for a heading: lowercased, punctuation but hyphens dropped,
    spaces as hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(path):
    """The anchors of `path`'s headings, a repeated one suffixed -1, -2, ... as GitHub does."""
    seen, result = {}, set()
    for line in prose_lines(path.read_text(encoding="utf-8")):
        match = re.match(r"^#{1,6} (.*)", line)
        if match:
            base = slug(match.group(1))
            count = seen.get(base, 0)
            seen[base] = count + 1
            result.add(base if count == 0 else f"{base}-{count}")
    return result


def test_slug_matches_githubs():
    assert slug("`--precision auto` times the products") == "--precision-auto-times-the-products"
    assert slug("All 16,000 steps, on an H200") == "all-16000-steps-on-an-h200"
    assert slug("Tiny's recipe, eight seeds at a time, on a GPU") == "tinys-recipe-eight-seeds-at-a-time-on-a-gpu"


@pytest.mark.parametrize("path", markdown_files(), ids=lambda p: str(p.relative_to(REPO_ROOT)))
def test_relative_links_resolve(path):
    broken = []
    for line in prose_lines(path.read_text(encoding="utf-8")):
        for target in LINK.findall(line):
            if re.match(r"^[a-z]+:", target):  # https:, mailto:
                continue
            file_part, _, anchor = target.partition("#")
            linked = (path.parent / file_part).resolve() if file_part else path
            if not linked.exists():
                broken.append(f"{target}: no such file")
            elif anchor and linked.suffix == ".md" and anchor not in anchors(linked):
                broken.append(f"{target}: no heading with that anchor")
    assert not broken, f"{path.relative_to(REPO_ROOT)}: " + "; ".join(broken)


# A page a reader can hold in mind; a longer one is split by topic, each part linking the other.
MAX_PAGE_LINES = 800


def test_every_docs_page_is_at_most_max_page_lines():
    lengths = {
        str(path.relative_to(REPO_ROOT)): len(path.read_text(encoding="utf-8").splitlines())
        for path in (REPO_ROOT / "docs").rglob("*.md")
    }
    assert lengths
    too_long = {page: lines for page, lines in sorted(lengths.items()) if lines > MAX_PAGE_LINES}
    assert not too_long, f"pages over {MAX_PAGE_LINES} lines: {too_long}: split each by topic"


def test_every_notebook_entry_is_dated_and_in_the_index():
    entries = sorted(p.name for p in NOTEBOOK.glob("*.md") if p.name != "README.md")
    assert entries
    undated = [name for name in entries if not re.match(r"^\d{4}-\d{2}-\d{2}-[a-z0-9-]+\.md$", name)]
    assert not undated, f"name entries YYYY-MM-DD-topic.md: {undated}"
    listed = set(LINK.findall((NOTEBOOK / "README.md").read_text(encoding="utf-8")))
    assert [name for name in entries if name not in listed] == []


# docs/layout.md: its tree (the first code block) and its tables stay in step with the folders.
LAYOUT = REPO_ROOT / "docs" / "layout.md"
PACKAGE_ROOTS = ("app", "data", "layers")  # whose package folders the tree shows, and whose modules the tables name
BUILD_OUTPUTS = {"__pycache__", "build", "dist", "node_modules"}  # pip install . and friends
BACKTICKED = re.compile(r"`([^`]+)`")


def layout_tree():
    """The tree's entries as paths from the repository root, folders ending in "/", each
    with the rest of its line. An entry is its line's text up to the first run of two
    spaces (several names split by commas); two spaces of indentation are one level."""
    lines = LAYOUT.read_text(encoding="utf-8").split("```")[1].split("\n")[1:]
    entries, parents = {}, []
    for line in lines:
        if not line.strip():
            continue
        depth = (len(line) - len(line.lstrip(" "))) // 2
        names, _, what = line.strip().partition("  ")
        del parents[depth:]
        for name in names.split(","):
            entries["".join(parents) + name.strip()] = what.strip()
        if names.endswith("/"):
            parents.append(names)
    return entries


def package_folders():
    """Every folder of app/, data/ and layers/ that holds an __init__.py, with a trailing "/"."""
    return sorted(
        f"{path.parent.relative_to(REPO_ROOT).as_posix()}/"
        for root in PACKAGE_ROOTS for path in (REPO_ROOT / root).rglob("__init__.py")
    )


def top_level_folders():
    """The top-level folders that hold a file git tracks, so that a virtual environment, a
    run or a folder a test writes is not one; without git, every folder but hidden ones
    and build outputs."""
    try:
        tracked = subprocess.run(
            ["git", "ls-files"], cwd=REPO_ROOT, capture_output=True, text=True, check=True
        ).stdout.split("\n")
    except (OSError, subprocess.CalledProcessError):
        return sorted(
            f"{path.name}/" for path in REPO_ROOT.iterdir()
            if path.is_dir() and not path.name.startswith(".") and path.name not in BUILD_OUTPUTS
            and not path.name.endswith(".egg-info")
        )
    return sorted({f"{path.split('/')[0]}/" for path in tracked if "/" in path and not path.startswith(".")})


def layout_table_paths():
    """The files and folders the tables of docs/layout.md name, as paths from the repository
    root. A row's first cell names its folder (`app/model/`) or root files (`train.py`); a
    name in the row that starts with no top-level folder (`config.py`, `static/index.html`,
    `multi30k/`) is read from the row's folder. NAME, DIR and the like are placeholders."""
    top_level = {path.name for path in REPO_ROOT.iterdir()}
    named = set()
    for line in prose_lines(LAYOUT.read_text(encoding="utf-8")):
        cells = line.split(" | ")
        if not line.startswith("| ") or len(cells) < 2 or set(line) <= set("|- "):
            continue
        first = BACKTICKED.findall(cells[0])
        folders = [token for token in first if token.endswith("/")]
        base = folders[0] if folders else ""
        for token in first + BACKTICKED.findall(" | ".join(cells[1:])):
            if not re.fullmatch(r"[\w./-]+(\.py|/)", token) or re.search(r"\b[A-Z_]+\b", token):
                continue  # a class, a flag, a command line, a placeholder
            from_root = "/" in token.rstrip("/") and token.split("/")[0] in top_level
            named.add(token if token in folders or from_root else base + token)
    return named


def test_the_layout_tree_shows_every_package_and_top_level_folder():
    shown = layout_tree()
    missing = [folder for folder in package_folders() + top_level_folders() if folder not in shown]
    assert not missing, f"docs/layout.md's tree (its code block) lacks the folders {missing}: add a line for each"


def test_what_the_layout_tree_names_exists():
    gone = [
        path for path, what in layout_tree().items()
        if not (REPO_ROOT / path).exists() and "not tracked" not in what
    ]
    assert not gone, f"docs/layout.md's tree names {gone}, which do not exist: remove or rename them there"


def test_what_the_layout_tables_name_exists():
    gone = sorted(path for path in layout_table_paths() if not (REPO_ROOT / path).exists())
    assert not gone, f"docs/layout.md's tables name {gone}, which do not exist: remove or rename them there"


def test_the_layout_tables_name_every_module():
    named = layout_table_paths()
    modules = sorted(
        path.relative_to(REPO_ROOT).as_posix()
        for root in PACKAGE_ROOTS for path in (REPO_ROOT / root).rglob("*.py")
        if path.name != "__init__.py"
    )
    unnamed = [module for module in modules if module not in named]
    assert not unnamed, f"docs/layout.md's tables do not name the modules {unnamed}: add each to its folder's row"
