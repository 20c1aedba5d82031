"""The local judge: no network, no model download. Weaker than an LLM judge, and says so in its version.

Faithfulness: the answer (citation markers stripped) is split into claims by sentences and clauses; each claim gets
a support logit from a logistic model (judges/local_model.py) over named features (judges/support_features.py). A
claim is supported when its support, sigmoid(logit), is at or above the model's threshold, contradicted when it
states a wrong number (one no passage states, where its closest passage sentence states another), copies a passage
sentence with a negation put into it (v6.1: "was not completed" against "was completed"; its support is then at most
0.1), or matches a passage sentence closely but disagrees on a negation or a number, unsupported otherwise. The
score is graded: the probability that the answer is faithful, sigmoid of a soft minimum of its claims' logits (v4
on; fitted on answer labels, so it is a calibrated probability on the fitting data, and one threshold — the model's
— serves every kind), capped at the support of a contradicted claim (a wrong number, v6; a negated copy, v6.1). A
soft minimum rather than "every claim supported": one weak clause of a long, compressed or paraphrased answer lowers
the score instead of failing the answer outright; a wrong number is not weak but wrong. Two feature sets: "lexical"
(v6 keeps the features that hold from QA to dialogue) and "minilm" (the same plus MiniLM claim-to-sentence
similarity). Faithfulness uses "lexical" unless asked for "minilm" (`support_features`): refitted in v6, the MiniLM
set is behind the lexical one in every cell of the transfer table and on the held-out rows
(docs/design/local-judge.md), so having the embeddings extra installed must not switch the verdicts to it. The
version records the model and the embedding model, since either re-scales a metric.

Each metric's offline scoring is stated with the metric, beside its LLM steps (`score_locally` in judges/metrics/*),
and uses this judge through `ragmon.judges.protocol.LocalScoring`: its claims and their verdicts (the support model
above) and its sentence embedder. Only faithfulness has agreement figures (docs/results.md, `ragmon calibrate`); context
relevance, precision and answer relevance are uncalibrated heuristics.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from ragmon.judges import text
from ragmon.judges.conversation import in_context, with_turns
from ragmon.judges.local_model import (
    FITTED_DATASETS,
    FITTED_TASKS,
    MODELS,
    SupportModel,
    claim_support,
    contradicts,
)
from ragmon.judges.metrics import METRICS
from ragmon.judges.metrics.answer_relevance import cosine
from ragmon.judges.support_features import Evidence, SentenceEmbedder, claim_features, texts_to_embed
from ragmon.judges.types import ClaimVerdict, MetricResult, RagSample, Verdict

from ragmon import minilm

_EMBEDDING_CACHE_ENTRIES = 50_000


def load_minilm() -> tuple[SentenceEmbedder, str] | None:
    """MiniLM (`ragmon.minilm`, offline, shared in the process) when the extra is installed; None otherwise."""
    if not minilm.installed():
        return None
    model = minilm.model()

    def embed(texts: Sequence[str]) -> Sequence[Sequence[float]]:
        vectors = model.encode(list(texts), normalize_embeddings=True, batch_size=64, show_progress_bar=False)
        return [list(map(float, v)) for v in vectors]

    return embed, minilm.NAME


def expected_version(use_minilm: bool = True, threshold: float | None = None) -> str:
    """The version a default `LocalJudge` (with this faithfulness threshold) would have here, without loading a
    model: what the agent enqueues kept traces for when `ragmon judge` workers judge them (it never loads the judge
    itself then)."""
    with_minilm = use_minilm and minilm.installed()
    return _version(MODELS["lexical"], minilm.NAME if with_minilm else None, threshold)


def _version(support_model: SupportModel, embedding: str | None, threshold: float | None = None) -> str:
    """local:<model version>[@<threshold>]:<embedding>. A threshold other than the model's changes the verdicts
    (not the scores), so it is part of the version: labels are read against the threshold the verdicts were made
    with (judges/label_agreement.py), and stored scores group by it."""
    model = support_model.version
    if threshold is not None and threshold != support_model.claim_threshold:
        model += f"@{threshold:g}"
    return f"local:{model}:{embedding or 'lexical'}"


class CachedEmbedder:
    """An embedder that remembers vectors by text (bounded: cleared when full), so the same passage sentence is
    embedded once, and `prepare` can embed many answers' texts in one batch."""

    def __init__(self, embed: SentenceEmbedder, max_entries: int = _EMBEDDING_CACHE_ENTRIES) -> None:
        self._embed = embed
        self._max_entries = max_entries
        self._vectors: dict[str, Sequence[float]] = {}

    def __call__(self, texts: Sequence[str]) -> list[Sequence[float]]:
        missing = list(dict.fromkeys(t for t in texts if t not in self._vectors))
        if missing:
            if len(self._vectors) + len(missing) > self._max_entries:
                self._vectors.clear()
            self._vectors.update(zip(missing, self._embed(missing), strict=True))
        return [self._vectors[t] for t in texts]


