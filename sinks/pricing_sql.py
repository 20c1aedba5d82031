"""A price table → one SQL expression for a span's cost in USD, with the table's prices written into it.

Mirrors `ragmon.pricing.PriceTable.cost_usd`: the model is looked up as given, then without a provider prefix
(``openai/gpt-4o``), then without a date suffix (``-2024-08-06``, ``-20250514``, ``-latest``, ``-preview``);
cached input tokens are billed at the cached rate (the input rate when the table has none); a rerank is billed
per search unit. NULL — never 0 — for an unknown model or a used quantity without a price.
"""

from __future__ import annotations

from typing import Final

from ragmon.sinks.backend import quote_string as quote

from ragmon.pricing import ModelPrice, PriceTable

__all__ = ["cost_expression", "price_rates"]

# Same rule as ragmon.pricing._DATE_SUFFIX, in RE2 syntax (ClickHouse's regex engine).
_DATE_SUFFIX: Final = "-([0-9]{4}-[0-9]{2}-[0-9]{2}|[0-9]{8}|latest|preview)$"


_RATES_TYPE: Final = "Tuple(UInt8, Nullable(Float64), Nullable(Float64), Nullable(Float64), Nullable(Float64))"


def _models(prices: PriceTable) -> list[tuple[str, ModelPrice]]:
    # PriceTable exposes lookups, not iteration; its mapping is read once here, when the SQL is generated.
    return sorted(prices._prices.items())


def _rate(value: float | None) -> str:
    return "NULL" if value is None else repr(float(value))


def price_rates(prices: PriceTable, model: str) -> str:
    """The model's prices as one tuple: (known UInt8, input per 1M, output per 1M, cached input per 1M, per
    search unit), the rates Nullable(Float64); ``(0, NULL, NULL, NULL, NULL)`` for an unknown model or ''.

    Reads `model` three times: pass a column (computed in an earlier layer), not a big expression. The cached
    rate is the input rate when the table has none.
    """
    models = _models(prices)
    if not models:
        return f"CAST((0, NULL, NULL, NULL, NULL), '{_RATES_TYPE}')"
    names = "[" + ", ".join(quote(name) for name, _ in models) + "]"
    positions = "[" + ", ".join(str(i) for i in range(1, len(models) + 1)) + "]"
    rows = ", ".join(
        f"(1, {_rate(p.input_per_1m)}, {_rate(p.output_per_1m)}, "
        f"{_rate(p.input_per_1m if p.cached_input_per_1m is None else p.cached_input_per_1m)}, "
        f"{_rate(p.per_search_unit)})"
        for _, p in models
    )
    tail = f"arrayElement(splitByChar('/', {model}), -1)"
    # transform() is one hash lookup per span; an unknown name maps to 0, so the first known candidate wins.
    index = (
        f"if({model} = '', 0, coalesce(nullIf(transform({model}, {names}, {positions}, 0), 0), "
        f"nullIf(transform({tail}, {names}, {positions}, 0), 0), "
        f"transform(replaceRegexpOne({tail}, {quote(_DATE_SUFFIX)}, ''), {names}, {positions}, 0)))"
    )
    # slot 1 is the unknown model
    return f"arrayElement(CAST([(0, NULL, NULL, NULL, NULL), {rows}], 'Array({_RATES_TYPE})'), {index} + 1)"


def cost_expression(*, rates: str, input_tokens: str, output_tokens: str, cached_tokens: str, search_units: str) -> str:
    """Nullable(Float64) cost from columns: `rates` (see `price_rates`) and the used quantities (UInt32)."""
    cached = f"least({cached_tokens}, {input_tokens})"
    # Each used quantity adds its price; a NULL rate of a used quantity makes the whole cost NULL (unknown).
    return (
        # (an OR of `> 0` tests: the analyzer plans `x = 0 AND y = 0` on computed columns far slower)
        f"if({rates}.1 AND ({input_tokens} > 0 OR {output_tokens} > 0 OR {search_units} > 0), "
        f"if({input_tokens} > 0, (({input_tokens} - {cached}) * {rates}.2 + {cached} * {rates}.4) / 1e6, 0) "
        f"+ if({output_tokens} > 0, {output_tokens} * {rates}.3 / 1e6, 0) "
        f"+ if({search_units} > 0, {search_units} * {rates}.5, 0), NULL)"
    )
