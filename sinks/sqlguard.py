"""The parse-level guard for `ragmon query "SELECT …"`: one SELECT (or WITH … SELECT), nothing that escapes.

The engine does the parsing, not a regex: the text is first normalised by `formatQuerySingleLine` (passed as a
parameter, so it cannot inject; it refuses multi-statements, which chDB would otherwise run one after another),
then `EXPLAIN AST` of the normalised text is checked:

- the root is a `SelectWithUnionQuery` with a single child — a `FORMAT` or `INTO OUTFILE` clause adds a child
  (measured: `INTO OUTFILE` writes a file even on a `readonly=2` chDB connection);
- no `SETTINGS` clause (it could switch off the tenant filter, `additional_table_filters`);
- table functions only from a small allowlist (no `file()`, `url()`, `s3()`, `remote()`, `mysql()` …);
- no scalar function that reads outside the database (`file('…')` reads a file in chDB);
- for a tenant (`allowed_database` set): tables only of the store's own database — `system.*` (other tenants' row
  counts in `system.tables`, their queries in `system.processes`, the data path in `system.disks`),
  `INFORMATION_SCHEMA` and any other database are refused, as tables, as `IN db.t` and through the functions that
  name a table or dictionary in a string (`dictGet('system.…')`, `joinGet`, `hasColumnInTable`).

What runs is the normalised text that was checked. The backend then executes it on a read-only connection.

`DESCRIBE [TABLE] t` and `SHOW TABLES`, the first things a newcomer types, are read as the SELECTs over `system`
they mean (`metadata_select`); those SELECTs — ragmon's text over `system.columns`/`system.tables`, restricted to
one database — are the only reads of `system` a tenant's request may make, and only of the store's own database.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from ragmon.sinks.errors import QueryCancelled, QueryRejected, StoreError

ALLOWED_TABLE_FUNCTIONS = frozenset({"numbers", "numbers_mt", "zeros", "zeros_mt", "generateSeries", "values", "null"})
FORBIDDEN_FUNCTIONS = frozenset({"file", "url", "s3", "remote", "remoteSecure", "executable", "input", "getSetting"})
# Functions that read a table, dictionary or server fact named in a string: refused for tenants.
TENANT_FORBIDDEN_FUNCTIONS = frozenset(
    {
        "joinGet",
        "joinGetOrNull",
        "hasColumnInTable",
        "getServerSetting",
        "getMergeTreeSetting",
        "filesystemAvailable",
        "filesystemCapacity",
        "filesystemUnreserved",
    }
)
_IN_FUNCTIONS = frozenset(
    {"in", "notIn", "globalIn", "globalNotIn", "nullIn", "notNullIn", "globalNullIn", "globalNotNullIn"}
)


_DESCRIBE = re.compile(
    r"\s*(?:DESCRIBE|DESC)\s+(?:TABLE\s+)?(?:`?(?P<database>\w+)`?\.)?`?(?P<table>\w+)`?\s*;?\s*", re.IGNORECASE
)
_SHOW_TABLES = re.compile(r"\s*SHOW\s+TABLES\s*;?\s*", re.IGNORECASE)


@dataclass(frozen=True)
class MetadataSelect:
    sql: str
    table: str | None  # the described table; None for SHOW TABLES
    database: str | None = None  # the database named in `DESCRIBE db.t`; None: the current one


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
            described["database"],
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


def _table_name(node: str) -> str:
    """`db.t` of a `TableIdentifier db.t (alias a)` or `Identifier db.t` node."""
    return node.split(" ", 1)[1].split(" (alias ", 1)[0].strip()


def _outside(name: str, database: str) -> bool:
    """Whether table name `name` (as EXPLAIN AST prints it: `t` or `db.t`) may lie outside `database`. A name
    with more than one dot is read as outside: a quoted name holding a dot cannot then pass for the database."""
    parts = name.split(".")
    return len(parts) > 2 or (len(parts) == 2 and parts[0] != database)


def check_ast(ast_text: str, *, allowed_database: str | None = None) -> None:
    """Raise QueryRejected unless the EXPLAIN AST text is a single plain SELECT within the rules above;
    with `allowed_database`, naming only tables of that database (unqualified names resolve there)."""
    nodes = _nodes(ast_text)
    roots = [node for depth, node in nodes if depth == 0]
    if len(roots) != 1 or not roots[0].startswith("SelectWithUnionQuery"):
        raise QueryRejected("only a single SELECT (or WITH … SELECT) statement is allowed")
    if sum(1 for depth, _ in nodes if depth == 1) != 1:
        raise QueryRejected("FORMAT and INTO OUTFILE clauses are not allowed")
    parents: list[str] = []
    for index, (depth, node) in enumerate(nodes):
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
            if allowed_database is not None and (name in TENANT_FORBIDDEN_FUNCTIONS or name.startswith("dict")):
                raise QueryRejected(f"function {name}() is not allowed")
        if allowed_database is not None:
            table = _table_read(nodes, index, parents)
            if table is not None and _outside(table, allowed_database):
                raise QueryRejected(
                    f"table {table} is not allowed: a query reads only this store's tables ({allowed_database}.*)"
                )
        parents.append(node)


def _table_read(nodes: list[tuple[int, str]], index: int, parents: list[str]) -> str | None:
    """The table node `index` names, if it names one: a `TableIdentifier`, or the `Identifier` right of an IN
    (`x IN db.t` reads table db.t)."""
    depth, node = nodes[index]
    if node.startswith("TableIdentifier "):
        return _table_name(node)
    if not node.startswith("Identifier ") or len(parents) < 2 or parents[-1] != "ExpressionList (children 2)":
        return None
    if _function_name(parents[-2]) not in _IN_FUNCTIONS:
        return None
    first_sibling = next(i for i in range(index - 1, -1, -1) if nodes[i][0] == depth - 1) + 1
    return _table_name(node) if index != first_sibling else None


def normalise_and_check(
    sql: str,
    run: Callable[[str, dict[str, str]], str],
    params: dict[str, object],
    *,
    allowed_database: str | None = None,
) -> str:
    """The engine-normalised text of `sql`, after checking it (`check_ast`); `run(sql, params)` returns a query's
    text output."""
    try:
        normalised = run("SELECT formatQuerySingleLine({q:String})", {"q": sql}).strip()
        check_ast(run("EXPLAIN AST " + normalised, dict(params)), allowed_database=allowed_database)  # type: ignore[arg-type]
    except StoreError as exc:
        if isinstance(exc, QueryCancelled):
            raise  # not the query's fault: its caller went away, or the store is closing
        if isinstance(exc, QueryRejected) or not exc.retryable:
            raise QueryRejected(f"rejected: {exc}") from exc
        raise
    return normalised
