"""The versioned price table and the cost of one model call.

Prices are USD per 1M input, output and cached-input tokens, and per rerank search unit. The table ships with
the package (`ragmon/data/prices.json`); a JSON file of the same shape overrides or extends it. A model the
table does not know costs ``None`` (unknown), never 0 — a 0 would hide spend in every sum downstream.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

_DATE_SUFFIX = re.compile(r"-(\d{4}-\d{2}-\d{2}|\d{8}|latest|preview)$")


class PriceFileError(ValueError):
    """A price file that cannot be read or does not have the expected shape."""


@dataclass(frozen=True, slots=True)
class ModelPrice:
    input_per_1m: float | None = None
    output_per_1m: float | None = None
    cached_input_per_1m: float | None = None
    per_search_unit: float | None = None


class PriceTable:
    """Model name → prices. Lookup tolerates provider prefixes (`openai/gpt-4o`) and date suffixes."""

    def __init__(self, version: str, prices: dict[str, ModelPrice]) -> None:
        self.version = version
        self._prices = dict(prices)
        self._resolved: dict[str, ModelPrice | None] = {}

    def __contains__(self, model: str) -> bool:
        return self.lookup(model) is not None

    def lookup(self, model: str) -> ModelPrice | None:
        try:
            return self._resolved[model]
        except KeyError:
            pass
        price = self._prices.get(model)
        if price is None:
            name = model.rsplit("/", 1)[-1]
            price = self._prices.get(name) or self._prices.get(_DATE_SUFFIX.sub("", name))
        if len(self._resolved) < 4096:  # model names are few; the cap only guards against garbage input
            self._resolved[model] = price
        return price

    def cost_usd(
        self,
        model: str | None,
        input_tokens: int | None = None,
        output_tokens: int | None = None,
        cached_input_tokens: int | None = None,
        search_units: int | None = None,
    ) -> float | None:
        """Cost of one call, or None when the model is unknown or a used quantity has no price.

        `input_tokens` includes the cached ones (as OpenAI and OTel report them); cached tokens are billed at
        the cached rate when the table has one, else at the input rate.
        """
        if not model:
            return None
        price = self.lookup(model)
        if price is None:
            return None
        total = 0.0
        if input_tokens:
            if price.input_per_1m is None:
                return None
            cached = min(cached_input_tokens or 0, input_tokens)
            cached_rate = price.cached_input_per_1m if price.cached_input_per_1m is not None else price.input_per_1m
            total += (input_tokens - cached) * price.input_per_1m / 1e6 + cached * cached_rate / 1e6
        if output_tokens:
            if price.output_per_1m is None:
                return None
            total += output_tokens * price.output_per_1m / 1e6
        if search_units:
            if price.per_search_unit is None:
                return None
            total += search_units * price.per_search_unit
        return total


def _parse(document: Any, source: str) -> tuple[str, dict[str, ModelPrice]]:
    if not isinstance(document, dict) or not isinstance(document.get("models"), dict):
        raise PriceFileError(f"{source}: expected an object with a 'models' object")
    prices: dict[str, ModelPrice] = {}
    for name, entry in document["models"].items():
        if not isinstance(entry, dict):
            raise PriceFileError(f"{source}: model {name!r}: expected an object of prices")
        fields = {}
        for field in ("input_per_1m", "output_per_1m", "cached_input_per_1m", "per_search_unit"):
            value = entry.get(field)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int | float) or value < 0):
                raise PriceFileError(f"{source}: model {name!r}: {field} must be a non-negative number")
            fields[field] = None if value is None else float(value)
        prices[str(name)] = ModelPrice(**fields)
    return str(document.get("version", "unversioned")), prices


def default_price_table() -> PriceTable:
    text = resources.files("ragmon").joinpath("data/prices.json").read_text(encoding="utf-8")
    version, prices = _parse(json.loads(text), "ragmon/data/prices.json")
    return PriceTable(version, prices)


def load_price_table(path: str | Path | None = None) -> PriceTable:
    """The shipped table, overridden and extended by `path` when given. Raises PriceFileError on a bad file."""
    table = default_price_table()
    if path is None:
        return table
    try:
        document = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise PriceFileError(f"cannot read price file {path}: {exc}") from exc
    version, overrides = _parse(document, str(path))
    merged = {**table._prices, **overrides}
    return PriceTable(f"{table.version}+{version}", merged)
