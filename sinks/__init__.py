"""ragmon's store: ClickHouse schema, backends (embedded chDB or a server), inserts and report queries.

store = open_store("/var/lib/ragmon/chdb")          # or "http://host:8123", or ragmon Settings
store.insert_spans(batch)                            # deduplicated by a batch token
store.report(since_s=3600, feature="support")       # from the per-minute rollup
store.query("SELECT count() FROM ragmon.spans", tenant="acme")   # read-only helper
"""

from ragmon.sinks.errors import QueryRejected, StoreError
from ragmon.sinks.schema import Retention, Topology
from ragmon.sinks.store import Store, batch_token, open_store

__all__ = ["QueryRejected", "Retention", "Store", "StoreError", "Topology", "batch_token", "open_store"]
