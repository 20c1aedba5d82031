"""Body decoding limits, the counters' Prometheus text, API-key auth and the package's public surface."""

from __future__ import annotations

import gzip
import zlib

import pytest
import ragmon.collectors
from pydantic import SecretStr
from ragmon.collectors import ApiKeyAuth, CollectorCounters
from ragmon.collectors.decode import decompress, parse_json, parse_protobuf
from ragmon.collectors.errors import (
    CompressionError,
    DecodeError,
    JsonDecodeError,
    PayloadTooLargeError,
    ProtobufDecodeError,
)

from tests.support import prometheus
from tests.support.prometheus import text_of


def test_decompress_gzip_multi_member_deflate_and_caps() -> None:
    assert decompress(gzip.compress(b"ab") + gzip.compress(b"cd"), "gzip", 10) == b"abcd"
    assert decompress(zlib.compress(b"hello"), "deflate", 10) == b"hello"
    raw = zlib.compressobj(6, zlib.DEFLATED, -zlib.MAX_WBITS)
    assert decompress(raw.compress(b"raw") + raw.flush(), "deflate", 10) == b"raw"
    assert decompress(b"plain", "", 1) == b"plain"  # the compressed-size cap is the caller's check
    with pytest.raises(PayloadTooLargeError) as caught:
        decompress(gzip.compress(bytes(10_000)), "gzip", 9_999)
    assert caught.value.limit_bytes == 9_999
    assert decompress(gzip.compress(bytes(10_000)), "gzip", 10_000) == bytes(10_000)
    with pytest.raises(CompressionError, match="unsupported"):
        decompress(b"x", "zstd", 10)
    with pytest.raises(CompressionError):
        decompress(b"\x1f\x8b garbage", "gzip", 10)


def test_parse_errors_are_typed_decode_errors() -> None:
    with pytest.raises(ProtobufDecodeError):
        parse_protobuf(b"\x0a\xff\xff\xff\xff\x0f")
    with pytest.raises(JsonDecodeError, match="nested too deeply"):
        parse_json(b"[" * 100_000)
    with pytest.raises(JsonDecodeError):
        parse_json(b"\xff\xfe{")
    assert issubclass(CompressionError, DecodeError) and issubclass(JsonDecodeError, DecodeError)


def test_counters_exposition() -> None:
    counters = CollectorCounters()
    counters.add("ragmon_receiver_spans_rejected_total", 2, transport="http", reason='bad"id')
    counters.add_many("ragmon_receiver_spans_rejected_total", {"end_before_start": 1}, "reason", transport="grpc")
    counters.add("ragmon_receiver_bytes_total", 0, transport="http")  # zero adds nothing
    text = text_of(counters)
    assert 'ragmon_receiver_spans_rejected_total{reason="bad\\"id",transport="http"} 2.0' in text
    rejected = "ragmon_receiver_spans_rejected_total"
    assert prometheus.value(text, rejected, reason="end_before_start", transport="grpc") == 1
    assert "ragmon_receiver_bytes_total{" not in text
    assert "# TYPE ragmon_receiver_bytes_total counter" in text  # declared, no sample yet
    assert counters.total("ragmon_receiver_spans_rejected_total") == 3
    with pytest.raises(KeyError):
        counters.add("ragmon_typo_total")


def test_api_key_auth() -> None:
    auth = ApiKeyAuth({"acme": SecretStr("k1"), "globex": "k2"})
    assert auth.required
    assert auth.tenant_for("Bearer k1") == "acme" and auth.tenant_for("bearer  k2 ") == "globex"
    assert auth.tenant_for(None, "k2") == "globex"
    assert auth.tenant_for("Basic k1") is None and auth.tenant_for(None, None) is None
    assert auth.tenant_for("Bearer k1x") is None
    assert ApiKeyAuth(default_tenant="solo").tenant_for() == "solo"
    with pytest.raises(ValueError):
        ApiKeyAuth({"acme": ""})


def test_public_surface() -> None:
    assert sorted(ragmon.collectors.__all__) == sorted(set(ragmon.collectors.__all__))
    for name in ragmon.collectors.__all__:
        assert getattr(ragmon.collectors, name) is not None
