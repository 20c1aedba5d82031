"""How a grouper compares questions: the lexical vectors (`lexical.py`, always there) or MiniLM sentence embeddings
(`ragmon.minilm`, with the `embeddings` extra), behind one small interface the grouper uses — turn normalised texts
into vectors, and per (tenant, feature) an index of group vectors that finds the nearest group of a question.

`choose("auto")` takes MiniLM when the extra is installed and loads, else the lexical encoder; a setting can force
either (`agent.questions.grouper`). Each has its own threshold: cosines of the two live on different scales.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from typing import Any, Protocol

from ragmon import minilm
from ragmon.questions import lexical

log = logging.getLogger("ragmon.questions")

# Tuned on the paraphrase set in tests/questions/test_grouping.py (precision and recall there: docs/questions.md).
LEXICAL_THRESHOLD = 0.5
MINILM_THRESHOLD = 0.6


class GroupIndex(Protocol):
    """The groups of one (tenant, feature) as vectors: the nearest to a question, kept current as groups change."""

    def nearest(self, vector: Any) -> tuple[str, float] | None: ...

    def put(self, group_id: str, vector: Any) -> None: ...

    def remove(self, group_id: str) -> None: ...


class Encoder(Protocol):
    name: str  # 'lexical' | 'minilm': stored with each group
    threshold: float

    def encode(self, normalised: list[str], originals: list[str]) -> list[Any]: ...

    def index(self) -> GroupIndex: ...

    def similarity(self, a: Any, b: Any) -> float: ...

    def centroid(self, current: Any, added: Any, members: int) -> Any:
        """The group's vector after `added` joined its `members` (counted before it)."""

    def stored(self, vector: Any) -> list[float]:
        """What `question_groups.centroid` keeps of a group's vector (empty: rebuilt from its normalised text)."""

    def from_stored(self, values: list[float]) -> Any: ...


class _LexicalIndex:
    """Sparse vectors with an inverted index on their words: a question is compared only with the groups that share
    a content word with it, so the cost follows the matches, not the number of groups."""

    def __init__(self) -> None:
        self.vectors: dict[str, lexical.Vector] = {}
        self.postings: defaultdict[str, set[str]] = defaultdict(set)

    def nearest(self, vector: lexical.Vector) -> tuple[str, float] | None:
        candidates: set[str] = set()
        for word in lexical.words_of(vector):
            candidates |= self.postings.get(word, set())
        best: tuple[str, float] | None = None
        for group_id in candidates:
            sim = lexical.cosine(vector, self.vectors[group_id])
            if best is None or sim > best[1] or (sim == best[1] and group_id < best[0]):
                best = (group_id, sim)
        return best

    def put(self, group_id: str, vector: lexical.Vector) -> None:
        if group_id in self.vectors:
            self.remove(group_id)
        self.vectors[group_id] = vector
        for word in lexical.words_of(vector):
            self.postings[word].add(group_id)

    def remove(self, group_id: str) -> None:
        for word in lexical.words_of(self.vectors.pop(group_id, {})):
            ids = self.postings.get(word)
            if ids is not None:
                ids.discard(group_id)
                if not ids:
                    del self.postings[word]


class LexicalEncoder:
    """A group is its first question's vector: groups do not drift as members join, so a group compared across
    days and releases means the same question."""

    name = "lexical"

    def __init__(self, threshold: float = LEXICAL_THRESHOLD) -> None:
        self.threshold = threshold

    def encode(self, normalised: list[str], originals: list[str]) -> list[Any]:
        return [lexical.vector(text) for text in normalised]

    def index(self) -> GroupIndex:
        return _LexicalIndex()

    def similarity(self, a: Any, b: Any) -> float:
        return lexical.cosine(a, b)

    def centroid(self, current: Any, added: Any, members: int) -> Any:
        return current

    def stored(self, vector: Any) -> list[float]:
        return []

    def from_stored(self, values: list[float]) -> Any:
        raise ValueError("the lexical grouper stores no vectors: it rebuilds them from the normalised text")


class _DenseIndex:
    """Unit vectors in one matrix per (tenant, feature): the nearest group is one matrix-vector product."""

    def __init__(self) -> None:
        import numpy as np

        self._np = np
        self.ids: list[str] = []
        self.rows: dict[str, int] = {}
        self.matrix = np.zeros((0, minilm.DIMENSIONS), dtype=np.float32)

    def nearest(self, vector: Any) -> tuple[str, float] | None:
        if not self.ids:
            return None
        sims = self.matrix @ vector
        at = int(sims.argmax())
        return self.ids[at], float(sims[at])

    def put(self, group_id: str, vector: Any) -> None:
        at = self.rows.get(group_id)
        if at is None:
            self.rows[group_id] = len(self.ids)
            self.ids.append(group_id)
            self.matrix = self._np.vstack([self.matrix, vector[None, :]])
        else:
            self.matrix[at] = vector

    def remove(self, group_id: str) -> None:
        at = self.rows.pop(group_id, None)
        if at is None:
            return
        last = len(self.ids) - 1
        if at != last:  # the last row moves into the hole
            moved = self.ids[last]
            self.ids[at] = moved
            self.rows[moved] = at
            self.matrix[at] = self.matrix[last]
        self.ids.pop()
        self.matrix = self.matrix[:last]


class MiniLMEncoder:
    """all-MiniLM-L6-v2 embeddings (unit length) of the questions as asked; a group's vector is the normalised mean
    of its members', so it follows how people phrase the question while staying near its first asking."""

    name = "minilm"

    def __init__(self, threshold: float = MINILM_THRESHOLD) -> None:
        import numpy as np

        self._np = np
        self.threshold = threshold
        self._model = minilm.model()  # raises MiniLMUnavailable

    def encode(self, normalised: list[str], originals: list[str]) -> list[Any]:
        if not originals:
            return []
        vectors = self._model.encode(originals, batch_size=64, normalize_embeddings=True, convert_to_numpy=True)
        return list(vectors.astype(self._np.float32))

    def index(self) -> GroupIndex:
        return _DenseIndex()

    def similarity(self, a: Any, b: Any) -> float:
        return float(a @ b)

    def centroid(self, current: Any, added: Any, members: int) -> Any:
        mean = current * members + added
        norm = float(self._np.linalg.norm(mean))
        return mean / norm if norm else current

    def stored(self, vector: Any) -> list[float]:
        return [float(x) for x in vector]

    def from_stored(self, values: list[float]) -> Any:
        return self._np.asarray(values, dtype=self._np.float32)


def choose(
    grouper: str = "auto", *, lexical_threshold: float | None = None, minilm_threshold: float | None = None
) -> Encoder:
    """'lexical', 'minilm' (MiniLMUnavailable without the extra) or 'auto': MiniLM when it loads, else lexical."""
    lex = LexicalEncoder(LEXICAL_THRESHOLD if lexical_threshold is None else lexical_threshold)
    if grouper == "lexical" or (grouper == "auto" and not minilm.installed()):
        return lex
    threshold = MINILM_THRESHOLD if minilm_threshold is None else minilm_threshold
    if grouper == "minilm":
        return MiniLMEncoder(threshold)
    if grouper != "auto":
        raise ValueError(f"grouper must be auto, lexical or minilm, got {grouper!r}")
    try:
        return MiniLMEncoder(threshold)
    except minilm.MiniLMUnavailable as exc:
        log.warning("question grouping falls back to the lexical grouper: %s", exc)
        return lex
