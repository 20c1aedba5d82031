"""`AlertRecord`: one state change of one alert (firing, then resolved), as stored in `alerts` and sent to channels.

An alert's id is derived from its rule, scope and the end of the window where it fired, so an evaluator that replays
the same data (after a restart) produces the same id, and channels deduplicate on (id, state). The firing and the
resolved rows share `alert_id` and `fired_at`; the table's ReplacingMergeTree key (tenant, fired_at, alert_id, state)
keeps one row per state.

`to_row()` gives the `ragmon.sinks.schema.ALERT_COLUMNS` fields plus `ALERT_EXTRA_COLUMNS` (proposed additions to the
table);
`to_row(extended=False)` folds the extras into `labels` so rows fit today's table unchanged.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal

AlertState = Literal["firing", "resolved"]

# Columns the `alerts` table needs beyond ragmon.sinks.schema.ALERT_COLUMNS (name, ClickHouse type).
ALERT_EXTRA_COLUMNS: tuple[tuple[str, str], ...] = (
    ("detector", "LowCardinality(String)"),
    ("resolved_at", "Nullable(DateTime64(3))"),
    ("detected_at", "DateTime64(3)"),  # wall clock of the evaluation that produced the row
    ("baseline_value", "Nullable(Float64)"),
    ("current_value", "Nullable(Float64)"),
    ("evidence", "String"),  # JSON object: baseline vs current figures, the statistic, p-value, QPS ...
    ("trace_ids", "Array(String)"),
)
# The ALERT_COLUMNS names, repeated here so this module does not import sinks/ (GUIDE §1: ragmon imports no sinks).
BASE_COLUMN_NAMES = (
    "tenant",
    "alert_id",
    "fired_at",
    "rule",
    "severity",
    "state",
    "feature",
    "stage",
    "metric",
    "value",
    "threshold",
    "message",
    "labels",
)


def alert_id_for(rule: str, tenant: str, feature: str, stage: str, fired_at_s: float) -> str:
    key = f"{rule}\x1f{tenant}\x1f{feature}\x1f{stage}\x1f{round(fired_at_s * 1000)}"
    return hashlib.sha256(key.encode()).hexdigest()[:24]


def _utc(ts: float | None) -> datetime | None:
    return None if ts is None else datetime.fromtimestamp(ts, UTC)


def _finite(value: float | None) -> float | None:
    return value if value is not None and math.isfinite(value) else None


@dataclass(frozen=True, slots=True)
class AlertRecord:
    alert_id: str
    state: AlertState
    rule: str
    severity: str
    tenant: str
    feature: str
    stage: str
    metric: str  # the signal
    detector: str
    fired_at_s: float  # end of the window where the alert fired (data time)
    detected_at_s: float  # wall clock when the evaluator produced this record
    value: float | None  # the test statistic (CUSUM sum, PSI, KS D, or the value for a threshold)
    threshold: float | None  # what it was compared with (fire threshold; clear threshold for a resolve)
    message: str
    resolved_at_s: float | None = None
    baseline_value: float | None = None
    current_value: float | None = None
    evidence: Mapping[str, float | str] = field(default_factory=dict)
    trace_ids: tuple[str, ...] = ()
    channels: tuple[str, ...] = ()
    labels: Mapping[str, str] = field(default_factory=dict)

    @property
    def dedup_key(self) -> tuple[str, str]:
        return (self.alert_id, self.state)

    def evidence_json(self) -> str:
        clean = {k: (_finite(v) if isinstance(v, float) else v) for k, v in self.evidence.items()}
        return json.dumps(clean, sort_keys=True, allow_nan=False)

    def to_row(self, extended: bool = True) -> dict[str, Any]:
        """A row for the `alerts` table (datetimes in UTC)."""
        row: dict[str, Any] = {
            "tenant": self.tenant,
            "alert_id": self.alert_id,
            "fired_at": _utc(self.fired_at_s),
            "rule": self.rule,
            "severity": self.severity,
            "state": self.state,
            "feature": self.feature,
            "stage": self.stage,
            "metric": self.metric,
            "value": _finite(self.value),
            "threshold": _finite(self.threshold),
            "message": self.message,
            "labels": dict(self.labels),
        }
        extras: dict[str, Any] = {
            "detector": self.detector,
            "resolved_at": _utc(self.resolved_at_s),
            "detected_at": _utc(self.detected_at_s),
            "baseline_value": _finite(self.baseline_value),
            "current_value": _finite(self.current_value),
            "evidence": self.evidence_json(),
            "trace_ids": list(self.trace_ids),
        }
        if extended:
            row.update(extras)
        else:
            labels = row["labels"]
            for name, value in extras.items():
                if value is None:
                    continue
                if isinstance(value, datetime):
                    labels[name] = value.isoformat()
                elif isinstance(value, list):
                    labels[name] = ",".join(value)
                else:
                    labels[name] = str(value)
        return row

    def to_json(self) -> dict[str, Any]:
        """The JSON form sent to webhooks and printed by `ragmon alerts --json` (times as ISO 8601, UTC)."""
        row = self.to_row()
        for name in ("fired_at", "resolved_at", "detected_at"):
            row[name] = row[name].isoformat() if row[name] is not None else None
        row["evidence"] = json.loads(row["evidence"])
        return row
