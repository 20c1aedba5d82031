"""Memory sizes as people write them ("1GiB", "768MB", "1.5Gi", Kubernetes' byte counts) and the container's limit.

`agent.memory_limit` takes a size; its default is the limit of the cgroup the agent runs in (a container's or a
pod's), else 2 GiB. Standard library only: `ragmon.settings` imports this, and `pip install ragmon` stays light.
"""

from __future__ import annotations

import re
from pathlib import Path

__all__ = ["DEFAULT_MEMORY_LIMIT", "cgroup_memory_limit", "default_memory_limit", "format_size", "parse_size"]

DEFAULT_MEMORY_LIMIT = 2 * 1024**3  # with no cgroup limit: what the agent holds at saturation, plus headroom

# Decimal units are powers of 1000 and binary ones powers of 1024, as in Kubernetes quantities and IEC prefixes;
# the trailing "B" is optional ("1Gi" as a pod spec writes it, "1GiB" as a person does). Matched case-insensitively:
# nobody means millibytes by "768mb".
_UNITS = {
    "": 1,
    "k": 1000,
    "m": 1000**2,
    "g": 1000**3,
    "t": 1000**4,
    "ki": 1024,
    "mi": 1024**2,
    "gi": 1024**3,
    "ti": 1024**4,
}
_SIZE_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]i?)?b?\s*$", re.IGNORECASE)

# cgroup v1 reports "no limit" as the largest page-aligned 63-bit number; anything this large is no limit.
_UNLIMITED_FROM = 1 << 60
_CGROUP_FILES = ("memory.max", "memory/memory.limit_in_bytes")  # v2 (unified), v1


def parse_size(text: str | int) -> int:
    """Bytes in a size: an integer, or a number with a unit (k/M/G/T decimal, Ki/Mi/Gi/Ti binary, optional B)."""
    if isinstance(text, int):
        if text < 0:
            raise ValueError(f"a size cannot be negative: {text}")
        return text
    match = _SIZE_RE.match(text)
    if match is None:
        raise ValueError(f"not a size: {text!r} (write e.g. 1GiB, 768MiB, 1.5Gi, 800MB or a number of bytes)")
    number, unit = match.groups()
    return int(float(number) * _UNITS[(unit or "").lower()])


def format_size(size: int) -> str:
    """A size for people: 1.5 GiB, 768 MiB, 12 KiB."""
    for unit, factor in (("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024)):
        if size >= factor:
            return f"{size / factor:.3g} {unit}"
    return f"{size} B"


def cgroup_memory_limit(root: Path = Path("/sys/fs/cgroup")) -> int | None:
    """The memory limit of the cgroup this process runs in (v2 `memory.max`, else v1 `memory.limit_in_bytes`), or
    None when there is none. Reads the cgroup mounted at `root`, which in a container is the container's own."""
    for name in _CGROUP_FILES:
        try:
            text = (root / name).read_text().strip()
        except OSError:
            continue
        if text == "max":  # v2: no limit set
            return None
        try:
            value = int(text)
        except ValueError:
            continue
        return None if value <= 0 or value >= _UNLIMITED_FROM else value
    return None


def default_memory_limit(root: Path = Path("/sys/fs/cgroup")) -> int:
    """The container's memory limit when it has one, else `DEFAULT_MEMORY_LIMIT`."""
    return cgroup_memory_limit(root) or DEFAULT_MEMORY_LIMIT
