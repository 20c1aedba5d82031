"""Which traffic a read covers: production (the default), every evaluation run, or one `ragmon eval run`.

Spans sent by `ragmon eval run` carry the run's name (`ragmon.eval.run`, as a span and a resource attribute), and the
store keeps it in an `eval_run` column (schema v7; '' for production) on spans, payloads, the rollups and the
sampling counts. Every production view — the report, alerts, drift baselines, the dashboard — reads `PRODUCTION`
unless asked otherwise: a dataset replayed against the app, or a candidate model tried on it, is not what users saw.

Scores carry their trace's `eval_run` from schema v9 on (the judge copies it from the payload it judged), so an eval
run's scores stay apart for as long as scores are kept (180 days by default), long after its payloads (14 days) have
expired. Rows scored before v9 read '' there; `scores_condition` still finds those of an eval run through the
payloads of its traces, where the judge read them from, while the payloads last.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

COLUMN = "eval_run"


@dataclass(frozen=True, slots=True)
class Traffic:
    """`eval_run` set: that run only; else `evaluation`: every eval run's traffic; else production (the default)."""

    eval_run: str | None = None
    evaluation: bool = False

    @classmethod
    def of(cls, *, eval_run: str | None = None, evaluation: bool = False) -> Traffic:
        if eval_run == "":
            raise ValueError("an eval run has a name ('' is production traffic)")
        return cls(eval_run, evaluation and eval_run is None)

    @property
    def is_production(self) -> bool:
        return self.eval_run is None and not self.evaluation

    def condition(self, params: dict[str, Any], column: str = COLUMN) -> str:
        """A SQL condition on `column`; an eval run's name is the `{eval_run:String}` parameter, added to `params`."""
        if self.eval_run is None:
            return f"{column} != ''" if self.evaluation else f"{column} = ''"
        params["eval_run"] = self.eval_run
        return f"{column} = {{eval_run:String}}"

    def scores_condition(self, params: dict[str, Any], payloads_table: str = "payloads") -> str:
        """A condition on a `scores` row: its own `eval_run` (schema v9) or, for a row scored before v9 (which reads
        ''), its trace's payload while that lasts (see the module). An eval run's name is a parameter, added to
        `params`. Its columns are unqualified: it belongs in a WHERE over `scores` alone (a subquery, in a join)."""
        if self.is_production:
            evaluation_traces = f"SELECT trace_id FROM {payloads_table} WHERE {EVALUATION.condition(params)}"
            return f"({self.condition(params)} AND trace_id NOT IN ({evaluation_traces}))"
        traces = f"SELECT trace_id FROM {payloads_table} WHERE {self.condition(params)}"
        return f"({self.condition(params)} OR trace_id IN ({traces}))"

    def label(self) -> str:
        if self.eval_run is not None:
            return f"eval run {self.eval_run}"
        return "evaluation runs" if self.evaluation else "production"

    def to_params(self) -> dict[str, str]:
        """Query-string form (the API, the dashboard): `traffic=production|evaluation`, or `eval_run=NAME`."""
        if self.eval_run is not None:
            return {"eval_run": self.eval_run}
        return {"traffic": "evaluation" if self.evaluation else "production"}

    @classmethod
    def from_params(cls, params: Mapping[str, Sequence[str]]) -> Traffic:
        """From a parsed query string (`urllib.parse.parse_qs`); ValueError for a value it does not know."""
        run = (params.get("eval_run") or [""])[0]
        if run:
            return cls(run)
        traffic = (params.get("traffic") or ["production"])[0]
        if traffic not in ("production", "evaluation"):
            raise ValueError(f"traffic must be production or evaluation, got {traffic!r}")
        return cls(evaluation=traffic == "evaluation")


PRODUCTION = Traffic()
EVALUATION = Traffic(evaluation=True)
