"""The receivers' memory backstop: resident memory sampled in a thread; above a high-water mark, new export requests
are refused with a retryable answer (OTLP/HTTP 429 + Retry-After, gRPC RESOURCE_EXHAUSTED + RetryInfo) until it
falls below a low-water mark.

Why resident memory and not a sum of our own buffers: the embedded engine, Python's allocator and grpcio hold memory
no buffer count sees, and the kernel kills on the process's total. Why refuse rather than spill: what is refused is
only what was never acknowledged — an OTLP exporter retries it later — while everything already acknowledged is in
the write-ahead log and gets stored whatever the memory does. Reading `/proc/self/statm` costs a few microseconds,
so sampling every 100 ms is free, and a request's check is one attribute read.

The agent sizes its buffers from the same limit (ragmon/agent/memory_budget.py) so that this rarely fires.

Refusing helps only while there is accepted work whose memory the agent will give back once it is stored. After a
burst the allocators (Python's, the engine's) may keep freed pages for a while, and resident memory can stay above
the low-water mark with nothing left to store: refusing then would shut the door for nothing, so the guard lets
requests in whenever `idle()` says nothing waits for the store (it closes again as soon as new requests queue up
while memory is still high: the agent then takes requests at the pace it stores them).
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import os
import threading
import time
from collections.abc import Callable, Iterator
from typing import Final

from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric

__all__ = ["MemoryGuard", "read_rss_bytes"]

_PAGE_BYTES: Final = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
_TRIM_EVERY_S: Final = 1.0


def read_rss_bytes() -> int:
    """This process's resident memory (anonymous and file-backed), from /proc/self/statm; 0 where there is none."""
    try:
        with open("/proc/self/statm", "rb") as statm:
            return int(statm.read().split()[1]) * _PAGE_BYTES
    except (OSError, ValueError, IndexError):
        return 0


def _malloc_trim() -> Callable[[], object] | None:
    """glibc's malloc_trim(0), which hands freed heap pages back to the system (Python's large bodies live there);
    None elsewhere (musl, macOS)."""
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        trim = ctypes.CDLL(name).malloc_trim
    except (OSError, AttributeError):
        return None
    trim.argtypes = [ctypes.c_size_t]
    return lambda: trim(0)


class MemoryGuard:
    """Decides whether receivers take new requests, from sampled resident memory; counts what it refused.

    `read_rss` is injectable (tests give it a reading instead of exhausting memory). With `limit_bytes` None it only
    reports memory and never refuses."""

    def __init__(
        self,
        limit_bytes: int | None,
        *,
        high_water_bytes: int | None = None,
        low_water_bytes: int | None = None,
        interval_s: float = 0.1,
        retry_after_s: float = 1.0,
        read_rss: Callable[[], int] = read_rss_bytes,
        idle: Callable[[], bool] = lambda: False,
    ) -> None:
        self.limit_bytes = limit_bytes
        self.high_water_bytes = high_water_bytes if high_water_bytes is not None else limit_bytes
        self.low_water_bytes = low_water_bytes if low_water_bytes is not None else self.high_water_bytes
        self.interval_s = interval_s
        self.retry_after_s = retry_after_s
        self.read_rss = read_rss
        self.idle = idle
        self.rss_bytes = 0
        self.peak_rss_bytes = 0
        self.pressing = False  # refusing new requests
        self.pushed_back: dict[str, int] = {}  # by transport
        self._lock = threading.Lock()
        self._trim = _malloc_trim()
        self._trimmed_at_s = float("-inf")
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> MemoryGuard:
        self.sample()
        if self.limit_bytes is not None and self._thread is None:
            self._thread = threading.Thread(target=self._run, name="ragmon-memory-guard", daemon=True)
            self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(2.0)
            self._thread = None

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.sample()

    def sample(self) -> int:
        """Read resident memory now and update the decision (the thread calls this every `interval_s`)."""
        rss = self.read_rss()
        self.rss_bytes = rss
        self.peak_rss_bytes = max(self.peak_rss_bytes, rss)
        if self.high_water_bytes is None or self.low_water_bytes is None:
            return rss
        if rss < self.low_water_bytes:
            self.pressing = False
        elif rss >= self.high_water_bytes or self.pressing:
            self.pressing = not self.idle()
        if self.pressing and self._trim is not None:
            now = time.monotonic()
            if now - self._trimmed_at_s >= _TRIM_EVERY_S:  # freed request bodies back to the system, at most 1/s
                self._trimmed_at_s = now
                with contextlib.suppress(OSError):
                    self._trim()
        return rss

    def admit(self, transport: str) -> float | None:
        """None to take the request; else the seconds the client should wait (the refusal is counted)."""
        if not self.pressing:
            return None
        with self._lock:
            self.pushed_back[transport] = self.pushed_back.get(transport, 0) + 1
        return self.retry_after_s

    @property
    def reason(self) -> str:
        high = self.high_water_bytes or 0
        return f"agent memory {self.rss_bytes / 1e6:.0f} MB is over its high-water mark of {high / 1e6:.0f} MB"

    def collect(self) -> Iterator[Metric]:
        """The guard's gauges and its pushback counter, for the agent's registry (`collectors/exposition.py`)."""
        rss = self.read_rss() if self._thread is None else self.rss_bytes
        with self._lock:
            pushed = sorted(self.pushed_back.items())
        yield GaugeMetricFamily(
            "ragmon_memory_rss_bytes", "Resident memory of the agent process (its embedded engine included).", rss
        )
        yield GaugeMetricFamily(
            "ragmon_memory_peak_rss_bytes",
            "Highest resident memory the guard has sampled since start.",
            max(self.peak_rss_bytes, rss),
        )
        # Without a limit (or a mark) the family is there with no sample: a series that could only ever read 0 would
        # look like a limit of 0.
        yield GaugeMetricFamily("ragmon_memory_limit_bytes", "agent.memory_limit (absent: no limit).", self.limit_bytes)
        yield GaugeMetricFamily(
            "ragmon_memory_high_water_bytes",
            "Resident memory above which receivers refuse new requests.",
            self.high_water_bytes,
        )
        yield GaugeMetricFamily(
            "ragmon_memory_pushing_back",
            "1 while receivers refuse new requests for memory, else 0.",
            int(self.pressing),
        )
        pushback = CounterMetricFamily(
            "ragmon_memory_pushback",  # exposed as ragmon_memory_pushback_total
            "Export requests refused (429 / RESOURCE_EXHAUSTED) for memory, by transport.",
            labels=["transport"],
        )
        for transport, n in pushed:
            pushback.add_metric([transport], n)
        yield pushback
