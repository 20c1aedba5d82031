"""Pieces the metrics share: building a result, per-item verdict lists read by index, and the lexical share the
local judge's context metrics grade passages by."""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import BaseModel
from ragmon.judges import text
from ragmon.judges.types import ClaimVerdict, MetricResult, Status, Usage, Verdict

RELEVANT_SHARE = 0.5  # share of the question's (or answer's) content words a passage must hold to count as relevant


class IndexedVerdict(BaseModel):
    item: int | str
    verdict: str
    reason: str = ""


class IndexedVerdicts(BaseModel):
    verdicts: list[IndexedVerdict]


def result(
    metric: str,
    prompt_version: str,
    value: float | None,
    status: Status,
    explanation: str,
    *,
    usage: Usage | None = None,
    model: str = "",
    claims: Sequence[ClaimVerdict] = (),
    flags: Sequence[str] = (),
) -> MetricResult:
    return MetricResult(
        metric=metric,
        value=value,
        status=status,
        explanation=explanation,
        claims=list(claims),
        flags=list(flags),
        judge_model=model,
        prompt_version=prompt_version,
        usage=usage or Usage(),
    )


def unparseable_flags(claims: Sequence[ClaimVerdict]) -> list[str]:
    """The result flag every metric raises when some per-item verdict could not be read."""
    return ["unparseable_verdicts"] if any(c.flag == "unparseable" for c in claims) else []


def read_binary_verdicts(
    items: Sequence[str], output: IndexedVerdicts, yes: str, no: str
) -> tuple[list[bool], list[ClaimVerdict]]:
    """`yes`/`no` per item by index. A missing or invalid verdict counts as `no` and is flagged unparseable —
    the cautious reading (a passage not shown relevant is not counted as relevant)."""
    by_index: dict[int, IndexedVerdict] = {}
    for entry in output.verdicts:
        try:
            by_index.setdefault(int(entry.item), entry)
        except (TypeError, ValueError):
            continue
    flags: list[bool] = []
    verdicts: list[ClaimVerdict] = []
    for i, item in enumerate(items):
        raw = by_index.get(i)
        word = raw.verdict.strip().lower() if raw is not None else ""
        ok = word in (yes, no)
        flags.append(word == yes)
        verdicts.append(
            ClaimVerdict(
                claim=item[:500],
                verdict=Verdict.SUPPORTED if word == yes else Verdict.UNSUPPORTED,
                reason=raw.reason if raw is not None else "no verdict",
                flag="" if ok else "unparseable",
            )
        )
    return flags, verdicts


def word_share(words: Sequence[str], passage: str) -> float:
    """The share of the distinct `words` (content tokens) that `passage` holds; 0 for no words."""
    unique = set(words)
    if not unique:
        return 0.0
    return len(unique & set(text.content_tokens(passage))) / len(unique)
