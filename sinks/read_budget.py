"""Query budgets for callers' reads: which limits apply to whom, as engine settings, and what their errors say.

Every read the store runs for a caller (`Store.query`, `report`, `quality`, the label reads; the dashboard reads
through them) carries its tenant's `ragmon.settings.QueryBudget` as query-level settings the engine enforces:
`max_execution_time` (with `timeout_overflow_mode='throw'`), `max_rows_to_read`, `max_bytes_to_read`,
`max_memory_usage`, `max_result_rows` and `max_result_bytes` (overflow modes 'throw': a cut result would look
whole). The engine's error is turned into `QueryBudgetExceeded` naming the budget field and the setting that sets
it for this caller, and every message a caller sees is scrubbed of the settings sent with the read — among them
the tenant filter (`additional_table_filters`), which the engine echoes when it quotes the query back.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ragmon.sinks.errors import QueryBudgetExceeded, StoreError

from ragmon.settings import QueryBudget

# ClickHouse error codes of the budget's limits.
TOO_MANY_ROWS = 158  # max_rows_to_read
TIMEOUT_EXCEEDED = 159  # max_execution_time
TOO_MANY_BYTES = 307  # max_bytes_to_read
MEMORY_LIMIT_EXCEEDED = 241  # max_memory_usage ("Query memory limit"), or the engine's total (not the budget's)
TOO_MANY_ROWS_OR_BYTES = 396  # max_result_rows / max_result_bytes
QUERY_WAS_CANCELLED = 394


@dataclass(frozen=True)
class QueryBudgets:
    """The default budget (the local operator's, tenant None) and the tenants' own (already merged over it, as
    `AgentSettings.query_budgets` are)."""

    default: QueryBudget = field(default_factory=QueryBudget)
    per_tenant: Mapping[str, QueryBudget] = field(default_factory=dict)

    def for_tenant(self, tenant: str | None) -> QueryBudget:
        if tenant is not None and tenant in self.per_tenant:
            return self.per_tenant[tenant]
        return self.default

    def setting_path(self, tenant: str | None, limit: str) -> str:
        """Where `limit` is set for `tenant`: what an error tells the operator to change."""
        if tenant is not None and tenant in self.per_tenant:
            return f"agent.query_budgets[{tenant!r}].{limit}"
        return f"agent.query_budget.{limit}"


def budget_settings(budget: QueryBudget) -> dict[str, int | float | str]:
    """The engine settings that enforce `budget`."""
    return {
        "max_execution_time": budget.max_execution_time_s,
        "timeout_overflow_mode": "throw",
        "max_rows_to_read": budget.max_rows_to_read,
        "max_bytes_to_read": budget.max_bytes_to_read,
        "read_overflow_mode": "throw",
        "max_memory_usage": budget.max_memory_bytes,
        "max_result_rows": budget.max_result_rows,
        "max_result_bytes": budget.max_result_bytes,
        "result_overflow_mode": "throw",
    }


def _what(limit: str, budget: QueryBudget) -> str:
    value = getattr(budget, limit)
    return {
        "max_execution_time_s": f"it ran past the {value:g} s execution-time limit",
        "max_rows_to_read": f"it would read more than {value:,} rows",
        "max_bytes_to_read": f"it would read more than {value:,} bytes",
        "max_memory_bytes": f"it needed more than its {value:,} bytes of memory",
        "max_result_rows": f"its result has more than {value:,} rows",
        "max_result_bytes": f"its result is larger than {value:,} bytes",
    }[limit]


def exceeded(limit: str, budgets: QueryBudgets, tenant: str | None, code: int | None = None) -> QueryBudgetExceeded:
    setting = budgets.setting_path(tenant, limit)
    message = f"query stopped: {_what(limit, budgets.for_tenant(tenant))} ({setting})"
    return QueryBudgetExceeded(message, limit=limit, setting=setting, code=code)


def budget_limit(code: int | None, message: str) -> str | None:
    """The budget field an engine error says was exceeded, or None when it is no budget's."""
    if code == TIMEOUT_EXCEEDED and "Timeout exceeded" in message:
        return "max_execution_time_s"
    if code == TOO_MANY_ROWS and ("max_rows_to_read" in message or "to read exceeded" in message):
        return "max_rows_to_read"
    if code == TOO_MANY_BYTES and "to read exceeded" in message:
        return "max_bytes_to_read"
    # "Query memory limit exceeded" / "Memory limit (for query) exceeded" is the read's own; "(total)" is the
    # engine's, shared with every insert: that one stays a retryable StoreError (the store is under pressure).
    if code == MEMORY_LIMIT_EXCEEDED and ("Query memory limit" in message or "(for query)" in message):
        return "max_memory_bytes"
    if code == TOO_MANY_ROWS_OR_BYTES and "Limit for result exceeded" in message:
        return "max_result_bytes" if "max bytes" in message else "max_result_rows"
    return None


# ` SETTINGS name = value, …` as the engine prints a query back: values are numbers, quoted strings or maps of them.
_STRING = r"'(?:[^'\\]|\\.)*'"
_VALUE = rf"(?:{_STRING}|\{{(?:\s*{_STRING}\s*:\s*{_STRING}\s*,?)*\s*\}}|[-\w.]+)"
_ECHOED_SETTINGS = re.compile(rf"\s*\bSETTINGS\s+\w+\s*=\s*{_VALUE}(?:\s*,\s*\w+\s*=\s*{_VALUE})*")


def scrub(message: str, sent: Mapping[str, Any]) -> str:
    """`message` without the settings the store sent: the clause the engine quotes back is cut out, and should a
    setting's name or value still appear (quoted some other way), the message is replaced whole — a caller never
    learns the tenant filter's text."""
    if not sent:
        return message
    cleaned = _ECHOED_SETTINGS.sub("", message)
    secrets = [name for name in sent if name == "additional_table_filters"]
    secrets += [str(value) for name, value in sent.items() if name == "additional_table_filters"]
    if any(secret in cleaned for secret in secrets) or "tenant = \\'" in cleaned:
        code = re.search(r"\(([A-Z_]+)\)\s*$", cleaned)
        return f"the query failed in the engine ({code.group(1) if code else 'no error name'})"
    return cleaned


def scrubbed(exc: StoreError, sent: Mapping[str, Any]) -> StoreError:
    """`exc` with its message scrubbed (`scrub`), of the same class when that class takes a bare message."""
    message = scrub(str(exc), sent)
    if message == str(exc):
        return exc
    return StoreError(message, retryable=exc.retryable, code=exc.code)
