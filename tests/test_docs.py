"""The documentation's links hold: every relative link in a Markdown file names a file
that exists and, with an anchor, a heading of that file (GitHub's slugs); every lab
notebook entry is named by its date and listed in the notebook's index."""

import re
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


def test_every_notebook_entry_is_dated_and_in_the_index():
    entries = sorted(p.name for p in NOTEBOOK.glob("*.md") if p.name != "README.md")
    assert entries
    undated = [name for name in entries if not re.match(r"^\d{4}-\d{2}-\d{2}-[a-z0-9-]+\.md$", name)]
    assert not undated, f"name entries YYYY-MM-DD-topic.md: {undated}"
    listed = set(LINK.findall((NOTEBOOK / "README.md").read_text(encoding="utf-8")))
    assert [name for name in entries if name not in listed] == []
