"""The `labels` table (schema v8) on both backends: a re-label replaces the reviewer's earlier one while the audit
log keeps both, other reviewers' labels stay beside it, reads see the key's tenant only, and the review queue
offers traces from every score bin, skipping what the reviewer labelled."""

from __future__ import annotations

import time

from ragmon.sinks import Store

from tests.labels.known_labels import JUDGE, OTHER_JUDGE, keep, label, score, trace_id


def test_a_relabel_replaces_the_reviewers_label_and_the_audit_keeps_both(store: Store) -> None:
    t = trace_id(1)
    keep(store, "acme", [t])
    label(store, "acme", {t: True}, note="first look", at_ns=time.time_ns() - 10_000_000_000)
    label(store, "acme", {t: False}, note="the second passage contradicts it")
    label(store, "acme", {t: True}, reviewer="bob")
    current = store.trace_labels(t, tenant="acme")
    assert [(r["reviewer"], bool(r["label"]), r["note"]) for r in current] == [
        ("alice", False, "the second passage contradicts it"),
        ("bob", True, ""),
    ]
    audit = store.query("SELECT reviewer, label, note FROM label_writes ORDER BY labelled_at, reviewer", tenant="acme")
    assert [(r["reviewer"], bool(r["label"]), r["note"]) for r in audit] == [
        ("alice", True, "first look"),
        ("alice", False, "the second passage contradicts it"),
        ("bob", True, ""),
    ]


def test_label_reads_see_the_tenant_only(store: Store) -> None:
    t = trace_id(2)
    keep(store, "acme", [t])
    keep(store, "globex", [t])  # the same id in another tenant
    label(store, "globex", {t: False})
    assert store.trace_labels(t, tenant="acme") == []
    assert len(store.trace_labels(t, tenant="globex")) == 1
    assert store.query("SELECT count() AS n FROM labels", tenant="acme")[0]["n"] == 0
    assert store.query("SELECT count() AS n FROM label_writes", tenant="acme")[0]["n"] == 0
    assert store.is_kept_trace("acme", t) and store.is_kept_trace("globex", t)
    assert not store.is_kept_trace("initech", t)


def test_labelled_scores_pair_each_label_with_each_judge_versions_score(store: Store) -> None:
    ids = [trace_id(i) for i in range(10, 14)]
    keep(store, "acme", ids)
    score(store, "acme", {ids[0]: 0.9, ids[1]: 0.2, ids[2]: None})
    score(store, "acme", {ids[0]: 0.4}, version=OTHER_JUDGE)
    label(store, "acme", {ids[0]: True, ids[1]: True, ids[2]: False, ids[3]: False})  # ids[3] was never judged
    rows = store.labelled_scores(86400, tenant="acme")
    got = {(r["judge_version"], r["trace_id"]): (r["label"], r["score"], r["score_status"]) for r in rows}
    assert got == {
        (JUDGE, ids[0]): (True, 0.9, "ok"),
        (JUDGE, ids[1]): (True, 0.2, "ok"),
        (JUDGE, ids[2]): (False, None, "parse_error"),
        (OTHER_JUDGE, ids[0]): (True, 0.4, "ok"),
    }
    only = store.labelled_scores(86400, tenant="acme", judge_version=OTHER_JUDGE)
    assert [(r["judge_version"], r["trace_id"]) for r in only] == [(OTHER_JUDGE, ids[0])]
    assert store.labelled_scores(86400, tenant="globex") == []


def test_the_review_queue_offers_every_score_bin_and_skips_what_the_reviewer_labelled(store: Store) -> None:
    # 30 traces scored 0.0 .. 0.97: 6 per bin of five; the queue offers 2 per bin.
    ids = [trace_id(100 + i) for i in range(30)]
    keep(store, "acme", ids)
    score(store, "acme", {t: i / 30 for i, t in enumerate(ids)})
    queue = store.review_queue("faithfulness", since_s=3600, per_bin=2, bins=5, reviewer="alice", tenant="acme")
    assert [r["bin"] for r in queue] == [0, 0, 1, 1, 2, 2, 3, 3, 4, 4]
    assert all(r["in_bin"] == 6 and r["labelled_in_bin"] == 0 for r in queue)
    assert all(int(r["score"] * 5) == r["bin"] for r in queue)
    first = queue[0]["trace_id"]
    label(store, "acme", {first: True})
    again = store.review_queue("faithfulness", since_s=3600, per_bin=2, bins=5, reviewer="alice", tenant="acme")
    assert first not in {r["trace_id"] for r in again}
    assert [r["bin"] for r in again] == [0, 0, 1, 1, 2, 2, 3, 3, 4, 4]
    assert again[0]["labelled_in_bin"] == 1
    assert store.reviewer_label_count("faithfulness", "alice", tenant="acme") == 1
    assert store.reviewer_label_count("faithfulness", "alice", tenant="globex") == 0
    # another reviewer still gets it: their labels overlap alice's (same order)
    bob = store.review_queue("faithfulness", since_s=3600, per_bin=2, bins=5, reviewer="bob", tenant="acme")
    assert [r["trace_id"] for r in bob] == [r["trace_id"] for r in queue]
    assert store.review_queue("faithfulness", since_s=3600, per_bin=2, bins=5, reviewer="", tenant="globex") == []
