"""The README is the front door: under 15 KB, and every relative link of the README, docs/ and the runbooks
resolves — to a file that exists and, with ``#anchor``, to a heading of that markdown file."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README_LIMIT = 15_000
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def pages() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), *sorted((ROOT / "platform/runbooks").glob("*.md"))]


def prose(text: str) -> str:
    """``text`` without fenced code blocks (a ``[x](y)`` in code is not a link)."""
    return re.sub(r"^```.*?^```", "", text, flags=re.MULTILINE | re.DOTALL)


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation but ``-`` and ``_`` dropped, spaces to ``-``."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower().replace("`", ""))
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    seen: dict[str, int] = {}
    found = set()
    for heading in re.findall(r"^#{1,6} (.+)$", prose(page.read_text()), re.MULTILINE):
        base = slug(heading)
        found.add(base if base not in seen else f"{base}-{seen[base]}")
        seen[base] = seen.get(base, 0) + 1
    return found


def broken_links(page: Path) -> list[str]:
    broken = []
    for target in LINK.findall(prose(page.read_text())):
        if re.match(r"^[a-z]+:", target):  # http:, https:, mailto:
            continue
        path, _, anchor = target.partition("#")
        resolved = (page.parent / path).resolve() if path else page
        if not resolved.exists():
            broken.append(f"{target} (no file {resolved})")
        elif anchor and resolved.suffix == ".md" and anchor not in anchors(resolved):
            broken.append(f"{target} (no heading #{anchor} in {resolved.relative_to(ROOT)})")
    return broken


def test_every_link_of_the_readme_docs_and_runbooks_resolves() -> None:
    broken = {str(page.relative_to(ROOT)): links for page in pages() if (links := broken_links(page))}
    assert broken == {}


def test_the_readme_stays_a_front_door() -> None:
    size = len((ROOT / "README.md").read_bytes())
    assert size < README_LIMIT, f"README.md is {size:,} bytes: move reference material to docs/"
    linked = set(LINK.findall((ROOT / "README.md").read_text()))
    unlinked = [p.name for p in sorted((ROOT / "docs").glob("*.md")) if f"docs/{p.name}" not in linked]
    assert unlinked == [], "docs/ pages the README does not link"


def test_the_anchor_rule_is_githubs() -> None:
    assert slug("The orders pipeline (what `make demo` runs)") == "the-orders-pipeline-what-make-demo-runs"
    assert slug('ListOffsets "latest"') == "listoffsets-latest"
    assert slug("timestamps, headers, idempotence") == "timestamps-headers-idempotence"
