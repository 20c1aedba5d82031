"""Callers' reads under budgets the engine enforces, side by side on a read pool, cancellable, and a tenant's
reads kept to the store's own tables with errors that never show the tenant filter (issue 37, finding 2 and 6).

Every test that waits on another thread waits with a generous deadline and asserts that the thing happened,
never how fast: a loaded machine may be slow, not wrong.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from ragmon.sinks import QueryRejected, Store, open_store
from ragmon.sinks.dashboard_queries import DashboardQueries
from ragmon.sinks.errors import QueryBudgetExceeded, QueryCancelled, ReadersBusy, StoreError
from ragmon.sinks.read_budget import QueryBudgets

from ragmon.settings import QueryBudget, load_settings
from tests.support.chhttp import ClickHouseHttpServer
from tests.support.span_rows import insert_spans
from tests.support.synth import make_batch

DEADLINE_S = 20.0  # what "completes" means here: far above any run on an idle machine
# A read that runs until it is cancelled: ~1e15 rows at a few hundred million a second is days.
ENDLESS = "SELECT count() AS n FROM numbers(1000000000000000)"
LONG = QueryBudget(max_execution_time_s=600, max_rows_to_read=10**18, max_bytes_to_read=10**18)


class Background:
    """A call run on its own thread; `outcome()` is what it returned or raised."""

    def __init__(self, call: Callable[[], Any]) -> None:
        self._call = call
        self.result: Any = None
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            self.result = self._call()
        except BaseException as exc:
            self.error = exc

    def ended(self, timeout_s: float = DEADLINE_S) -> bool:
        self.thread.join(timeout_s)
        return not self.thread.is_alive()


def wait_until(condition: Callable[[], bool], timeout_s: float = DEADLINE_S) -> None:
    deadline_s = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline_s, "the condition never held"
        time.sleep(0.02)


def start_endless(store: Store, tag: str, tenant: str | None = "acme") -> Background:
    """`ENDLESS` for `tenant` under the LONG budget, in the read scope `tag`, once it is out in the engine."""
    before = store.running_reads()

    def run() -> Any:
        with store.reading(tag):
            return store.query(ENDLESS, tenant=tenant)

    background = Background(run)
    wait_until(lambda: store.running_reads() > before)
    time.sleep(0.3)  # into the engine: the kill below must find it running, not waiting
    return background


@pytest.fixture
def budgets(store: Store) -> Iterator[Callable[..., None]]:
    """Set the store's budgets: the default's fields, and `acme` with the LONG budget."""

    def set_budgets(**default: Any) -> None:
        store.query_budgets = QueryBudgets(QueryBudget(**default), {"acme": LONG})

    yield set_budgets


# --- budgets -------------------------------------------------------------------------------------------------


def test_a_runaway_count_stops_at_the_rows_it_would_read(store: Store) -> None:
    with pytest.raises(QueryBudgetExceeded) as info:
        store.query("SELECT count() FROM numbers(1e12)")  # the default budget: 1e9 rows
    assert info.value.limit == "max_rows_to_read"
    assert "agent.query_budget.max_rows_to_read" in str(info.value)
    assert not info.value.retryable


@pytest.mark.parametrize("sql", ["SELECT count() FROM numbers(1e12)", "SELECT count() FROM system.numbers"])
def test_a_runaway_read_stops_at_the_execution_time_limit(store: Store, budgets: Any, sql: str) -> None:
    budgets(max_execution_time_s=1, max_rows_to_read=10**18, max_bytes_to_read=10**18)
    with pytest.raises(QueryBudgetExceeded) as info:
        store.query(sql)
    assert info.value.limit == "max_execution_time_s"
    assert str(info.value) == (
        "query stopped: it ran past the 1 s execution-time limit (agent.query_budget.max_execution_time_s)"
    )


def test_endless_system_numbers_stops_at_rows_read(store: Store) -> None:
    with pytest.raises(QueryBudgetExceeded, match="max_rows_to_read"):
        store.query("SELECT count() FROM system.numbers")


def test_a_tenants_own_budget_is_named(store: Store) -> None:
    store.query_budgets = QueryBudgets(QueryBudget(), {"acme": QueryBudget(max_rows_to_read=1000)})
    with pytest.raises(QueryBudgetExceeded) as info:
        store.query("SELECT count() FROM numbers(1e6)", tenant="acme")
    assert info.value.setting == "agent.query_budgets['acme'].max_rows_to_read"
    assert store.query("SELECT count() AS n FROM numbers(1e6)", tenant="globex") == [{"n": 1_000_000}]


def test_memory_bytes_to_read_and_result_limits(store: Store, budgets: Any) -> None:
    budgets(max_memory_bytes=16 * 1024**2, max_bytes_to_read=64 * 1024**2, max_result_rows=100, max_result_bytes=4096)
    cases = {
        "SELECT length(groupArray(number)) FROM numbers(1e7)": "max_memory_bytes",
        "SELECT sum(number) FROM numbers(1e8)": "max_bytes_to_read",
        "SELECT number FROM numbers(1000)": "max_result_rows",
        "SELECT materialize(repeat('x', 100)) AS s FROM numbers(90)": "max_result_bytes",
    }
    for sql, limit in cases.items():
        with pytest.raises(QueryBudgetExceeded) as info:
            store.query(sql)
        assert info.value.limit == limit, sql
        assert f"agent.query_budget.{limit}" in str(info.value)


def test_a_cut_at_the_budgets_rows_is_no_silent_cut(store: Store, budgets: Any) -> None:
    budgets(max_result_rows=50)
    assert len(store.query("SELECT number FROM numbers(1000)", max_rows=10, cut_at_max_rows=True)) == 11
    with pytest.raises(QueryBudgetExceeded, match="max_result_rows"):
        store.query("SELECT number FROM numbers(1000)", max_rows=100, cut_at_max_rows=True)
    with pytest.raises(QueryBudgetExceeded, match="max_rows"):
        store.query("SELECT number FROM numbers(1000)", max_rows=10)


def test_every_read_for_a_caller_runs_under_the_budget(store: Store, budgets: Any) -> None:
    now_ns = int((time.time() - 600) * 1e9)
    insert_spans(store, make_batch(20, seed=41, start_ns=now_ns))
    store.roll_up(0, 2**63)
    traces = [str(i) for i in range(3)]
    store.insert_payloads([{"tenant": "globex", "trace_id": t, "start_time": now_ns} for t in traces])
    scored = {"metric": "faithfulness", "value": 1.0, "status": "ok", "scored_at": now_ns}
    store.insert_scores([{"tenant": "globex", "trace_id": t, **scored} for t in traces])
    store.insert_labels([{"tenant": "globex", "trace_id": t, "metric": "faithfulness", "label": True} for t in traces])
    budgets(max_rows_to_read=1)
    dashboard = DashboardQueries(store)
    reads: dict[str, Callable[[], Any]] = {
        "report": lambda: store.report(3600),
        "quality": lambda: store.quality(86400, tenant="globex"),
        "labelled_scores": lambda: store.labelled_scores(86400),
        "dashboard overview": lambda: dashboard.overview(3600, None),
        "dashboard traces": lambda: dashboard.traces(3600, None),
    }
    for name, read in reads.items():
        with pytest.raises(QueryBudgetExceeded):
            read()
            pytest.fail(f"{name} read past the budget")


def test_the_stores_own_reads_carry_no_caller_budget(store: Store, budgets: Any) -> None:
    budgets(max_rows_to_read=1, max_execution_time_s=0.001)
    batch = make_batch(5, seed=42)
    insert_spans(store, batch)
    assert len(store.trace_fragments(0, 2**63)) == 5
    store.roll_up(0, 2**63)
    assert store.recent_p95(10**9) is not None


def test_a_budget_cannot_be_lifted_from_the_query(store: Store) -> None:
    for sql in (
        "SELECT count() FROM numbers(1e12) SETTINGS max_rows_to_read = 0",
        "SELECT * FROM (SELECT count() FROM numbers(1e12) SETTINGS max_rows_to_read = 0)",
        "SET max_rows_to_read = 0",
        "SELECT getSetting('max_rows_to_read')",
    ):
        with pytest.raises(QueryRejected):
            store.query(sql)


# --- side by side, and cancelled ----------------------------------------------------------------------------


def test_another_tenants_reads_complete_while_one_runs_long(store: Store, budgets: Any) -> None:
    insert_spans(store, make_batch(5, seed=43))
    budgets()
    long_read = start_endless(store, "tenant-a-long")
    try:
        other = Background(lambda: store.query("SELECT 1 AS x", tenant="globex"))
        report = Background(lambda: store.report(3600, tenant="globex"))
        dashboard = Background(lambda: DashboardQueries(store).overview(3600, None))
        for read in (other, report, dashboard):
            assert read.ended(), "a read waited behind another tenant's"
            assert read.error is None, read.error
        assert other.result == [{"x": 1}]
        assert long_read.thread.is_alive()  # they ran beside it, not after it
    finally:
        assert store.cancel("tenant-a-long", timeout_s=DEADLINE_S)
    assert long_read.ended()
    assert isinstance(long_read.error, QueryCancelled) and not long_read.error.retryable


def test_cancel_stops_a_running_read_and_the_reads_after_it(store: Store, budgets: Any) -> None:
    budgets()
    finished = threading.Event()

    def two_reads() -> Any:
        with store.reading("two-reads"):
            try:
                return store.query(ENDLESS, tenant="acme")
            except QueryCancelled:
                pass
            try:
                return store.query("SELECT 1")  # after a cancel, the scope's next read does not start
            finally:
                finished.set()

    background = Background(two_reads)
    wait_until(lambda: store.running_reads() == 1)
    time.sleep(0.3)
    assert store.cancel("two-reads", timeout_s=DEADLINE_S)
    assert background.ended() and finished.is_set()
    assert isinstance(background.error, QueryCancelled)
    assert store.cancel("no-such-read")  # nothing to do


def test_a_query_tag_alone_makes_the_read_cancellable(store: Store, budgets: Any) -> None:
    budgets()
    background = Background(lambda: store.query(ENDLESS, tenant="acme", query_tag="req-7"))
    wait_until(lambda: store.running_reads() == 1)
    time.sleep(0.3)
    assert store.cancel("req-7", timeout_s=DEADLINE_S)
    assert background.ended() and isinstance(background.error, QueryCancelled)


def test_cancel_reads_stops_everything_running(store: Store, budgets: Any) -> None:
    budgets()
    reads = [start_endless(store, f"all-{i}") for i in range(2)]
    assert store.cancel_reads(timeout_s=DEADLINE_S)
    for read in reads:
        assert read.ended() and isinstance(read.error, QueryCancelled)
    assert store.query("SELECT 2 AS x") == [{"x": 2}]  # the store reads on


def test_close_does_not_wait_behind_a_running_read(
    engine_dir: Path, http_server: ClickHouseHttpServer, database: str
) -> None:
    for target in (str(engine_dir), http_server.url):
        store = open_store(target, database=database)
        store.query_budgets = QueryBudgets(LONG)
        read = start_endless(store, "at-shutdown", tenant=None)
        closing = Background(store.close)
        assert closing.ended() and closing.error is None
        assert read.ended() and isinstance(read.error, QueryCancelled) and read.error.retryable
        with pytest.raises(StoreError):
            store.query("SELECT 1")


def test_reads_wait_a_bounded_time_for_a_busy_pool(engine_dir: Path, database: str) -> None:
    store = open_store(str(engine_dir), database=database, read_connections=1, read_wait_s=0.5)
    try:
        store.query_budgets = QueryBudgets(LONG)
        long_read = start_endless(store, "holds-the-only-connection", tenant=None)
        with pytest.raises(ReadersBusy) as info:
            store.query("SELECT 1")
        assert info.value.retryable
        assert store.cancel("holds-the-only-connection", timeout_s=DEADLINE_S)
        assert long_read.ended()
        assert store.query("SELECT 1 AS x") == [{"x": 1}]
    finally:
        store.close()


# --- a tenant reads only ragmon's tables ---------------------------------------------------------------------

TENANT_REFUSED = [
    "SELECT name, total_rows FROM system.tables",
    "SELECT query FROM system.processes",
    "SELECT path FROM system.disks",
    "SELECT count() FROM `system`.`numbers`",
    "SELECT * FROM INFORMATION_SCHEMA.tables",
    "SELECT * FROM information_schema.columns",
    "SELECT 1 FROM spans AS s JOIN system.one AS o ON 1",
    "SELECT count() FROM spans WHERE tenant IN (SELECT name FROM system.users)",
    "SELECT count() FROM spans WHERE trace_id IN system.one",
    "WITH t AS (SELECT * FROM system.tables) SELECT count() FROM t",
    "SELECT count() FROM other_db.spans",
    "SELECT hasColumnInTable('system', 'tables', 'name')",
    "SELECT dictGet('system.d', 'a', 1)",
    "SELECT joinGet('system.j', 'a', 1)",
    "DESCRIBE system.tables",
]


@pytest.mark.parametrize("sql", TENANT_REFUSED)
def test_a_tenant_reads_only_the_stores_tables(store: Store, sql: str) -> None:
    with pytest.raises(QueryRejected) as info:
        store.query(sql, tenant="acme")
    assert not isinstance(info.value, QueryBudgetExceeded)


def test_what_a_tenant_may_read(store: Store) -> None:
    db = store.topology.database
    insert_spans(store, make_batch(2, seed=44))
    assert store.query(f"SELECT count() AS n FROM {db}.spans AS s", tenant="acme") == [{"n": 10}]
    within = "SELECT count() AS n FROM spans AS s WHERE s.trace_id IN (SELECT trace_id FROM spans)"
    assert store.query(within, tenant="acme") == [{"n": 10}]
    assert {"spans", "scores"} <= {row["name"] for row in store.query("SHOW TABLES", tenant="acme")}
    assert "trace_id" in {row["name"] for row in store.query(f"DESCRIBE {db}.spans", tenant="acme")}
    assert store.query("SELECT count() AS n FROM numbers(10)", tenant="acme") == [{"n": 10}]


def test_the_local_operator_may_read_system_tables(store: Store) -> None:
    # No tenant: the agent runs without API keys, for whoever has its port on their own machine (or the CLI
    # with the data directory): the same person could open the engine's files. system.* is how they diagnose it.
    assert store.query("SELECT count() > 0 AS some FROM system.tables") == [{"some": 1}]


# --- no error shows the tenant filter ------------------------------------------------------------------------

ENGINE_ERRORS = [
    "SELECT no_such_column FROM spans",
    "SELECT toUInt8(tenant) FROM spans",
    "SELECT count() FROM spans WHERE tenant = 1",
    "SELECT throwIf(count() >= 0, 'boom') FROM spans",
]


@pytest.mark.parametrize("sql", ENGINE_ERRORS)
def test_errors_do_not_echo_the_tenant_filter(store: Store, sql: str) -> None:
    insert_spans(store, make_batch(2, seed=45))
    with pytest.raises(StoreError) as info:
        store.query(sql, tenant="acme")
    message = str(info.value)
    assert "additional_table_filters" not in message
    assert "tenant = \\'acme" not in message and "tenant = 'acme'" not in message
    assert "max_memory_usage" not in message  # nor the budget's settings


def test_budgets_from_settings() -> None:
    env = {
        "RAGMON_AGENT__QUERY_BUDGET__MAX_EXECUTION_TIME_S": "12",
        "RAGMON_AGENT__QUERY_BUDGET__MAX_MEMORY_BYTES": "256MiB",
        "RAGMON_AGENT__QUERY_BUDGETS": '{"acme": {"max_rows_to_read": 5000}}',
    }
    agent = load_settings(env=env).agent
    budgets = QueryBudgets(agent.query_budget, agent.query_budgets)
    assert budgets.for_tenant(None).max_execution_time_s == 12
    acme = budgets.for_tenant("acme")
    assert (acme.max_rows_to_read, acme.max_execution_time_s, acme.max_memory_bytes) == (5000, 12, 256 * 1024**2)
    assert budgets.for_tenant("globex") == budgets.for_tenant(None)
