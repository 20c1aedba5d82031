"""The scores table's v3 columns (flags, per-claim evidence, sampling weight) and the quality the report shows:
per feature and day, over kept traces and weighted back to all traffic, each with a 95 % interval."""

from __future__ import annotations

import math
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from ragmon.sinks import Store, open_store
from ragmon.sinks.migrations import SCORE_COLUMNS_V3
from ragmon.sinks.quality import assemble_quality, kept_estimate, quality_sql, weighted_estimate
from ragmon.sinks.schema import SCHEMA_VERSION

from ragmon.commands.report import format_quality
from ragmon.pipeline.judge_store import StoreScoreSink

NOW_S = 1_800_000_000  # a fixed clock for the window; rows are stamped relative to it


@pytest.fixture
def store(chdb_engine_dir: Path) -> Iterator[Store]:
    s = open_store(str(chdb_engine_dir), database=f"t_{uuid.uuid4().hex[:12]}")
    try:
        yield s
    finally:
        s.close()


def _row(i: int, value: float | None, p: float | None, **extra: Any) -> dict[str, Any]:
    return {
        "tenant": "t",
        "trace_id": f"{i:032x}",
        "feature": "faq",
        "metric": "faithfulness",
        "judge_version": "local:test",
        "value": value,
        "status": "ok" if value is not None else "parse_error",
        "claims": [],
        "scored_at": (NOW_S - 600) * 10**9,
        "inclusion_probability": p,
        **extra,
    }


def test_hajek_estimate_by_hand() -> None:
    # Two traces kept at p = 1 scoring 0, two at p = 0.25 (each stands for 4) scoring 1: all traffic 8/10 = 0.8.
    y, p = [0.0, 0.0, 1.0, 1.0], [1.0, 1.0, 0.25, 0.25]
    w = [1 / q for q in p]
    got = weighted_estimate(
        4,
        sum(w),
        sum(wi * yi for wi, yi in zip(w, y, strict=True)),
        sum(wi**2 for wi in w),
        sum(wi**2 * yi for wi, yi in zip(w, y, strict=True)),
        sum(wi**2 * yi**2 for wi, yi in zip(w, y, strict=True)),
    )
    assert got["mean"] == pytest.approx(0.8) and got["traffic"] == pytest.approx(10.0)
    # Σ w²(y − μ)² = 2·0.64 + 2·16·0.04 = 2.56; / 10² · 4/3 → variance 0.034133…
    half = 1.959963984540054 * math.sqrt(2.56 / 100 * 4 / 3)
    assert got["ci_low"] == pytest.approx(0.8 - half) and got["ci_high"] == 1.0  # clipped: no metric exceeds 1
    kept = kept_estimate(10, 7.0, 7.0)  # seven 1s and three 0s: sample variance (7 − 10·0.49) / 9
    half = 1.959963984540054 * math.sqrt(2.1 / 9 / 10)
    assert kept == pytest.approx({"mean": 0.7, "ci_low": 0.7 - half, "ci_high": 0.7 + half})
    assert kept_estimate(1, 1.0, 1.0) == {"mean": 1.0, "ci_low": None, "ci_high": None}


def test_migration_adds_the_v3_score_columns_to_an_older_table(store: Store) -> None:
    db = store.topology.database
    for name, _ in SCORE_COLUMNS_V3:
        store.backend.execute(f"ALTER TABLE {db}.scores DROP COLUMN {name}")
    store.backend.execute(f"ALTER TABLE {db}.schema_migrations DELETE WHERE version = 3")
    store.backend.execute(  # a row written before v3
        f"INSERT INTO {db}.scores (tenant, trace_id, metric, judge_version, value, status, scored_at)"
        " VALUES ('t', 'a', 'faithfulness', 'local:test', 1.0, 'ok', now64(3))"
    )
    assert store.migrate() == SCHEMA_VERSION  # the latest version: v4's columns were there already
    columns = store.query(
        "SELECT name, type FROM system.columns WHERE database = {db:String} AND table = 'scores' ORDER BY position",
        {"db": db},
    )
    v3 = [(c["name"], c["type"]) for c in columns][-len(SCORE_COLUMNS_V3) - 1 : -1]  # the last is v4's
    assert v3 == list(SCORE_COLUMNS_V3)
    (old,) = store.query(f"SELECT flags, inclusion_probability, claim_support FROM {db}.scores")
    assert old == {"flags": [], "inclusion_probability": None, "claim_support": []}


def test_report_quality_is_weighted_back_to_all_traffic(store: Store) -> None:
    sink = StoreScoreSink(store)
    claims = [{"claim": "c", "verdict": "supported", "reason": "", "flag": "", "support": 0.9}]
    sink.write(
        [
            _row(1, 0.0, 1.0, claims=claims),
            _row(2, 0.0, 1.0),
            _row(3, 1.0, 0.25, flags=["refusal"]),
            _row(4, 1.0, 0.25),
            _row(5, 1.0, None),  # weight unknown: in the kept mean, not in the weighted one
            _row(6, None, 0.5),  # a failure: counted as judged, never as a number
            _row(7, 1.0, 1.0, feature="other"),
            _row(8, 0.0, 1.0, scored_at=(NOW_S - 3 * 86400) * 10**9),  # outside the window
        ]
    )
    assert sink.dropped_keys == {}
    db = store.topology.database
    (stored,) = store.query(f"SELECT claim_flags, claim_support FROM {db}.scores WHERE trace_id = '{1:032x}'")
    assert stored == {"claim_flags": [""], "claim_support": [0.9]}

    rows = store.quality(86400, now_s=NOW_S)
    assert [(r["feature"], r["metric"]) for r in rows] == [("faq", "faithfulness"), ("other", "faithfulness")]
    faq = rows[0]
    assert (faq["judged"], faq["ok"], faq["refusals"], faq["unknown_weight"]) == (6, 5, 1, 1)
    assert faq["day"] == time.strftime("%Y-%m-%d", time.gmtime(NOW_S - 600))
    assert faq["kept"]["mean"] == pytest.approx(3 / 5)
    assert faq["weighted"]["n"] == 4 and faq["weighted"]["mean"] == pytest.approx(0.8)
    assert faq["weighted"]["traffic"] == pytest.approx(10.0)
    assert store.quality(86400, feature="other", now_s=NOW_S)[0]["kept"]["mean"] == 1.0
    assert store.quality(86400, tenant="someone-else", now_s=NOW_S) == []

    # `ragmon report` sends the same SQL through the guarded read-only query path (to a running agent too).
    end_s = NOW_S
    assert assemble_quality(store.query(*quality_sql(end_s - 86400, end_s))) == rows

    text = format_quality(rows)
    assert "0.600 [" in text and "0.800 [" in text and "≈10 traces" in text
    assert "1 refusal" in text and "1 without weight" in text
    assert format_quality([]) == "judged quality: no scores in this window"
