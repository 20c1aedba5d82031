"""Incremental grouping: each question joins the nearest group of its (tenant, feature) when it is alike enough
(the encoder's threshold), else starts a group of its own. Exact repeats of a normalised text skip the encoder (a
bounded cache), which is most of production traffic.

Stable ids. A group's id derives from its first question's normalised text (`group_id`), its vector (the lexical
grouper's: that first question's; MiniLM's: the members' mean) and member count are written to `question_groups`
as they change, and `load` puts them back at start: a group keeps its id across days and restarts, so the same
question can be compared across releases.

Bounded memory. At most `max_groups` groups per (tenant, feature) are held. Past it the least-used tenth are
evicted at once (fewest members, then longest unused). An evicted group's rows stay in the store under its id; if
its question is asked again it starts a group whose id derives from that asking's normalised text — the same id
when it is asked the way it first was — and `load` after a restart holds the most-asked groups.
"""

from __future__ import annotations

import hashlib
import time
from collections import OrderedDict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, NamedTuple

from ragmon.questions.encoders import Encoder, GroupIndex
from ragmon.questions.normalise import normalise

# Longest question kept as a group's label and in `trace_questions` (as asked).
MAX_QUESTION_CHARS = 1000


def group_id(tenant: str, feature: str, normalised: str) -> str:
    """`q` + 12 hex of a hash of (tenant, feature, normalised text): the same first question, the same id."""
    digest = hashlib.blake2b(f"{tenant}\0{feature}\0{normalised}".encode(), digest_size=6).hexdigest()
    return "q" + digest


class Assignment(NamedTuple):
    group_id: str
    similarity: float  # to the group's vector, 0–1 (1: the same normalised text as its first question)


@dataclass
class Group:
    group_id: str
    tenant: str
    feature: str
    label: str
    normalised: str
    vector: Any
    members: int
    created_at: float
    updated_at: float
    last_used: int = 0  # the grouper's batch counter when a question last joined
    grouper: str = ""

    def row(self, stored_vector: list[float]) -> dict[str, Any]:
        """Its `question_groups` row (`ragmon.sinks.schema.QUESTION_GROUP_COLUMNS`)."""
        return {
            "tenant": self.tenant,
            "feature": self.feature,
            "group_id": self.group_id,
            "label": self.label,
            "normalised": self.normalised,
            "grouper": self.grouper,
            "centroid": stored_vector,
            "members": self.members,
            "created_at": datetime.fromtimestamp(self.created_at, UTC),
            "updated_at": datetime.fromtimestamp(self.updated_at, UTC),
        }


@dataclass
class _Feature:
    index: GroupIndex
    groups: dict[str, Group] = field(default_factory=dict)


