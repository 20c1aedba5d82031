"""The demo corpus (ragmon's own documentation) and the labelled question set, loaded from package data.

A passage is one paragraph of a corpus file; its id is ``<file>#<n>`` with n counting the file's non-heading
paragraphs from 1 (``sdk.md#3``). Headings are not passages: each passage carries the heading above it as its
section title. The question set grades relevant passages 1–3 (3: answers the question; 2: needed for a full
answer; 1: related) and is reused by offline evaluation.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources


@dataclass(frozen=True, slots=True)
class Passage:
    id: str  # "sdk.md#3"
    source: str  # "sdk.md"
    section: str  # heading text above the paragraph
    text: str


@dataclass(frozen=True, slots=True)
class Question:
    id: str
    question: str
    reference_answer: str
    relevant: dict[str, int]  # passage id -> grade 1..3
    feature: str = "docs-qa"


def parse_markdown(source: str, text: str) -> list[Passage]:
    """Split one markdown file into paragraph passages (blank-line separated; '#' lines are headings)."""
    out: list[Passage] = []
    section = ""
    for block in text.replace("\r\n", "\n").split("\n\n"):
        block = block.strip()
        if not block:
            continue
        if block.startswith("#"):
            # A heading block may be followed directly by text without a blank line; keep that text.
            heading, _, rest = block.partition("\n")
            section = heading.lstrip("#").strip()
            block = rest.strip()
            if not block:
                continue
        paragraph = " ".join(line.strip() for line in block.splitlines())
        out.append(Passage(f"{source}#{len(out) + 1}", source, section, paragraph))
    return out


@lru_cache(maxsize=1)
def load_corpus() -> tuple[Passage, ...]:
    """Every passage of the shipped corpus, files in name order."""
    folder = resources.files("ragmon.demo").joinpath("corpus")
    passages: list[Passage] = []
    for entry in sorted(folder.iterdir(), key=lambda e: e.name):
        if entry.name.endswith(".md"):
            passages.extend(parse_markdown(entry.name, entry.read_text(encoding="utf-8")))
    return tuple(passages)


@lru_cache(maxsize=1)
def load_questions() -> tuple[Question, ...]:
    """The labelled question set (``questions.json``)."""
    raw = json.loads(resources.files("ragmon.demo").joinpath("questions.json").read_text(encoding="utf-8"))
    return tuple(
        Question(
            id=item["id"],
            question=item["question"],
            reference_answer=item["reference_answer"],
            relevant={str(k): int(v) for k, v in item["relevant"].items()},
            feature=item.get("feature", "docs-qa"),
        )
        for item in raw["questions"]
    )
