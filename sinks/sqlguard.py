"""The parse-level guard for `ragmon query "SELECT …"`: one SELECT (or WITH … SELECT), nothing that escapes.

The engine does the parsing, not a regex: the text is first normalised by `formatQuerySingleLine` (passed as a
parameter, so it cannot inject; it refuses multi-statements, which chDB would otherwise run one after another),
then `EXPLAIN AST` of the normalised text is checked:

- the root is a `SelectWithUnionQuery` with a single child — a `FORMAT` or `INTO OUTFILE` clause adds a child
  (measured: `INTO OUTFILE` writes a file even on a `readonly=2` chDB connection);
- no `SETTINGS` clause (it could switch off the tenant filter, `additional_table_filters`);
- table functions only from a small allowlist (no `file()`, `url()`, `s3()`, `remote()`, `mysql()` …);
- no scalar function that reads outside the database (`file('…')` reads a file in chDB).

What runs is the normalised text that was checked. The backend then executes it on a read-only connection.

`DESCRIBE [TABLE] t` and `SHOW TABLES`, the first things a newcomer types, are read as the SELECTs over `system`
they mean (`metadata_select`); those SELECTs then pass the same checks.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from ragmon.sinks.errors import QueryRejected, StoreError

ALLOWED_TABLE_FUNCTIONS = frozenset({"numbers", "numbers_mt", "zeros", "zeros_mt", "generateSeries", "values", "null"})
FORBIDDEN_FUNCTIONS = frozenset({"file", "url", "s3", "remote", "remoteSecure", "executable", "input", "getSetting"})


_DESCRIBE = re.compile(
    r"\s*(?:DESCRIBE|DESC)\s+(?:TABLE\s+)?(?:`?(?P<database>\w+)`?\.)?`?(?P<table>\w+)`?\s*;?\s*", re.IGNORECASE
)
_SHOW_TABLES = re.compile(r"\s*SHOW\s+TABLES\s*;?\s*", re.IGNORECASE)


@dataclass(frozen=True)
class MetadataSelect:
    sql: str
    table: str | None  # the described table; None for SHOW TABLES


def metadata_select(sql: str) -> MetadataSelect | None:
    """The SELECT that `DESCRIBE t` or `SHOW TABLES` stands for, over this store's database; None for other text.
    Names are bare identifiers (`\\w+`), so they can be quoted as literals as they are."""
    if _SHOW_TABLES.fullmatch(sql):
        return MetadataSelect("SELECT name FROM system.tables WHERE database = currentDatabase() ORDER BY name", None)
    described = _DESCRIBE.fullmatch(sql)
    if described:
        database = f"'{described['database']}'" if described["database"] else "currentDatabase()"
        return MetadataSelect(
            "SELECT name, type FROM system.columns "
            f"WHERE database = {database} AND table = '{described['table']}' ORDER BY position",
            described["table"],
        )
    return None


def _nodes(ast_text: str) -> list[tuple[int, str]]:
    """(depth, node text) per line of EXPLAIN AST output (one space of indent per level)."""
    out = []
    for line in ast_text.splitlines():
        if line.strip():
            out.append((len(line) - len(line.lstrip(" ")), line.strip()))
    return out


def _function_name(node: str) -> str | None:
    if not node.startswith("Function "):
        return None
    return node.split(" ", 2)[1]


def check_ast(ast_text: str) -> None:
    """Raise QueryRejected unless the EXPLAIN AST text is a single plain SELECT within the rules above."""
    nodes = _nodes(ast_text)
    roots = [node for depth, node in nodes if depth == 0]
    if len(roots) != 1 or not roots[0].startswith("SelectWithUnionQuery"):
        raise QueryRejected("only a single SELECT (or WITH … SELECT) statement is allowed")
    if sum(1 for depth, _ in nodes if depth == 1) != 1:
        raise QueryRejected("FORMAT and INTO OUTFILE clauses are not allowed")
    parents: list[str] = []
    for depth, node in nodes:
        del parents[depth:]
        parent = parents[-1] if parents else ""
        if node == "Set" or node.startswith("Set "):
            raise QueryRejected("a SETTINGS clause is not allowed")
        name = _function_name(node)
        if name is not None:
            if parent.startswith("TableExpression") and name not in ALLOWED_TABLE_FUNCTIONS:
                raise QueryRejected(f"table function {name}() is not allowed")
            if name in FORBIDDEN_FUNCTIONS:
                raise QueryRejected(f"function {name}() is not allowed")
        parents.append(node)


def normalise_and_check(sql: str, run: Callable[[str, dict[str, str]], str], params: dict[str, object]) -> str:
    """The engine-normalised text of `sql`, after checking it; `run(sql, params)` returns a query's text output."""
    try:
        normalised = run("SELECT formatQuerySingleLine({q:String})", {"q": sql}).strip()
        check_ast(run("EXPLAIN AST " + normalised, dict(params)))  # type: ignore[arg-type]
    except StoreError as exc:
        if isinstance(exc, QueryRejected) or not exc.retryable:
            raise QueryRejected(f"rejected: {exc}") from exc
        raise
    return normalised
