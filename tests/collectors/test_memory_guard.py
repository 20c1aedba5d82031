"""The memory guard's decision, from injected resident-memory readings: refuse above the high-water mark, take
requests again below the low-water mark, or whenever nothing waits for the store; every refusal counted."""

from __future__ import annotations

from ragmon.collectors.memory_guard import MemoryGuard, read_rss_bytes

from tests.support import prometheus
from tests.support.prometheus import text_of

MB = 1_000_000


class Readings:
    def __init__(self, value: int) -> None:
        self.value = value

    def __call__(self) -> int:
        return self.value


def test_refuses_above_high_water_until_below_low_water() -> None:
    rss = Readings(500 * MB)
    busy = True
    guard = MemoryGuard(
        1000 * MB, high_water_bytes=900 * MB, low_water_bytes=800 * MB, read_rss=rss, idle=lambda: not busy
    )
    guard.sample()
    assert guard.admit("http") is None
    rss.value = 950 * MB
    guard.sample()
    assert guard.admit("http") == guard.retry_after_s and guard.admit("grpc") == guard.retry_after_s
    rss.value = 850 * MB  # between the marks: still refusing (no flapping at the mark)
    guard.sample()
    assert guard.admit("http") is not None
    rss.value = 799 * MB
    guard.sample()
    assert guard.admit("http") is None
    assert guard.pushed_back == {"http": 2, "grpc": 1}
    assert guard.peak_rss_bytes == 950 * MB


def test_takes_requests_when_nothing_waits_for_the_store_even_above_the_mark() -> None:
    # after a burst the allocators may keep freed pages: refusing with nothing queued would shut the door for good
    rss = Readings(950 * MB)
    queued = [0]
    guard = MemoryGuard(
        1000 * MB, high_water_bytes=900 * MB, low_water_bytes=800 * MB, read_rss=rss, idle=lambda: queued[0] == 0
    )
    guard.sample()
    assert guard.admit("http") is None
    queued[0] = 3  # requests wait for the store and memory is high: refuse until they are stored
    guard.sample()
    assert guard.admit("http") is not None
    queued[0] = 0
    guard.sample()
    assert guard.admit("http") is None


def test_without_a_limit_it_reports_memory_and_never_refuses() -> None:
    guard = MemoryGuard(None, read_rss=Readings(10**12))
    guard.sample()
    assert guard.admit("http") is None
    text = text_of(guard)
    assert prometheus.value(text, "ragmon_memory_rss_bytes") == 10**12
    assert prometheus.value(text, "ragmon_memory_limit_bytes") is None  # no sample: there is no limit
    assert prometheus.families(text)["ragmon_memory_limit_bytes"] == "gauge"  # but the family is declared


def test_reads_this_process_resident_memory() -> None:
    rss = read_rss_bytes()
    assert 10 * MB < rss < 100_000 * MB  # a Python process with pytest loaded: tens to hundreds of MB
    guard = MemoryGuard(1000 * MB, high_water_bytes=900 * MB, read_rss=Readings(950 * MB))
    guard.sample()
    guard.admit("grpc")
    samples = prometheus.parse(text_of(guard))
    assert samples == {
        ("ragmon_memory_rss_bytes", frozenset()): 950 * MB,
        ("ragmon_memory_peak_rss_bytes", frozenset()): 950 * MB,
        ("ragmon_memory_limit_bytes", frozenset()): 1000 * MB,
        ("ragmon_memory_high_water_bytes", frozenset()): 900 * MB,
        ("ragmon_memory_pushing_back", frozenset()): 1,
        ("ragmon_memory_pushback_total", frozenset({("transport", "grpc")})): 1,
    }
