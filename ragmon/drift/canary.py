"""Canary analysis: when a new release appears in a feature's traffic, compare it with the release before it on its
own (`ragmon.sinks.compare`, the comparison `ragmon compare` prints) as soon as it has served enough requests to
say something, again each time its traffic doubles, and raise an alert naming the place when something regressed —
overall or for one recurring question — without waiting hours for a time baseline.

When. A candidate (the release of a feature first seen last) is looked at once it has `min_requests` requests, then
at twice as many, four times …, at most `max_looks` times. Everything is data time: the store's spans, never the
wall clock, so a replay of compressed traffic decides what live traffic would.

What counts as a regression. Each look runs a family of tests, the ones whose data is there:
- overall: error rate, refusal rate, judged quality per metric, cost per request;
- per question group with at least `ragmon.sinks.compare.MIN_GROUP_TRACES` traces of each release: its error rate,
  its refusal rate and judged quality per metric (each side with `min_judged` judged traces), and the document its
  traces stopped retrieving most (its share of the group's traces, Newcombe).
A finding needs both: Holm's adjusted p-value below `alpha / max_looks` (family-wise error over the tests of a look,
Bonferroni over a release's looks: at most `alpha` per release that changes nothing), and an effect at least the
minimum (`MIN_EFFECT`) in the bad direction — a significant but tiny change is not an alert. Latency is left to the
latency drift rules (its interval is distribution-free but has no p-value to adjust).

The alert (`rule = "canary"`) names the release and the baseline, the question group with the question as users
asked it, the paragraphs it stopped retrieving, example trace ids and the dashboard's comparison
(`#/compare?...`): in its message, its labels and its evidence. One alert per (release, scope), fired once.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol
from urllib.parse import urlencode

from ragmon.drift.canary_config import CanaryConfig
from ragmon.drift.record import AlertRecord, alert_id_for
from ragmon.sinks.compare_sql import release_features_sql
from ragmon.sinks.intervals import holm
from ragmon.sinks.schema import Ddl, Topology

log = logging.getLogger("ragmon.alerts")

RULE = "canary"
# The smallest change in the bad direction that is worth an alert, per figure (rates and scores absolute; cost
# relative to the baseline).
MIN_EFFECT: dict[str, float] = {
    "error_rate": 0.02,
    "refusal_rate": 0.05,
    "quality": 0.05,
    "cost_per_request_usd": 0.20,
    "retrieval_share": 0.30,
}
_GROUP_MIN_EFFECT = {"error_rate": 0.05, "refusal_rate": 0.10}  # a group's rates are noisier: a larger minimum
MAX_ALERTS_PER_LOOK = 5


class CanaryStore(Protocol):
    topology: Topology

    def read(self, sql: str, params: Mapping[str, Any] | None = None) -> list[dict[str, Any]]: ...

    def compare(
        self,
        feature: str | None,
        *,
        baseline: str | None = None,
        candidate: str | None = None,
        tenant: str | None = None,
    ) -> dict[str, Any]: ...


@dataclass(frozen=True, slots=True)
class Finding:
    scope: str  # '' overall, else the question group's id
    metric: str  # the figure (error_rate, quality, retrieval_share …)
    part: str  # its part: a judge metric, a document
    row: Mapping[str, Any]
    p_adjusted: float


@dataclass
class _Candidate:
    looks: int = 0
    next_look_requests: int = 0
    fired: set[str] = field(default_factory=set)


class CanaryAnalysis:
    """Looks at each feature's newest release as its traffic grows (`evaluate`, every alerting run)."""

    def __init__(self, config: CanaryConfig, store: CanaryStore, clock: Callable[[], float] = time.time) -> None:
        self.config = config
        self.store = store
        self.clock = clock
        self.looks = 0
        self.errors = 0
        self.last_error = ""
        self._candidates: dict[tuple[str, str, str], _Candidate] = {}

    def evaluate(self) -> list[AlertRecord]:
        """Alerts for the regressions found by the looks due now. Never raises (a failing read is counted)."""
        if not self.config.enabled:
            return []
        try:
            due = self._due()
        except Exception as exc:
            self._failed(exc)
            return []
        records: list[AlertRecord] = []
        for tenant, feature, candidate, baseline in due:
            try:
                document = self.store.compare(feature, baseline=baseline, candidate=candidate, tenant=tenant)
            except Exception as exc:
                self._failed(exc)
                continue
            self.looks += 1
            if "problem" in document:
                continue
            records.extend(self._alerts(tenant, document))
        return records

    def _failed(self, exc: Exception) -> None:
        self.errors += 1
        self.last_error = repr(exc)  # what the agent's health says while the store refuses
        if self.errors == 1 or self.errors % 100 == 0:
            log.warning("canary analysis could not read the store: %r", exc)

    def _due(self) -> list[tuple[str, str, str, str]]:
        """(tenant, feature, candidate, baseline) whose candidate reached its next look."""
        sql, params = release_features_sql(Ddl(self.store.topology).table("spans"))
        releases: dict[tuple[str, str], list[tuple[int, str, int]]] = {}
        for row in self.store.read(sql, params):
            key = (str(row["tenant"]), str(row["feature"]))
            releases.setdefault(key, []).append((int(row["first_ns"]), str(row["release"]), int(row["requests"])))
        due = []
        for (tenant, feature), seen in releases.items():
            if len(seen) < 2:
                continue
            seen.sort()
            (_, baseline, _), (_, candidate, requests) = seen[-2], seen[-1]
            state = self._candidates.setdefault(
                (tenant, feature, candidate), _Candidate(next_look_requests=self.config.min_requests)
            )
            if state.looks >= self.config.max_looks or requests < state.next_look_requests:
                continue
            state.looks += 1
            state.next_look_requests = max(2 * state.next_look_requests, requests + 1)
            due.append((tenant, feature, candidate, baseline))
        return due

    def findings(self, document: Mapping[str, Any]) -> list[Finding]:
        """The regressions of one comparison: the tests whose data is there, Holm-adjusted, beyond their minimum."""
        tests: list[tuple[str, Mapping[str, Any]]] = []
        for row in document["rows"]:
            if self._testable(row, group=False):
                tests.append(("", row))
        for group in document["groups"]:
            for row in group["rows"]:
                if self._testable(row, group=True):
                    tests.append((str(group["group_id"]), row))
            falling = [d for d in group["documents"] if d["delta"] is not None and d["p_value"] is not None]
            if falling:
                steepest = min(falling, key=lambda d: float(d["delta"]))
                tests.append((str(group["group_id"]), steepest))
        if not tests:
            return []
        adjusted = holm([float(row["p_value"]) for _, row in tests])
        level = self.config.alpha / self.config.max_looks
        return [
            Finding(scope, str(row["metric"]), str(row["part"]), row, p)
            for (scope, row), p in zip(tests, adjusted, strict=True)
            if p < level and _beyond_minimum(row, group=scope != "")
        ]

    def _testable(self, row: Mapping[str, Any], *, group: bool) -> bool:
        metric = row["metric"]
        if metric not in MIN_EFFECT or row["p_value"] is None or row["delta"] is None:
            return False
        if metric in ("quality", "refusal_rate"):
            return min(int(row["n_baseline"]), int(row["n_candidate"])) >= self.config.min_judged
        return True

    def _alerts(self, tenant: str, document: Mapping[str, Any]) -> list[AlertRecord]:
        findings = self.findings(document)
        feature, baseline, candidate = document["feature"], document["baseline"], document["candidate"]
        state = self._candidates[(tenant, feature, candidate["release"])]
        groups = {str(g["group_id"]): g for g in document["groups"]}
        by_scope: dict[str, list[Finding]] = {}
        for finding in findings:
            by_scope.setdefault(finding.scope, []).append(finding)
        records: list[AlertRecord] = []
        for scope, found in by_scope.items():
            if scope in state.fired or len(records) >= MAX_ALERTS_PER_LOOK:
                continue
            state.fired.add(scope)
            records.append(self._record(tenant, feature, baseline, candidate, groups.get(scope), found))
        return records

    def _record(
        self,
        tenant: str,
        feature: str,
        baseline: Mapping[str, Any],
        candidate: Mapping[str, Any],
        group: Mapping[str, Any] | None,
        found: list[Finding],
    ) -> AlertRecord:
        worst = min(found, key=lambda f: f.p_adjusted)
        scope = "" if group is None else str(group["group_id"])
        release, previous = str(candidate["release"]), str(baseline["release"])
        link = "#/compare?" + urlencode(
            {"feature": feature, "baseline": previous, "candidate": release, **({"group": scope} if scope else {})}
        )
        changes = "; ".join(_describe(f) for f in sorted(found, key=lambda f: f.p_adjusted))
        where = (
            "overall" if group is None else f"for the question {group['question']!r} ({group['share']:.0%} of traffic)"
        )
        stopped = [] if group is None else [str(d) for d in group["stopped_retrieving"]]
        traces = [] if group is None else [str(t) for t in group["example_traces"]]
        message = f"release {release} of {feature} regressed against {previous} {where}: {changes}"
        if stopped:
            message += f"; stopped retrieving {', '.join(stopped)}"
        if traces:
            message += f"; example traces {', '.join(traces)}"
        labels = {
            "release": release,
            "baseline_release": previous,
            "link": link,
            **(
                {
                    "question_group": scope,
                    "question": str(group["question"]),
                    "stopped_retrieving": ",".join(stopped),
                }
                if group is not None
                else {}
            ),
        }
        first_s = int(candidate["start_ns"]) / 1e9
        return AlertRecord(
            alert_id=alert_id_for(f"{RULE}:{release}", tenant, feature, scope, first_s),
            state="firing",
            rule=RULE,
            severity=self.config.severity,
            tenant=tenant,
            feature=feature,
            stage="",  # the scope is the question group (labels), not a stage
            metric=worst.metric if worst.metric != "quality" else f"quality:{worst.part}",
            detector="canary",
            fired_at_s=int(candidate["end_ns"]) / 1e9,
            detected_at_s=self.clock(),
            value=_float(worst.row["delta"]),
            threshold=MIN_EFFECT[worst.metric],
            message=message,
            baseline_value=_float(worst.row["baseline"]),
            current_value=_float(worst.row["candidate"]),
            evidence={
                "baseline_release": previous,
                "candidate_release": release,
                "p_adjusted": worst.p_adjusted,
                "ci_low": _float(worst.row["ci_low"]) or 0.0,
                "ci_high": _float(worst.row["ci_high"]) or 0.0,
                "n_baseline": float(worst.row["n_baseline"]),
                "n_candidate": float(worst.row["n_candidate"]),
                "method": str(worst.row["method"]),
            },
            trace_ids=tuple(traces),
            channels=tuple(self.config.channels),
            labels=labels,
        )


def _beyond_minimum(row: Mapping[str, Any], *, group: bool) -> bool:
    metric = str(row["metric"])
    minimum = (_GROUP_MIN_EFFECT.get(metric) if group else None) or MIN_EFFECT[metric]
    delta, base = float(row["delta"]), float(row["baseline"] or 0.0)
    bad = -delta if row["worse"] == "down" else delta
    if metric == "cost_per_request_usd":
        return base > 0 and bad / base >= minimum
    return bad >= minimum


def _describe(finding: Finding) -> str:
    row = finding.row
    name = {"retrieval_share": f"retrieval of {finding.part}", "quality": finding.part}.get(
        finding.metric, finding.metric.replace("_", " ")
    )
    as_rate = finding.metric.endswith("_rate") or finding.metric == "retrieval_share"
    return f"{name} {_value(row['baseline'], as_rate)} → {_value(row['candidate'], as_rate)}"


def _value(value: Any, as_rate: bool) -> str:
    if value is None:
        return "—"
    return f"{float(value):.0%}" if as_rate else f"{float(value):.3g}"


def _float(value: Any) -> float | None:
    return None if value is None else float(value)
