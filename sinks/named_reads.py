"""Named reads: each section a command shows — `ragmon report`'s stages, kept share and quality, `ragmon alerts` and
its history note, `ragmon calibrate --from-store`'s labelled scores — is one read of the store by name, with typed
parameters. A command runs it on the store when no agent owns the data directory, and asks the agent's
`GET /api/read/<name>?…` when one does (an embedded store has one owner): no SQL travels, the agent runs the same
store method the command would have, for the API key's tenant.

Both sides read the parameters the same way, from their query-string form (`NamedRead.parse`): the command checks
its values before it reads (`NamedRead.check`; a bad value is its own error, not a round trip), the agent checks what
arrived (a 400). An unknown parameter is an error too, not silently ignored. Answers are plain JSON on both paths
(`plain`: datetimes as ISO 8601 text), so a command prints the same whichever path it took.

To add a read: the store method in its reader's module (`for_report.py`, …), its Protocol there, and one
`NamedRead` in `READS` below; the agent's route and the commands' `read_rows` need nothing more.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import date, datetime
from typing import Any, Protocol

from ragmon.sinks.for_conversations import ConversationStore
from ragmon.sinks.for_documents import DocumentStore
from ragmon.sinks.for_questions import QuestionViewStore
from ragmon.sinks.for_report import ReportStore
from ragmon.sinks.traffic import Traffic

Query = Mapping[str, Sequence[str]]  # a parsed query string (`urllib.parse.parse_qs`)

# The longest window a read takes: labels live a year by default, rollups 400 days; a decade also bounds the
# engine's UInt32 seconds parameters.
MAX_WINDOW_S = 10 * 366 * 86400


class BadParameter(ValueError):
    """A parameter a read does not take, or a value it cannot use (the API answers 400, a command exits 2)."""


class UnknownRead(LookupError):
    """No read by that name (the API answers 404)."""


def _one(query: Query, key: str) -> str | None:
    values = query.get(key) or []
    if len(values) > 1:
        raise BadParameter(f"{key} is given more than once")
    return values[0] if values else None


@dataclass(frozen=True)
class Window:
    """Seconds back from now, above 0 and at most `MAX_WINDOW_S`."""

    name: str
    default: float

    @property
    def keys(self) -> tuple[str, ...]:
        return (self.name,)

    def parse(self, query: Query) -> float:
        text = _one(query, self.name)
        if text is None:
            return self.default
        try:
            seconds = float(text)
        except ValueError:
            seconds = math.nan
        if not 0 < seconds <= MAX_WINDOW_S:  # NaN fails this too
            raise BadParameter(f"{self.name} must be seconds, above 0 and at most {MAX_WINDOW_S}, got {text!r}")
        return seconds

    def encode(self, value: Any) -> dict[str, str]:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise BadParameter(f"{self.name} must be a number of seconds, got {value!r}")
        return {self.name: repr(float(value))}


@dataclass(frozen=True)
class Count:
    """A whole number from `low` to `high`."""

    name: str
    default: int
    low: int
    high: int

    @property
    def keys(self) -> tuple[str, ...]:
        return (self.name,)

    def parse(self, query: Query) -> int:
        text = _one(query, self.name)
        if text is None:
            return self.default
        if not (text.isascii() and text.isdigit()) or not self.low <= int(text) <= self.high:
            raise BadParameter(f"{self.name} must be a whole number from {self.low} to {self.high}, got {text!r}")
        return int(text)

    def encode(self, value: Any) -> dict[str, str]:
        if isinstance(value, bool) or not isinstance(value, int):
            raise BadParameter(f"{self.name} must be a whole number, got {value!r}")
        return {self.name: str(value)}


@dataclass(frozen=True)
class Name:
    """An optional name (a feature, a judge version); absent or empty means any."""

    name: str

    @property
    def keys(self) -> tuple[str, ...]:
        return (self.name,)

    def parse(self, query: Query) -> str | None:
        return _one(query, self.name) or None

    def encode(self, value: Any) -> dict[str, str]:
        if not isinstance(value, str):
            raise BadParameter(f"{self.name} must be text, got {value!r}")
        return {self.name: value}


@dataclass(frozen=True)
class TrafficChoice:
    """Which traffic (`ragmon.sinks.traffic`): `traffic=production|evaluation`, or `eval_run=NAME`."""

    name: str = "traffic"

    @property
    def keys(self) -> tuple[str, ...]:
        return ("traffic", "eval_run")

    def parse(self, query: Query) -> Traffic:
        for key in self.keys:
            _one(query, key)
        try:
            return Traffic.from_params(query)
        except ValueError as exc:
            raise BadParameter(str(exc)) from exc

    def encode(self, value: Any) -> dict[str, str]:
        if not isinstance(value, Traffic):
            raise BadParameter(f"traffic must be a Traffic, got {value!r}")
        return value.to_params()


@dataclass(frozen=True)
class ConversationKey:
    """Which conversation: `session=ID`, or `trace_id=<32 hex>` for the conversation of any trace of it; one of
    the two, not both."""

    name: str = "conversation"

    @property
    def keys(self) -> tuple[str, ...]:
        return ("session", "trace_id")

    def parse(self, query: Query) -> dict[str, str]:
        session, trace_id = _one(query, "session"), _one(query, "trace_id")
        if bool(session) == bool(trace_id):
            raise BadParameter("name the conversation by session or by trace_id (one of the two)")
        if trace_id is not None and not (len(trace_id) == 32 and all(c in "0123456789abcdef" for c in trace_id)):
            raise BadParameter(f"trace_id must be 32 lowercase hex characters, got {trace_id!r}")
        return {"session": session} if session else {"trace_id": str(trace_id)}

    def encode(self, value: Any) -> dict[str, str]:
        if not isinstance(value, Mapping) or not all(isinstance(v, str) for v in value.values()):
            raise BadParameter(f"conversation must be {{'session': ID}} or {{'trace_id': ID}}, got {value!r}")
        return {key: str(value[key]) for key in self.keys if key in value}


class ReadStore(ReportStore, ConversationStore, DocumentStore, QuestionViewStore, Protocol):
    """What the named reads run on: the report's reads, the conversations', the documents' and the question
    groups'."""