class LocalJudge:
    name = "local"
    # Faithfulness is P(faithful), fitted on answer labels (v4 on): `ragmon calibrate` reads its calibration.
    score_is_probability = True

    def __init__(
        self,
        *,
        faithfulness_threshold: float | None = None,
        embedder: tuple[SentenceEmbedder, str] | None = None,
        use_minilm: bool = True,
        support_features: str = "lexical",
    ) -> None:
        loaded = embedder if embedder is not None else (load_minilm() if use_minilm else None)
        self._embedder = (CachedEmbedder(loaded[0]), loaded[1]) if loaded else None
        if support_features not in MODELS:
            raise ValueError(f"support_features must be one of {sorted(MODELS)}, got {support_features!r}")
        if MODELS[support_features].feature_set == "minilm" and self._embedder is None:
            raise ValueError("the minilm support features need an embedder (the embeddings extra)")
        self.support_model: SupportModel = MODELS[support_features]
        # claims are embedded only for a model that weighs their similarity (answer relevance embeds on its own)
        self._claim_embedder = self._embedder[0] if self._embedder and support_features == "minilm" else None
        # The answer's probability is on its claims' scale (a one-claim answer's is its claim's support), so one
        # threshold — the model's, or one's own — decides both, and the version names it when it is one's own (a
        # separate claim threshold, as before v8, changed verdicts without changing the version).
        self._threshold = (
            self.support_model.claim_threshold if faithfulness_threshold is None else faithfulness_threshold
        )
        self.model = f"local-{self.support_model.version}"

    @property
    def version(self) -> str:
        return _version(self.support_model, self._embedder[1] if self._embedder else None, self._threshold)

    @property
    def fitted_on(self) -> tuple[tuple[str, ...], tuple[str, ...]]:
        """(tasks, datasets) of the labelled rows the faithfulness model was fitted on (`ragmon calibrate` flags
        other kinds)."""
        return FITTED_TASKS, FITTED_DATASETS

    @property
    def faithfulness_threshold(self) -> float:
        return self._threshold

    @property
    def claim_threshold(self) -> float:
        """The same threshold: a claim is supported at it, as an answer is faithful."""
        return self._threshold

    async def aclose(self) -> None:
        return None

    async def score(self, metric: str, sample: RagSample) -> MetricResult:
        definition = METRICS.get(metric)
        if definition is None:
            raise KeyError(f"unknown metric {metric!r}")
        judged, turns = in_context(sample)  # a follow-up: its question resolved with the turn before it
        result = definition.score_locally(judged, self)
        return result.model_copy(update={"prompt_version": with_turns(result.prompt_version)}) if turns else result

    @property
    def sentence_embedder(self) -> tuple[SentenceEmbedder, str] | None:
        """(embed, model name) of the sentence embeddings loaded, None without: answer relevance's vectors."""
        return self._embedder

    def prepare(self, samples: Iterable[RagSample]) -> None:
        """Embed every text the faithfulness metric will need for `samples` in one batch (bulk scoring, e.g.
        `ragmon calibrate`); a no-op without an embedder. Scores do not depend on whether it ran (up to the float
        rounding of batched inference)."""
        if self._claim_embedder is None:
            return
        texts: list[str] = []
        for sample in samples:
            claims = self.claims_of(sample)
            if claims:
                texts.extend(texts_to_embed(claims, Evidence.build(sample.passages)))
        self._claim_embedder(texts)

    # -- faithfulness ----------------------------------------------------------------------------------------
    @staticmethod
    def claims_of(sample: RagSample) -> list[str] | None:
        """The claims faithfulness judges, or None when there is nothing to judge (empty answer, no passages,
        a refusal). An answer with no content word ("Sure!") is one claim, which nothing can support."""
        answer = text.strip_citations(sample.answer)
        if not answer or not sample.passages or text.is_refusal(answer):
            return None
        return text.split_claims(answer) or [answer]

    def claim_feature_rows(
        self, claims: Sequence[str], passages: Sequence[str], answer: str, question: str = ""
    ) -> list[dict[str, float]]:
        # a remark to the user ("Would you like to know more?", "I agree.") is no claim, nor part of the answer the
        # features read
        answer = text.without_remarks_to_user(answer)
        return claim_features(claims, answer, Evidence.build(passages), self._claim_embedder, question)

    def claim_verdicts(
        self, claims: Sequence[str], passages: Sequence[str], answer: str | None = None, question: str = ""
    ) -> list[ClaimVerdict]:
        return self.judge_claims(claims, passages, answer, question)[0]

    def judge_claims(
        self, claims: Sequence[str], passages: Sequence[str], answer: str | None = None, question: str = ""
    ) -> tuple[list[ClaimVerdict], float]:
        """Each claim's verdict, and the probability that the claims together are faithful."""
        rows = self.claim_feature_rows(claims, passages, " ".join(claims) if answer is None else answer, question)
        logits = [self.support_model.logit(features) for features in rows]
        out = []
        for claim, features, z in zip(claims, rows, logits, strict=True):
            p = claim_support(features, z)
            if p >= self.claim_threshold:
                verdict, reason = Verdict.SUPPORTED, f"support {p:.2f}"
            elif contradicts(features):
                # Only ever relabels an unsupported claim: overriding "supported" this way lowered kappa on the
                # fitting split (v1: 0.688 → 0.676 on BEGIN, 0.737 → 0.709 on HaluEval).
                verdict, reason = Verdict.CONTRADICTED, "disagrees with a passage on a negation or number"
            else:
                verdict, reason = Verdict.UNSUPPORTED, f"support {p:.2f}"
            out.append(ClaimVerdict(claim=claim, verdict=verdict, reason=reason, support=round(p, 4)))
        return out, self.support_model.answer_probability(logits, rows)


__all__ = ["CachedEmbedder", "LocalJudge", "cosine", "load_minilm"]
