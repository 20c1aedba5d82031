"""Where a drift alert's change is: the release that came in around it, the recurring question its worst traces
asked, and (from the document views) the paragraphs involved — so an alert names a place, not only a number.

A signal says *that* something moved (p95, error rate, judged faithfulness …) and carries the worst traces of its
window as examples. `Locator` turns a firing record into one that also says:

- **release**: a release of the feature first seen since the rule's baseline began (so it is not the release the
  baseline measured) that carries at least `MIN_RELEASE_SHARE` of the feature's calls over the alert's current
  window — the most recent such release when there are several. A change that coincides with a deploy is then
  named by it; a change with no new release says so by naming none.
- **documents**: with a new release and a question group, the group's documents (`ragmon.sinks.documents_sql`)
  that the previous release (the busiest one already there) retrieved for at least `MIN_DROPPED_SHARE` of the
  group's traces and the new one for at most half as many, with a two-proportion z ≤ -2 — the paragraph that
  stopped being found.
- **question**: the recurring-question group (`ragmon.questions`) holding most of the alert's example traces, with
  one of those questions as the user asked it, how many examples it holds and its share of the window's requests.
  An example set of 3 is small: the group is named when it holds at least two of them, or the only one there is.

Everything comes from bounded reads (`ragmon.sinks.where_sql`): the per-minute rollup over the baseline's span and
`trace_questions` over the alert's window. A read that fails leaves the alert as it was (the evaluator counts it):
saying where must never cost an alert.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any

from ragmon.drift.record import AlertRecord
from ragmon.drift.rules import RuleConfig
from ragmon.sinks.for_alerting import AlertingStore
from ragmon.sinks.schema import Ddl
from ragmon.sinks.where_sql import example_groups_sql, releases_sql

MIN_RELEASE_SHARE = 0.10
MIN_DROPPED_SHARE = 0.30  # a document the previous release retrieved for at least this share of the group's traces
_DOCUMENTS = 3  # documents named per alert
_ALREADY_THERE_S = 86_400.0
_QUESTION_CHARS = 160  # of the example question, in labels and messages


@dataclass(frozen=True, slots=True)
class Where:
    release: str = ""
    release_first_seen_s: float | None = None
    release_share: float | None = None  # of the feature's calls over the alert's current window
    group_id: str = ""
    question: str = ""  # an example trace's question, as asked
    group_label: str = ""  # the group's representative question
    group_examples: int = 0  # the alert's example traces in the group …
    examples: int = 0  # … of this many
    group_share: float | None = None  # the group's share of the window's requests
    previous_release: str = ""  # the release the new one replaced: the busiest that was there before
    # documents that stopped being retrieved for the group in the new release: (doc, share before, share now)
    documents: tuple[tuple[str, float, float], ...] = ()

    def labels(self) -> dict[str, str]:
        out: dict[str, str] = {}
        if self.release:
            out["release"] = self.release
        if self.group_id:
            out["question_group"] = self.group_id
            out["question"] = self.question[:_QUESTION_CHARS]
        if self.documents:
            out["documents"] = ",".join(doc for doc, _, _ in self.documents)
        return out

    def sentence(self) -> str:
        """`Where: …` for the alert's message; '' when nothing was found."""
        parts = []
        if self.release:
            first = _hhmm(self.release_first_seen_s)
            share = f", {self.release_share:.0%} of calls since" if self.release_share is not None else ""
            parts.append(f"release {self.release} (first seen {first}{share})")
        if self.group_id:
            share = f"; {self.group_share:.0%} of requests" if self.group_share is not None else ""
            parts.append(
                f"question «{self.question[:_QUESTION_CHARS]}» ({self.group_examples} of {self.examples} example"
                f" traces{share})"
            )
        if self.documents:
            moved = ", ".join(f"{doc} ({before:.0%} → {now:.0%})" for doc, before, now in self.documents)
            parts.append(f"no longer retrieved for it since {self.previous_release}: {moved}")
        return "Where: " + "; ".join(parts) + "." if parts else ""


def _hhmm(ts: float | None) -> str:
    return "?" if ts is None else datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%d %H:%M UTC")