class QuestionGrouper:
    def __init__(
        self,
        encoder: Encoder,
        *,
        max_groups: int = 2000,
        cache_size: int = 100_000,
        clock: Any = time.time,
    ) -> None:
        if max_groups < 1 or cache_size < 0:
            raise ValueError("max_groups must be at least 1 and cache_size at least 0")
        self.encoder = encoder
        self.max_groups = max_groups
        self.cache_size = cache_size
        self._clock = clock
        self._features: dict[tuple[str, str], _Feature] = {}
        # (tenant, feature, normalised) → (group id, similarity): exact repeats skip the encoder
        self._cache: OrderedDict[tuple[str, str, str], tuple[str, float]] = OrderedDict()
        self._changed: dict[str, Group] = {}
        self._batch = 0
        self.counts = {"questions": 0, "cache_hits": 0, "groups_created": 0, "groups_evicted": 0}

    # -- state ---------------------------------------------------------------------------------------------
    def load(self, rows: Iterable[Mapping[str, Any]]) -> int:
        """Hold the groups of `question_groups` rows (the most-asked first: past `max_groups` a feature's rest is not
        held). Their vectors are rebuilt from their normalised text unless this encoder stored one. Returns how many."""
        pending = [r for r in rows]
        rebuilt = [r for r in pending if not (r.get("centroid") and r.get("grouper") == self.encoder.name)]
        vectors = dict(
            zip(
                (id(r) for r in rebuilt),
                self.encoder.encode([str(r["normalised"]) for r in rebuilt], [str(r["label"]) for r in rebuilt]),
                strict=True,
            )
        )
        loaded = 0
        for row in pending:
            tenant, feature = str(row["tenant"]), str(row["feature"])
            state = self._feature(tenant, feature)
            if len(state.groups) >= self.max_groups or str(row["group_id"]) in state.groups:
                continue
            vector = vectors.get(id(row))
            if vector is None:
                vector = self.encoder.from_stored(list(row["centroid"]))
            group = Group(
                str(row["group_id"]), tenant, feature, str(row["label"]), str(row["normalised"]), vector,
                int(row["members"]), _seconds(row["created_at"]), _seconds(row["updated_at"]),
                grouper=self.encoder.name,
            )  # fmt: skip
            state.groups[group.group_id] = group
            state.index.put(group.group_id, vector)
            loaded += 1
        return loaded

    def groups(self, tenant: str, feature: str) -> list[Group]:
        state = self._features.get((tenant, feature))
        return list(state.groups.values()) if state else []

    def take_changed(self) -> list[dict[str, Any]]:
        """The `question_groups` rows of the groups created or joined since the last call."""
        rows = [g.row(self.encoder.stored(g.vector)) for g in self._changed.values()]
        self._changed.clear()
        return rows

    # -- grouping ------------------------------------------------------------------------------------------
    def assign(self, tenant: str, feature: str, questions: Sequence[str]) -> list[Assignment]:
        """The group of each question of one (tenant, feature), in order; questions asked in the same batch group
        with each other as if they had come one by one. The encoder sees only texts not seen before."""
        self._batch += 1
        state = self._feature(tenant, feature)
        texts = [q[:MAX_QUESTION_CHARS] for q in questions]
        normalised = [normalise(q) for q in texts]
        misses = sorted({n for n in normalised if self._cached(tenant, feature, n, state) is None})
        firsts = {n: texts[normalised.index(n)] for n in misses}
        vectors = dict(zip(misses, self.encoder.encode(misses, [firsts[n] for n in misses]), strict=True))
        now = self._clock()
        out: list[Assignment] = []
        for text, norm in zip(texts, normalised, strict=True):
            self.counts["questions"] += 1
            cached = self._cached(tenant, feature, norm, state)
            vector = vectors.get(norm)
            if cached is not None:
                self.counts["cache_hits"] += 1
                group, similarity = state.groups[cached[0]], cached[1]
            else:
                found = state.index.nearest(vector)
                if found is not None and found[1] >= self.encoder.threshold:
                    group, similarity = state.groups[found[0]], found[1]
                else:
                    group, similarity = self._create(state, tenant, feature, text, norm, vector, now), 1.0
                self._remember(tenant, feature, norm, (group.group_id, similarity))
            self._join(state, group, vector if cached is None else None, now)
            out.append(Assignment(group.group_id, max(0.0, min(1.0, similarity))))
        self._evict(state)
        return out

    def _create(self, state: _Feature, tenant: str, feature: str, text: str, norm: str, vector: Any, now: float
                ) -> Group:  # fmt: skip
        gid = group_id(tenant, feature, norm)
        group = Group(gid, tenant, feature, text, norm, vector, 0, now, now, grouper=self.encoder.name)
        state.groups[gid] = group
        state.index.put(gid, vector)
        self.counts["groups_created"] += 1
        return group

    def _join(self, state: _Feature, group: Group, vector: Any, now: float) -> None:
        if vector is not None and group.members > 0:
            group.vector = self.encoder.centroid(group.vector, vector, group.members)
            state.index.put(group.group_id, group.vector)
        group.members += 1
        group.updated_at = max(now, group.updated_at)
        group.last_used = self._batch
        self._changed[group.group_id] = group

    def _evict(self, state: _Feature) -> None:
        if len(state.groups) <= self.max_groups:
            return
        # a tenth at once (at least the overflow), so a full feature does not sort its groups for every question
        excess = len(state.groups) - self.max_groups + max(1, self.max_groups // 10)
        for group in sorted(state.groups.values(), key=lambda g: (g.members, g.last_used))[:excess]:
            del state.groups[group.group_id]
            state.index.remove(group.group_id)
            self.counts["groups_evicted"] += 1

    def _feature(self, tenant: str, feature: str) -> _Feature:
        state = self._features.get((tenant, feature))
        if state is None:
            state = self._features[(tenant, feature)] = _Feature(self.encoder.index())
        return state

    def _cached(self, tenant: str, feature: str, norm: str, state: _Feature) -> tuple[str, float] | None:
        key = (tenant, feature, norm)
        hit = self._cache.get(key)
        if hit is None:
            return None
        if hit[0] not in state.groups:  # its group was evicted
            del self._cache[key]
            return None
        self._cache.move_to_end(key)
        return hit

    def _remember(self, tenant: str, feature: str, norm: str, hit: tuple[str, float]) -> None:
        if self.cache_size == 0:
            return
        self._cache[(tenant, feature, norm)] = hit
        if len(self._cache) > self.cache_size:
            self._cache.popitem(last=False)


def _seconds(value: Any) -> float:
    """A DateTime64 as the store returns it (datetime) or seconds."""
    return float(value.timestamp()) if hasattr(value, "timestamp") else float(value)
