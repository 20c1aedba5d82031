"""The store as the write path sees it: OTLP envelopes in through the normalising views (installed at start-up),
and payload rows as tools and tests write them (the agent's payloads are copied in the engine: `for_sampler.py`).
How every insert is sent: `inserts.py`."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Protocol

from ragmon.sinks import otlp_views
from ragmon.sinks.backend import Settings
from ragmon.sinks.envelope import frame
from ragmon.sinks.errors import PartlyStored, StoreError
from ragmon.sinks.inserts import INSERT_SETTINGS, split_envelopes
from ragmon.sinks.schema import PAYLOAD_COLUMNS
from ragmon.sinks.store_base import StoreBase


class WriterStore(Protocol):
    """What the pipeline's store writer (`ragmon.pipeline.writer`) depends on."""

    def insert_otlp(self, envelopes: Sequence[bytes], dedup_token: str) -> None: ...


class WriterMethods(StoreBase):
    """The write path's methods of `Store`."""

    @property
    def otlp_input_table(self) -> str:
        """The qualified `otlp_in` table the normalising SELECTs read from."""
        return self._ddl.table(otlp_views.INPUT_TABLE)

    def install_otlp_views(
        self,
        proto_schema: str,
        message: str,
        input_columns: Sequence[tuple[str, str]],
        normalise_select: otlp_views.SelectSql,
        spans_select: otlp_views.SelectSql,
        content_select: otlp_views.SelectSql,
    ) -> None:
        """Create (or replace, when the SQL changed) `otlp_in`, the view that normalises it into `otlp_norm`, and
        the views from there into `spans` and `span_content`.

        The SELECTs may be text or functions of the table they read (`otlp_input_table` for `normalise_select`,
        the normalised table for the others). Idempotent; run it at start-up before receivers accept traffic.
        See `otlp_views.py` for where the Protobuf schema lives.
        """
        pipeline = otlp_views.build_pipeline(
            self._ddl, proto_schema, message, input_columns, normalise_select, spans_select, content_select
        )
        rows = self._select(
            "SELECT name, comment FROM system.tables WHERE database = {db:String}", {"db": self.topology.database}
        )
        if not otlp_views.is_installed(otlp_views.installed_digests(rows), pipeline):
            for statement in otlp_views.install_statements(self._ddl, pipeline):
                self.backend.execute(statement)
        self._otlp_settings = self._schema_settings(pipeline)

    def _schema_settings(self, pipeline: otlp_views.OtlpPipeline) -> dict[str, str]:
        path = getattr(self.backend, "path", None)
        if self.backend.kind == "chdb" and path is not None:
            written = otlp_views.write_schema_file(Path(path) / "format_schemas", pipeline)
            return otlp_views.file_schema_settings(str(written), pipeline.message)
        inline = self._select("SELECT count() AS n FROM system.settings WHERE name = 'format_schema_source'")
        if inline and inline[0]["n"]:
            return otlp_views.inline_schema_settings(pipeline)
        # An older server: the file must already be in its format_schema_path (see otlp_views.py).
        return otlp_views.file_schema_settings(otlp_views.schema_file_name(pipeline), pipeline.message)

    def insert_otlp(self, envelopes: Sequence[bytes], dedup_token: str) -> None:
        """Store many envelopes through the views; a re-sent `dedup_token` (with the same envelopes) is invisible in
        `spans`, `span_content` and the rollups.

        One INSERT parses and normalises on one core, so a large batch goes as `insert_streams` INSERTs at once,
        each with its own token derived from `dedup_token` (the split depends only on the envelopes, so a re-send
        splits the same way). Each part pays the views' planning (~0.15 s), hence the minimum part size."""
        if self._otlp_settings is None:
            raise StoreError("insert_otlp before install_otlp_views", retryable=False)
        if not envelopes:
            return
        parts = split_envelopes(envelopes, self.insert_streams, self.min_insert_part_bytes)
        if len(parts) == 1:
            self._insert_envelopes(envelopes, dedup_token)
            return
        if self._insert_pool is None:
            self._insert_pool = ThreadPoolExecutor(self.insert_streams - 1, thread_name_prefix="ragmon-insert")
        others = [
            self._insert_pool.submit(self._insert_envelopes, part, f"{dedup_token}/{i}")
            for i, part in enumerate(parts[1:], start=2)
        ]
        errors: list[BaseException | None] = []
        try:
            self._insert_envelopes(parts[0], f"{dedup_token}/1")
            errors.append(None)
        except BaseException as exc:
            errors.append(exc)
        errors.extend(other.exception() for other in others)  # every part has finished before this returns
        failed = [i for i, error in enumerate(errors) if error is not None]
        if not failed:
            return
        first = errors[failed[0]]
        assert first is not None
        if len(failed) == len(parts) or not isinstance(first, StoreError):
            raise first
        starts = [sum(len(p) for p in parts[:i]) for i in range(len(parts))]
        raise PartlyStored(first, [(starts[i], starts[i] + len(parts[i])) for i in failed]) from first

    def _insert_envelopes(self, envelopes: Sequence[bytes], dedup_token: str) -> None:
        assert self._otlp_settings is not None
        settings: Settings = {**INSERT_SETTINGS, "insert_deduplication_token": dedup_token, **self._otlp_settings}
        self.backend.insert_raw(self.otlp_input_table, "Protobuf", frame(envelopes), settings)

    def insert_payloads(self, rows: Iterable[Mapping[str, Any]], dedup_token: str | None = None) -> str:
        """Kept traces' text, one dict per trace with keys from `schema.PAYLOAD_COLUMNS`."""
        return self._insert_rows("payloads", PAYLOAD_COLUMNS, rows, dedup_token)
