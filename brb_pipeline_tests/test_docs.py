"""The README stays short and its docs/ pages stay reachable.

README.md holds what brb is, the two commands and a short tour; the rest is in docs/*.md. These
tests keep it that way: the README's length, every relative link (and #anchor) of README.md and
docs/*.md resolving, every docs page linked from the README, and the two commands being the
ones the Makefile and CI run.
"""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
DOCS = ROOT / "docs"
README_MAX_CHARS = 15_000

_FENCE = re.compile(r"^\s*(```|~~~)")
_HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
_CODE_SPAN = re.compile(r"`[^`\n]*`")
# [text](target) and ![alt](target), with an optional "title" after the target.
_LINK = re.compile(r"!?\[[^\]\n]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")


def _prose_lines(text: str):
    """The lines outside fenced code blocks, with their 1-based numbers."""
    fenced = False
    for number, line in enumerate(text.splitlines(), 1):
        if _FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            yield number, line


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link keeps its text
    text = re.sub(r"[^\w\- ]", "", text.lower())
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """Every heading anchor of a Markdown file, repeated headings numbered as GitHub does."""
    seen: dict[str, int] = {}
    found = set()
    for _, line in _prose_lines(path.read_text(encoding="utf-8")):
        match = _HEADING.match(line)
        if not match:
            continue
        base = slug(match.group(2))
        count = seen.get(base, 0)
        seen[base] = count + 1
        found.add(base if count == 0 else f"{base}-{count}")
    return found


def relative_links(path: Path) -> list[tuple[int, str]]:
    """(line, target) of every link and image in a Markdown file that is not a URL."""
    links = []
    for number, line in _prose_lines(path.read_text(encoding="utf-8")):
        for target in _LINK.findall(_CODE_SPAN.sub("", line)):
            if not _SCHEME.match(target):
                links.append((number, target))
    return links


def broken_links(paths: list[Path]) -> list[str]:
    """'file:line: target (why)' for each relative link whose file or #anchor does not exist."""
    broken = []
    for path in paths:
        for number, target in relative_links(path):
            file_part, _, anchor = target.partition("#")
            dest = (path.parent / file_part).resolve() if file_part else path
            where = f"{path.relative_to(ROOT) if path.is_relative_to(ROOT) else path.name}:{number}"
            if not dest.exists():
                broken.append(f"{where}: {target} (no such file)")
            elif anchor and (dest.suffix != ".md" or anchor not in anchors(dest)):
                broken.append(f"{where}: {target} (no such heading)")
    return broken


def _markdown_files() -> list[Path]:
    return [README, *sorted(DOCS.glob("*.md"))]


def test_readme_is_short():
    size = len(README.read_text(encoding="utf-8"))
    assert size <= README_MAX_CHARS, f"README.md has {size:,} characters; move detail into docs/"


def test_every_relative_link_resolves():
    files = _markdown_files()
    assert len(files) > 10, "docs/ pages not found"
    assert sum(len(relative_links(p)) for p in files) > 30, "the link finder found almost nothing"
    assert broken_links(files) == []


def test_the_link_check_catches_a_broken_file_and_anchor(tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.md").write_text("# Page A\n\n## `brb status --json`\n\ntext\n")
    page = tmp_path / "README.md"
    page.write_text(
        "# Top\n\n[ok](docs/a.md) [ok](docs/a.md#brb-status---json) [ok](#top) [web](https://x.org/y)\n"
        "[gone](docs/b.md) [bad anchor](docs/a.md#nowhere) ![img](docs/pic.png)\n"
        "```\n[in code](docs/ignored.md)\n```\n`[inline](docs/ignored.md)`\n"
    )
    broken = broken_links([page])
    assert [b.split(": ", 1)[1] for b in broken] == [
        "docs/b.md (no such file)",
        "docs/a.md#nowhere (no such heading)",
        "docs/pic.png (no such file)",
    ]


def test_slug_matches_github_anchors():
    assert slug("`brb status --json`") == "brb-status---json"
    assert slug("JSON-lines progress (`--progress jsonl`)") == "json-lines-progress---progress-jsonl"
    assert slug("Settings and the home dir") == "settings-and-the-home-dir"
    assert slug("Full corpus, end to end: brb (2026-11-30T02:09:42+00:00)") == (
        "full-corpus-end-to-end-brb-2026-11-30t0209420000"
    )


def test_readme_links_every_docs_page():
    linked = {(ROOT / target.partition("#")[0]).resolve() for _, target in relative_links(README)}
    missing = [p.name for p in sorted(DOCS.glob("*.md")) if p.resolve() not in linked]
    assert missing == [], f"docs pages the README does not link: {missing}"


def _code_block_lines(text: str) -> list[str]:
    lines, fenced = [], False
    for line in text.splitlines():
        if _FENCE.match(line):
            fenced = not fenced
        elif fenced:
            lines.append(line.strip())
    return lines


def test_readme_shows_the_two_commands_that_make_and_ci_run():
    text = README.read_text(encoding="utf-8")
    section = text.split("## The two commands", 1)[1].split("\n## ", 1)[0]
    commands = _code_block_lines(section)
    assert "make demo" in commands and "make test" in commands
    makefile = (ROOT / "Makefile").read_text()
    assert re.search(r"^demo:", makefile, re.M) and re.search(r"^test:", makefile, re.M)
    ci = [line.strip() for line in (ROOT / ".ci" / "run").read_text().splitlines()]
    assert "make test" in ci, ".ci/run must call the README's test command"