Param = Window | Count | Name | TrafficChoice | ConversationKey
Run = Callable[[ReadStore, dict[str, Any], "str | None"], Any]  # store, parsed values, tenant -> the answer


@dataclass(frozen=True)
class NamedRead:
    name: str
    params: tuple[Param, ...]
    run: Run  # on the store, for the tenant (None: every tenant)

    def parse(self, query: Query) -> dict[str, Any]:
        """The read's values from a query string; BadParameter for a key it does not take or a value it cannot use."""
        keys = [key for param in self.params for key in param.keys]
        unknown = sorted(set(query) - set(keys))
        if unknown:
            takes = ", ".join(keys) or "no parameters"
            raise BadParameter(f"{self.name} does not take {', '.join(unknown)} (it takes {takes})")
        return {param.name: param.parse(query) for param in self.params}

    def encode(self, values: Mapping[str, Any]) -> dict[str, str]:
        """`values` (None: the read's default) as the query string the agent parses."""
        by_name = {param.name: param for param in self.params}
        unknown = sorted(set(values) - set(by_name))
        if unknown:
            raise BadParameter(f"{self.name} does not take {', '.join(unknown)}")
        out: dict[str, str] = {}
        for name, value in values.items():
            if value is not None:
                out.update(by_name[name].encode(value))
        return out

    def check(self, values: Mapping[str, Any]) -> dict[str, Any]:
        """`values` as the agent would read them from `encode(values)`: what a command runs or sends."""
        return self.parse({key: [text] for key, text in self.encode(values).items()})


