"""Which traffic a read covers: production (the default), every evaluation run, or one `ragmon eval run`.

Spans sent by `ragmon eval run` carry the run's name (`ragmon.eval.run`, as a span and a resource attribute), and the
store keeps it in an `eval_run` column (schema v7; '' for production) on spans, payloads, the rollups and the
sampling counts. Every production view — the report, alerts, drift baselines, the dashboard — reads `PRODUCTION`
unless asked otherwise: a dataset replayed against the app, or a candidate model tried on it, is not what users saw.

Scores carry no `eval_run` of their own (the judge writes them); `scores_condition` finds an eval run's scores
through the payloads of its traces, which is where the judge read them from. A score whose payload has expired
(payloads keep 14 days by default, scores 180) counts as production.
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
        """A condition on a `scores` row's trace_id, through the payloads of evaluation traces (see the module); an
        eval run's name is a parameter, added to `params`."""
        if self.is_production:
            return f"trace_id NOT IN (SELECT trace_id FROM {payloads_table} WHERE {EVALUATION.condition(params)})"
        return f"trace_id IN (SELECT trace_id FROM {payloads_table} WHERE {self.condition(params)})"

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
