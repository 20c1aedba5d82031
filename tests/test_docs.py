"""The documentation holds together: generated pages are what the code generates, and every relative link in the
README and under docs/ lands on a file (and, with a #fragment, on a heading) that exists."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path
from types import ModuleType

import pytest

REPO = Path(__file__).resolve().parents[1]
PAGES = sorted([REPO / "README.md", *(REPO / "docs").rglob("*.md")])

_FENCE = re.compile(r"^```.*?^```", flags=re.S | re.M)
_CODE = re.compile(r"`[^`\n]*`")
_LINK = re.compile(r"\[[^\]\n]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
_HEADING = re.compile(r"^#{1,6}\s+(.+?)\s*#*\s*$", flags=re.M)


def _generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("docs_generate", REPO / "docs" / "generate.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("name", ["tables.md", "settings.md", "signals.md"])
def test_generated_pages_are_what_the_code_generates(name: str) -> None:
    """After a change to the schema's column lists, the settings tree or the drift signals, regenerate:
    `python docs/generate.py`."""
    expected = {path.name: text for path, text in _generator().pages().items()}
    committed = (REPO / "docs" / name).read_text(encoding="utf-8")
    assert committed == expected[name], f"docs/{name} is stale: run `python docs/generate.py`"


def _anchors(text: str) -> set[str]:
    """The #fragments GitHub gives a page's headings: lower case, punctuation but - and _ dropped, spaces to -,
    a repeated heading's anchor numbered."""
    seen: dict[str, int] = {}
    anchors = set()
    for heading in _HEADING.findall(_FENCE.sub("", text)):
        slug = re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-")
        anchors.add(slug if slug not in seen else f"{slug}-{seen[slug]}")
        seen[slug] = seen.get(slug, 0) + 1
    return anchors


def _relative_links(text: str) -> list[str]:
    prose = _CODE.sub("", _FENCE.sub("", text))
    return [target for target in _LINK.findall(prose) if not re.match(r"[a-z][a-z0-9+.-]*:", target)]


def test_every_relative_link_lands() -> None:
    broken = []
    for page in PAGES:
        for target in _relative_links(page.read_text(encoding="utf-8")):
            path_part, _, fragment = target.partition("#")
            destination = (page.parent / path_part).resolve() if path_part else page
            if not destination.exists() or REPO not in (destination, *destination.parents):
                broken.append(f"{page.relative_to(REPO)}: {target} (no such file in the repository)")
            elif (
                fragment
                and destination.suffix == ".md"
                and fragment not in _anchors(destination.read_text(encoding="utf-8"))
            ):
                broken.append(f"{page.relative_to(REPO)}: {target} (no such heading)")
    assert not broken, "\n".join(broken)


def test_the_link_check_sees_a_broken_link_and_a_missing_heading(tmp_path: Path) -> None:
    text = "See [a](missing.md), [b](#no-such-heading), [c](#the-heading), `[d](in-code.md)`, [e](https://x.org).\n"
    assert _relative_links(text) == ["missing.md", "#no-such-heading", "#the-heading"]
    assert _anchors("# The heading\n## `agent.redaction`\n## The heading\n") == {
        "the-heading",
        "agentredaction",
        "the-heading-1",
    }