def _report(store: ReportStore, v: dict[str, Any], tenant: str | None) -> Any:
    where = {"release": v["release"], "environment": v["environment"]}
    return store.report(v["since_s"], feature=v["feature"], tenant=tenant, traffic=v["traffic"], **where)


def _kept_share(store: ReportStore, v: dict[str, Any], tenant: str | None) -> Any:
    return store.kept_share(v["since_s"], feature=v["feature"], tenant=tenant, traffic=v["traffic"])


def _quality(store: ReportStore, v: dict[str, Any], tenant: str | None) -> Any:
    where = {"release": v["release"], "environment": v["environment"]}
    return store.quality(v["since_s"], feature=v["feature"], tenant=tenant, traffic=v["traffic"], **where)


def _releases(store: ReportStore, v: dict[str, Any], tenant: str | None) -> Any:
    where = {"release": v["release"], "environment": v["environment"]}
    return store.releases(v["since_s"], feature=v["feature"], tenant=tenant, traffic=v["traffic"], **where)


def _alerts(store: ReportStore, v: dict[str, Any], tenant: str | None) -> Any:
    return store.recent_alerts(v["since_s"], v["limit"], tenant=tenant)


def _production_minutes(store: ReportStore, v: dict[str, Any], tenant: str | None) -> Any:
    return {"minutes": store.production_minutes(tenant=tenant)}


def _labelled_scores(store: ReportStore, v: dict[str, Any], tenant: str | None) -> Any:
    return store.labelled_scores(v["since_s"], judge_version=v["judge_version"], tenant=tenant)


def _documents(store: ReadStore, v: dict[str, Any], tenant: str | None) -> Any:
    return store.documents(v["since_s"], feature=v["feature"], limit=v["limit"], tenant=tenant, traffic=v["traffic"])


def _problem_documents(store: ReadStore, v: dict[str, Any], tenant: str | None) -> Any:
    return store.problem_documents(
        v["since_s"],
        feature=v["feature"],
        min_judged=v["min_judged"],
        limit=v["limit"],
        tenant=tenant,
        traffic=v["traffic"],
    )


def _document_shift(store: ReadStore, v: dict[str, Any], tenant: str | None) -> Any:
    for name in ("release_a", "release_b"):
        if v[name] is None:
            raise BadParameter(f"document_shift needs {name}")
    return store.document_shift(
        v["feature"],
        v["release_a"],
        v["release_b"],
        v["since_s"],
        group_id=v["group_id"],
        limit=v["limit"],
        tenant=tenant,
        traffic=v["traffic"],
    )


def _conversation(store: ReadStore, v: dict[str, Any], tenant: str | None) -> Any:
    return store.conversation(**v["conversation"], since_s=v["since_s"], tenant=tenant)


def _conversations(store: ReadStore, v: dict[str, Any], tenant: str | None) -> Any:
    return store.conversations(v["since_s"], v["limit"], tenant=tenant, traffic=v["traffic"])


def _compare(store: ReadStore, v: dict[str, Any], tenant: str | None) -> Any:
    return store.compare(v["feature"], baseline=v["baseline"], candidate=v["candidate"], tenant=tenant)


def _feedback(store: ReportStore, v: dict[str, Any], tenant: str | None) -> Any:
    return store.feedback_summary(v["since_s"], feature=v["feature"], tenant=tenant, traffic=v["traffic"])


def _feedback_scores(store: ReportStore, v: dict[str, Any], tenant: str | None) -> Any:
    return store.feedback_scores(v["since_s"], judge_version=v["judge_version"], tenant=tenant)


def _question_groups(store: ReadStore, v: dict[str, Any], tenant: str | None) -> Any:
    return store.question_groups(
        v["since_s"], feature=v["feature"], limit=v["limit"], tenant=tenant, traffic=v["traffic"]
    )


def _feedback_questions(store: ReportStore, v: dict[str, Any], tenant: str | None) -> Any:
    return store.feedback_by_question(v["since_s"], feature=v["feature"], tenant=tenant, traffic=v["traffic"])