class Locator:
    """Adds where to firing records (`__call__`); records it cannot place come back unchanged."""

    def __init__(self, store: AlertingStore) -> None:
        self.store = store
        self.ddl = Ddl(store.topology)

    def __call__(self, record: AlertRecord, rule: RuleConfig) -> AlertRecord:
        if record.state != "firing" or "release" in record.labels or "question_group" in record.labels:
            return record  # resolved, or placed already (a release comparison's alert names its own place)
        where = self.locate(record, rule)
        sentence = where.sentence()
        if not sentence:
            return record
        return replace(
            record,
            message=f"{record.message} {sentence}",
            labels={**record.labels, **where.labels()},
        )

    def locate(self, record: AlertRecord, rule: RuleConfig) -> Where:
        current_s = max(rule.current_minutes, rule.window_minutes) * 60.0
        current_from_s = record.fired_at_s - current_s
        baseline_from_s = record.fired_at_s - (rule.baseline_lag_minutes + rule.baseline_minutes) * 60.0
        release = self._release(record, baseline_from_s, current_from_s)
        group = self._group(record.tenant, record.feature, record.trace_ids, current_from_s, record.fired_at_s)
        where = replace(release, **group) if group else release
        if where.release and where.previous_release and where.group_id:
            where = replace(where, documents=self._dropped(record, where, record.fired_at_s - baseline_from_s))
        return where

    def _dropped(self, record: AlertRecord, where: Where, since_s: float) -> tuple[tuple[str, float, float], ...]:
        """The group's documents that the previous release retrieved for a good share of its traces and the new one
        for at most half that share, with a two-proportion z of at most -2: the paragraph that stopped being found."""
        shift = self.store.document_shift(
            record.feature,
            where.previous_release,
            where.release,
            since_s,
            group_id=where.group_id,
            tenant=record.tenant,
            now_s=record.fired_at_s,
        )
        dropped = [
            (str(d["doc"]), float(d["share_a"]), float(d["share_b"]))
            for group in shift
            for d in group["documents"]
            if d["share_a"] is not None
            and d["share_b"] is not None
            and d["z"] is not None
            and d["share_a"] >= MIN_DROPPED_SHARE
            and d["share_b"] <= d["share_a"] / 2
            and d["z"] <= -2.0
        ]
        return tuple(sorted(dropped, key=lambda d: d[2] - d[1])[:_DOCUMENTS])

    def _release(self, record: AlertRecord, since_s: float, current_from_s: float) -> Where:
        rows = self.store.read(
            releases_sql(self.ddl),
            {
                "tenant": record.tenant,
                "feature": record.feature,
                # a day before the baseline began too: a release already there then, but quiet in the baseline's
                # first minutes, is not new
                "since": _minute(since_s - _ALREADY_THERE_S),
                "current_from": _minute(current_from_s),
            },
        )
        total = sum(int(row["current_calls"]) for row in rows)
        since_minute = _minute(since_s).replace(tzinfo=UTC).timestamp()
        new = [
            (_seconds(row["first_seen"]), row)
            for row in rows
            # not already there when the baseline began
            if row["release"]
            and _seconds(row["first_seen"]) > since_minute
            and total > 0
            and int(row["current_calls"]) / total >= MIN_RELEASE_SHARE
        ]
        if not new:
            return Where()
        first_seen_s, row = max(new, key=lambda pair: (pair[0], pair[1]["release"]))
        before = [r for r in rows if r["release"] and _seconds(r["first_seen"]) < first_seen_s]
        previous = max(before, key=lambda r: (int(r["calls"]), str(r["release"])), default=None)
        return Where(
            release=str(row["release"]),
            release_first_seen_s=first_seen_s,
            release_share=int(row["current_calls"]) / total,
            previous_release=str(previous["release"]) if previous else "",
        )

    def _group(
        self, tenant: str, feature: str, trace_ids: Sequence[str], from_s: float, to_s: float
    ) -> dict[str, Any] | None:
        if not trace_ids:
            return None
        rows = self.store.read(
            example_groups_sql(self.ddl),
            {
                "tenant": tenant,
                "feature": feature,
                "window_from": datetime.fromtimestamp(from_s, UTC).replace(tzinfo=None),
                "window_to": datetime.fromtimestamp(to_s, UTC).replace(tzinfo=None),
                "trace_ids": list(trace_ids),
            },
        )
        if not rows:
            return None
        top = rows[0]
        examples = len(trace_ids)
        if int(top["examples"]) < min(2, examples):
            return None
        total = int(top["total"])
        return {
            "group_id": str(top["group_id"]),
            "question": str(top["question"]),
            "group_label": str(top["label"] or top["question"]),
            "group_examples": int(top["examples"]),
            "examples": examples,
            "group_share": int(top["requests"]) / total if total else None,
        }


def _minute(ts: float) -> datetime:
    """The minute `ts` falls in, naive UTC (the rollup's `minute` is a DateTime in UTC)."""
    return datetime.fromtimestamp(ts - ts % 60, UTC).replace(tzinfo=None)


def _seconds(value: Any) -> float:
    if isinstance(value, datetime):
        return (value if value.tzinfo else value.replace(tzinfo=UTC)).timestamp()
    return float(value)
