"""The store as the conversation view sees it (`GET /api/read/conversation`, `conversations`; the dashboard's
`#/conversation/…`): a session's turns in order, with their text when kept, scores, latency and status, and the
conversation's own score (`conversation_score.py`); the sessions active lately, each with its score.

Callers' reads: under the caller's budget and the tenant filter. A conversation is found by its session or by any
trace of it; a session's traces are looked for over `since_s` back from now (`spans` has no index on session, so the
window is what bounds the read: its day partitions).
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any, Protocol

from ragmon.sinks.conversation_score import conversation_score
from ragmon.sinks.conversation_sql import (
    recent_sessions_sql,
    session_of_trace_sql,
    turn_scores_sql,
    turn_texts_sql,
    turns_sql,
)
from ragmon.sinks.feedback_sql import trace_feedback_sql
from ragmon.sinks.store_base import StoreBase
from ragmon.sinks.traffic import PRODUCTION, Traffic

MAX_TURNS = 500  # a conversation's turns shown at most (the oldest first)


# Feedback given on a conversation's turns up to this long ago is shown (the feedback table keeps it 180 days).
FEEDBACK_SINCE_S = 180 * 86400

class ConversationStore(Protocol):
    """What the conversation reads depend on (`named_reads.py`)."""

    def conversation(
        self,
        *,
        session: str | None = None,
        trace_id: str | None = None,
        since_s: float = 7 * 86400,
        tenant: str | None = None,
    ) -> dict[str, Any]: ...

    def conversations(
        self, since_s: float, limit: int, *, tenant: str | None = None, traffic: Traffic = PRODUCTION
    ) -> list[dict[str, Any]]: ...


def _seconds(value: Any) -> float:
    return value.timestamp() if isinstance(value, datetime) else float(value or 0.0)


class ConversationMethods(StoreBase):
    """The conversation view's methods of `Store`."""

    def conversation(
        self,
        *,
        session: str | None = None,
        trace_id: str | None = None,
        since_s: float = 7 * 86400,
        tenant: str | None = None,
    ) -> dict[str, Any]:
        """The conversation of `session`, or of the trace `trace_id`: {session, turns, score}. Its turns are the
        session's traces that started in the last `since_s` seconds, oldest first, each with trace_id, start,
        latency_ms, status, feature, question and answer (when kept), kept, reasons, scores by metric (value, status,
        flags) and `feedback` (the users' thumbs, ratings and latest comment; None without any). A trace without a
        session is a conversation of one turn; an unknown one has none."""
        if (session is None) == (trace_id is None):
            raise ValueError("name a session or a trace id, not both")
        now_s = time.time()
        start_s = int(now_s - since_s)
        if trace_id is not None:
            found = self._caller_rows(
                session_of_trace_sql(self._ddl), {"trace_id": trace_id}, tenant=tenant, tenant_filter=True
            )
            session = str(found[0]["session"]) if found and found[0]["started"] is not None else ""
            if not session:  # no session (or no trace): the trace alone, if it is there
                rows = self._turn_rows_of([trace_id], start_s=0, tenant=tenant) if found else []
                return self._assembled("", rows, now_s, tenant)
            # the trace's own start bounds the window too: its conversation is read even when older than since_s
            start_s = min(start_s, int(_seconds(found[0]["started"]) - since_s))
        params = {"session": session, "start_s": start_s, "limit": MAX_TURNS}
        rows = self._caller_rows(turns_sql(self._ddl), params, tenant=tenant, tenant_filter=True)
        return self._assembled(str(session), rows, now_s, tenant)

    def _turn_rows_of(self, trace_ids: Sequence[str], *, start_s: int, tenant: str | None) -> list[dict[str, Any]]:
        """Those traces as turns (a trace without a session is a conversation of its own)."""
        params = {"trace_ids": list(trace_ids), "start_s": start_s, "limit": MAX_TURNS}
        sql = turns_sql(self._ddl, of_session=False)
        return self._caller_rows(sql, params, tenant=tenant, tenant_filter=True)

    def _assembled(
        self, session: str, rows: Sequence[Mapping[str, Any]], now_s: float, tenant: str | None
    ) -> dict[str, Any]:
        turns = self._turns(rows, tenant)
        return {"session": session, "turns": turns, "score": conversation_score(turns, now_s)}

    def _turns(self, rows: Sequence[Mapping[str, Any]], tenant: str | None) -> list[dict[str, Any]]:
        ids = [str(row["trace_id"]) for row in rows]
        texts, scores = self._texts_and_scores(ids, tenant)
        feedback = self._feedback(ids, tenant)
        turns = []
        for index, row in enumerate(rows):
            trace = str(row["trace_id"])
            text = texts.get(trace)
            turns.append(
                {
                    "turn": index + 1,
                    "trace_id": trace,
                    "tenant": row["tenant"],
                    "started": row["started"],
                    "start_s": _seconds(row["started"]),
                    "latency_ms": float(row["latency_ms"]),
                    "status": "error" if int(row["errors"]) else "ok",
                    "errors": int(row["errors"]),
                    "error_type": row["error_type"],
                    "feature": row["feature"],
                    "eval_run": row["eval_run"],
                    "kept": text is not None,
                    "question": text["question"] if text else "",
                    "answer": text["answer"] if text else "",
                    "reasons": list(text["sampling_reasons"]) if text else [],
                    "scores": scores.get(trace, {}),
                    # The users' own verdict on this turn (thumbs, rating, comment, `feedback_sql`); None without
                    "feedback": feedback.get(trace),
                }
            )
        return turns

    def _feedback(self, trace_ids: Sequence[str], tenant: str | None) -> dict[str, dict[str, Any]]:
        """Per turn with end users' feedback: its thumbs, ratings, named scores, negative verdicts, latest comment."""
        if not trace_ids:
            return {}
        params = {"trace_ids": list(trace_ids), "since_s": FEEDBACK_SINCE_S}
        out: dict[str, dict[str, Any]] = {}
        for row in self._caller_rows(trace_feedback_sql(self._ddl), params, tenant=tenant, tenant_filter=True):
            mean = row["mean_rating"]
            out[str(row["trace_id"])] = {
                "thumbs_up": int(row["thumbs_up"]),
                "thumbs_down": int(row["thumbs_down"]),
                "ratings": int(row["ratings"]),
                "mean_rating": None if mean is None else float(mean),
                "scores": int(row["scores"]),
                "verdicts": int(row["verdicts"]),
                "negative": int(row["negative"]),
                "comment": str(row["comment"]),
            }
        return out

    def _texts_and_scores(
        self, trace_ids: Sequence[str], tenant: str | None
    ) -> tuple[dict[str, dict[str, Any]], dict[str, dict[str, dict[str, Any]]]]:
        if not trace_ids:
            return {}, {}
        params = {"trace_ids": list(trace_ids)}
        texts = {
            str(row["trace_id"]): row
            for row in self._caller_rows(turn_texts_sql(self._ddl), params, tenant=tenant, tenant_filter=True)
        }
        scores: dict[str, dict[str, dict[str, Any]]] = {}
        for row in self._caller_rows(turn_scores_sql(self._ddl), params, tenant=tenant, tenant_filter=True):
            value = row["value"]
            scores.setdefault(str(row["trace_id"]), {})[str(row["metric"])] = {
                "value": None if value is None or value != value else float(value),
                "status": row["status"],
                "flags": list(row["flags"]),
                "judge_version": row["judge_version"],
            }
        return texts, scores

    def conversations(
        self, since_s: float, limit: int, *, tenant: str | None = None, traffic: Traffic = PRODUCTION
    ) -> list[dict[str, Any]]:
        """The sessions of `traffic` with a turn in the last `since_s` seconds, most recently active first, at most
        `limit`: tenant, session, turns, first and last start, feature, the first turn's trace and the
        conversation's score (`conversation_score`)."""
        now_s = time.time()
        params: dict[str, Any] = {"start_s": int(now_s - since_s), "limit": int(limit)}
        sql = recent_sessions_sql(self._ddl, traffic.condition(params))
        sessions = self._caller_rows(sql, params, tenant=tenant, tenant_filter=True)
        out = []
        for row in sessions:
            found = self.conversation(session=str(row["session"]), since_s=since_s, tenant=tenant)
            out.append(
                {
                    "tenant": row["tenant"],
                    "session": row["session"],
                    "turns": int(row["turns"]),
                    "first_start": row["first_start"],
                    "last_start": row["last_start"],
                    "feature": row["feature"],
                    "first_trace": row["first_trace"],
                    "score": found["score"],
                }
            )
        return out