_WINDOW = (Window("since_s", 3600.0), Name("feature"), TrafficChoice())
# One release and/or environment (`ragmon.sinks.releases`): the rollups, payloads and scores know them; the
# sampler's counts do not, so the kept share takes neither.
_RELEASED = (*_WINDOW, Name("release"), Name("environment"))
_DAY = (Window("since_s", 86400.0), Name("feature"), TrafficChoice())

READS: dict[str, NamedRead] = {
    read.name: read
    for read in (
        # `ragmon report`: per (feature, stage), from the rollups; what the sampler kept; judged quality
        NamedRead("report", _RELEASED, _report),
        NamedRead("kept_share", _WINDOW, _kept_share),
        NamedRead("quality", _RELEASED, _quality),
        # each release seen in the window, per feature, side by side (`ragmon report`'s releases section)
        NamedRead("releases", _RELEASED, _releases),
        # `ragmon alerts`: the alerts table's recent and open rows; how much history drift rules have had
        NamedRead("alerts", (Window("since_s", 86400.0), Count("limit", 500, 1, 100_000)), _alerts),
        NamedRead("production_minutes", (), _production_minutes),
        # `ragmon calibrate --from-store`: people's labels beside the judge's scores
        NamedRead("labelled_scores", (Window("since_s", 30 * 86400.0), Name("judge_version")), _labelled_scores),
        # the document views (`for_documents.py`): per document; the ones in answers judged bad; retrieval per
        # question group, release A against B (release_a and release_b are required)
        NamedRead("documents", (*_DAY, Count("limit", 50, 1, 10_000)), _documents),
        NamedRead(
            "problem_documents",
            (*_DAY, Count("min_judged", 3, 1, 1_000_000), Count("limit", 20, 1, 10_000)),
            _problem_documents,
        ),
        NamedRead(
            "document_shift",
            (*_DAY, Name("release_a"), Name("release_b"), Name("group_id"), Count("limit", 10, 1, 10_000)),
            _document_shift,
        ),
        # the conversation view: a session's turns in order with their scores, and the sessions active lately
        NamedRead("conversation", (ConversationKey(), Window("since_s", 7 * 86400.0)), _conversation),
        NamedRead(
            "conversations",
            (Window("since_s", 86400.0), Count("limit", 50, 1, 500), TrafficChoice()),
            _conversations,
        ),
        # `ragmon compare`: a candidate release against a baseline, overall and per question group
        NamedRead("compare", (Name("feature"), Name("baseline"), Name("candidate")), _compare),
        # end users' feedback: per feature (`ragmon report`), and each trace's verdict beside the judge's score
        NamedRead("feedback", _WINDOW, _feedback),
        NamedRead("feedback_scores", (Window("since_s", 30 * 86400.0), Name("judge_version")), _feedback_scores),
        # `ragmon report`'s most common questions, the dashboard's question view: per question group, this window
        # against the one before
        NamedRead("question_groups", (*_WINDOW, Count("limit", 10, 1, 1000)), _question_groups),
        # the same figures per recurring question group (the dashboard's feedback view)
        NamedRead("feedback_questions", _WINDOW, _feedback_questions),
    )
}


def named_read(name: str) -> NamedRead:
    try:
        return READS[name]
    except KeyError:
        raise UnknownRead(f"no such read: {name} (reads: {', '.join(READS)})") from None


def run_read(store: ReadStore, name: str, values: Mapping[str, Any], *, tenant: str | None = None) -> Any:
    """The answer of read `name` with checked `values` (`NamedRead.parse` or `check`), for `tenant`, as plain JSON."""
    return plain(named_read(name).run(store, dict(values), tenant))


def plain(value: Any) -> Any:
    """`value` as its JSON carries it (datetimes as ISO 8601 text): the agent's answer, and a direct read's too."""
    return json.loads(json.dumps(value, default=_json_value))


def _json_value(value: Any) -> Any:
    return value.isoformat() if isinstance(value, datetime | date) else str(value)
