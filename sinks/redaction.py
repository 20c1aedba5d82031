"""PII redaction inside the ingest views: emails, phone numbers, card numbers and configured patterns in SQL.

Why in SQL: the normalising views (`ragmon.sinks.normalise_sql`) are where span text first becomes columns, and
ClickHouse runs ``replaceRegexpAll`` vectorised over a whole insert. Redacting in Python would mean decoding every
span's protobuf in the agent (the ingest path keeps Python per request, not per span). The patterns are RE2
(ClickHouse's regex engine): no look-around, no back-references.

What a `Redaction` turns into, applied in this order to one text (each match → ``[REDACTED:<name>]``):

1. the configured patterns, in their order (the operator's formats win over the built-in guesses);
2. ``email``: ``local@domain.tld``;
3. ``card``: 13–19 digits, contiguous or grouped (4-4-4-4, 4-6-5) by single spaces/dashes, first digit 2–6 (the
   issuers' ranges: Visa, Mastercard, Amex, Discover, JCB, Diners, UnionPay, Maestro), passing the Luhn check.
   The first-digit rule keeps epoch timestamps out (in ms, µs and ns they start with 1 from 2001 to 2033); Luhn
   drops 9 in 10 other long numbers. RE2 finds the candidates, SQL computes the checksum, only valid ones go;
4. ``phone``: ``+`` and 7–15 digits (spaces, dashes, parentheses between them); North American
   ``(555) 123-4567`` / ``555-123-4567`` / ``555.123.4567`` with an optional ``1-`` prefix; national numbers with a
   leading 0 and two separated groups (``020 7946 0958``). Contiguous digits without ``+`` are never a phone.

Boundaries keep ids whole: a built-in match must not continue a word, and a digit run preceded by ``-`` or ``.``
is never a candidate (``doc-4111111111111111``, ``order-555-123-4567``, the fraction of ``0.4111111111111111``). A
JSON escape before a match (``\\n``, ``\\t``, ``\\r``: messages are JSON text) counts as a boundary and is kept, so
redaction never breaks the JSON it runs in.

The rendered SQL is part of the views' text, whose digest is the views' COMMENT (`ragmon.sinks.otlp_views`): a change
of
configuration changes the digest and start-up re-creates the views; `fingerprint` names the configuration in logs.
Configured patterns are checked by the engine at start-up (`check_statements`): one that RE2 cannot compile, or
that matches the empty string, is a `RedactionConfigError` naming it.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from ragmon.sinks.backend import quote_string as quote

__all__ = [
    "BUILTINS",
    "DEFAULT",
    "DISABLED",
    "Redaction",
    "RedactionConfigError",
    "marker",
]

# Character classes in RE2 syntax (Python raw strings; `quote` escapes them for SQL).
_JSON_ESCAPE: Final = r"\\[nrt]"  # tried before the generic boundary so the escape is kept whole
_EMAIL: Final = (
    rf"(^|{_JSON_ESCAPE}|[^A-Za-z0-9._%+-])"
    r"([A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,})"
)
# Only the candidates, in the shapes cards are written in: 13–19 contiguous digits, 4-4-4-(1–7) groups, or the
# 4-6-5 / 4-6-4 groups of Amex and Diners; the checksum is checked in SQL. `\b`: no digit or letter may follow.
# (Looser shapes, like any run of digit groups, swallow a following phone number and then fail the length.)
_CARD_CANDIDATE: Final = (
    rf"(?:^|{_JSON_ESCAPE}|[^\w.-])"
    r"([2-6](?:\d{12,18}|\d{3}[ -]\d{4}[ -]\d{4}[ -]\d{1,7}|\d{3}[ -]\d{6}[ -]\d{4,5}))\b"
)
_PHONE: Final = (
    rf"(^|{_JSON_ESCAPE}|[^\w.+-])("
    r"\+[1-9](?:[ ()-]{0,2}\d){6,14}"
    r"|(?:1[ .-])?\(?\d{3}\)?[ .-]?\d{3}[ .-]\d{4}"
    r"|0\d{1,4}[ -]\d{3,4}[ -]?\d{3,4}"
    r")\b"
)

BUILTINS: Final = ("email", "card", "phone")  # the order they are applied in
_NAME: Final = re.compile(r"[A-Za-z][A-Za-z0-9_.-]{0,63}")


class RedactionConfigError(ValueError):
    """A redaction setting that cannot work: an unknown built-in, a bad name, an invalid or empty-matching regex."""


def marker(name: str) -> str:
    """The text a match of `name` is replaced with."""
    return f"[REDACTED:{name}]"


def _luhn_valid(candidate: str) -> str:
    """SQL UInt8: `candidate` (digits with separators) has 13–19 digits and passes the Luhn check."""
    # r = the digits, last first; every second one (odd 0-based index) doubled, minus 9 when above 9.
    digits = "arrayMap(ch -> toUInt8(ch), splitByString('', r))"
    doubled = "if(i % 2 = 1, if(d > 4, 2 * d - 9, 2 * d), d)"
    check = (
        f"least(length(r) >= 13, length(r) <= 19, "
        f"arraySum(arrayMap((d, i) -> {doubled}, {digits}, range(length(r)))) % 10 = 0)"
    )
    return f"arrayMap(r -> {check}, [reverse(replaceRegexpAll({candidate}, '[^0-9]', ''))])[1]"


@dataclass(frozen=True, slots=True)
class Redaction:
    """Which built-ins and configured patterns apply; `sql` renders them around a String expression."""

    builtins: tuple[str, ...] = BUILTINS
    patterns: tuple[tuple[str, str], ...] = ()  # (name, RE2 pattern), applied first, in this order
    enabled: bool = True

    def __post_init__(self) -> None:
        unknown = [b for b in self.builtins if b not in BUILTINS]
        if unknown:
            raise RedactionConfigError(f"agent.redaction.builtins: unknown {unknown}; known: {list(BUILTINS)}")
        seen: set[str] = set(self.builtins)
        for name, pattern in self.patterns:
            where = f"agent.redaction.patterns.{name}"
            if not _NAME.fullmatch(name):
                raise RedactionConfigError(
                    f"{where}: a pattern name is a letter then letters, digits, '_', '.', '-' (at most 64)"
                )
            if name in seen:
                raise RedactionConfigError(f"{where}: the name is already used (built-ins: {list(BUILTINS)})")
            if not isinstance(pattern, str) or not pattern:
                raise RedactionConfigError(f"{where}: the pattern must be a non-empty regular expression (RE2)")
            seen.add(name)

    @classmethod
    def from_settings(cls, settings: Any) -> Redaction:
        """From `ragmon.settings.RedactionSettings` (or anything with `enabled`, `builtins`, `patterns`)."""
        patterns: Mapping[str, str] = settings.patterns
        return cls(tuple(settings.builtins), tuple(patterns.items()), bool(settings.enabled))

    @property
    def active(self) -> bool:
        return self.enabled and bool(self.builtins or self.patterns)

    @property
    def fingerprint(self) -> str:
        """A short digest of what is redacted (logged at start-up; the views' own digest covers the SQL)."""
        text = repr((self.active, [b for b in BUILTINS if b in self.builtins], self.patterns))
        return hashlib.sha256(text.encode()).hexdigest()[:12] if self.active else "off"

    def sql(self, text: str) -> str:
        """SQL String: `text` (a String expression, used once) with every active pattern replaced.

        Each step binds its input once (``arrayMap(x -> …, [input])[1]``, a "let") and runs the replacing
        functions only on the texts that can match (``if`` evaluates its branches lazily): capture-group
        replacement costs about as much again as the plain match that gates it, and most texts have no PII.
        """
        if not self.active:
            return text
        for name, pattern in self.patterns:
            # a configured pattern usually starts with a literal, which the engine finds before running RE2
            text = f"replaceRegexpAll({text}, {quote(pattern)}, {quote(marker(name))})"
        if "email" in self.builtins:
            replaced = f"replaceRegexpAll(x, {quote(_EMAIL)}, {quote(chr(92) + '1' + marker('email'))})"
            text = f"arrayMap(x -> if(position(x, '@') > 0, {replaced}, x), [{text}])[1]"
        numbers = [name for name in ("card", "phone") if name in self.builtins]
        if numbers:
            replaced = "x"
            if "card" in numbers:
                # most texts have no candidate, and the fold over none is the text itself
                valid = f"arrayFilter(c -> {_luhn_valid('c')}, extractAll(x, {quote(_CARD_CANDIDATE)}))"
                replaced = f"arrayFold((acc, c) -> replaceAll(acc, c, {quote(marker('card'))}), {valid}, x)"
            if "phone" in numbers:
                replaced = f"replaceRegexpAll({replaced}, {quote(_PHONE)}, {quote(chr(92) + '1' + marker('phone'))})"
            gate = "|".join(_CARD_CANDIDATE if name == "card" else _PHONE for name in numbers)
            text = f"arrayMap(x -> if(match(x, {quote(gate)}), {replaced}, x), [{text}])[1]"
        return text

    def map_values(self, map_expr: str) -> str:
        """SQL Map(String, String): `map_expr` with every value redacted (keys are attribute names, kept)."""
        if not self.active:
            return map_expr
        return f"mapApply((k, v) -> (k, {self.sql('v')}), {map_expr})"

    def check_statements(self) -> list[tuple[str, str]]:
        """(pattern name, SELECT of one 0/1 value): the engine compiles the pattern (an invalid one raises) and
        answers whether it matches the empty string (which would fill every text with markers)."""
        if not self.enabled:
            return []
        return [(name, f"SELECT match('', {quote(pattern)}) AS empty_match") for name, pattern in self.patterns]

    def check(self, select: Callable[[str], Iterable[Mapping[str, Any]]]) -> None:
        """Run `check_statements` through `select` (rows as dicts); raise RedactionConfigError naming a bad pattern.

        An error the engine raises for a statement is taken as the pattern's fault only when it is not retryable
        (`StoreError.retryable`): a store that is down is not a bad configuration.
        """
        for name, statement in self.check_statements():
            where = f"agent.redaction.patterns.{name}"
            try:
                rows = list(select(statement))
            except Exception as exc:
                if getattr(exc, "retryable", False):
                    raise
                raise RedactionConfigError(f"{where}: not a valid RE2 regular expression ({_first_line(exc)})") from exc
            if rows and next(iter(rows[0].values())):
                raise RedactionConfigError(f"{where}: matches the empty string; it would mark every text")


_RE2_ERROR: Final = re.compile(r"cannot compile re2: .*?, error: (.*?)\. Look at", re.DOTALL)


def _first_line(exc: BaseException) -> str:
    """The engine's reason, without its advice on SQL escaping (the pattern is not written as SQL here)."""
    text = str(exc).strip()
    found = _RE2_ERROR.search(text)
    if found:
        return found.group(1)
    return text.splitlines()[0][:300] if text else type(exc).__name__


DEFAULT: Final = Redaction()
DISABLED: Final = Redaction(enabled=False)
