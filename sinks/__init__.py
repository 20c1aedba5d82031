"""ragmon's store: ClickHouse schema, backends (embedded chDB or a server), inserts and report queries.

store = open_store("/var/lib/ragmon/chdb")          # or "http://host:8123", or ragmon Settings
store.insert_otlp(envelopes, dedup_token="wal:7")   # normalised in the engine, deduplicated by the token
store.report(since_s=3600, feature="support")       # from the per-minute rollup
store.query("SELECT count() FROM ragmon.spans", tenant="acme")   # read-only helper
"""

from ragmon.sinks.errors import QueryRejected, StoreError
from ragmon.sinks.schema import Retention, Topology
from ragmon.sinks.store import Store, open_store

__all__ = ["QueryRejected", "Retention", "Store", "StoreError", "Topology", "open_store"]
