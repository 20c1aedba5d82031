"""Answer relevance: does the answer address the question? The judge writes the questions the answer would
answer; the score is the mean cosine between their embeddings and the real question's (Ragas' answer
relevancy). A noncommittal answer ("I don't know") scores 0. The embedding model is pinned and recorded.

Offline (the local judge): the cosine of the question and the answer themselves — MiniLM sentence embeddings when
installed, else bag-of-stems vectors. An uncalibrated heuristic.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from typing import ClassVar

from pydantic import BaseModel, Field
from ragmon.judges import text
from ragmon.judges.metrics._common import result
from ragmon.judges.prompts import Example, Prompt
from ragmon.judges.protocol import JudgeLLM, LocalScoring, PlannedCalls
from ragmon.judges.types import MetricResult, RagSample, SampleField, Status

PROMPT_VERSION = "answer-relevance-v1"
QUESTIONS_PER_ANSWER = 3


class GeneratedQuestions(BaseModel):
    noncommittal: bool = False
    questions: list[str] = Field(default_factory=list)


PROMPT = Prompt(
    name="answer_relevance.questions",
    version=PROMPT_VERSION,
    instruction=(
        f"Write {QUESTIONS_PER_ANSWER} different questions that the answer below answers. Set noncommittal to "
        "true if the answer is evasive, vague or says it does not know."
    ),
    output_schema='{"noncommittal": false, "questions": ["...", "...", "..."]}',
    examples=(
        Example(
            {"answer": "Albert Einstein was born in Ulm, Germany, in 1879."},
            {
                "noncommittal": False,
                "questions": [
                    "Where was Albert Einstein born?",
                    "In which year was Einstein born?",
                    "What is Einstein's birthplace?",
                ],
            },
        ),
        Example(
            {"answer": "I'm not sure which model was used in that study."},
            {"noncommittal": True, "questions": ["Which model was used in the study?"]},
        ),
    ),
)


class AnswerRelevance:
    name: ClassVar[str] = "answer_relevance"
    prompt_version: ClassVar[str] = PROMPT_VERSION
    needs: ClassVar[frozenset[SampleField]] = frozenset({SampleField.QUESTION, SampleField.ANSWER})
    review_labels: ClassVar[tuple[str, str] | None] = ("relevant", "not relevant")

    async def score(self, sample: RagSample, llm: JudgeLLM) -> MetricResult:
        version = f"{PROMPT_VERSION}+{llm.embedding_model}"
        if not sample.answer.strip() or not sample.question.strip():
            return result(self.name, version, None, Status.UNSCORABLE, "empty question or answer", model=llm.model)
        gen = await llm.generate(PROMPT, {"answer": sample.answer}, GeneratedQuestions)
        if gen.value is None:
            return result(self.name, version, None, gen.status, gen.error, usage=gen.usage, model=llm.model)
        questions = [q for q in gen.value.questions if q.strip()]
        if gen.value.noncommittal:
            value, status = self._compute_score([], [], noncommittal=True)
            return result(
                self.name,
                version,
                value,
                status,
                "noncommittal answer",
                usage=gen.usage,
                model=llm.model,
                flags=["noncommittal"],
            )
        if not questions:
            return result(
                self.name, version, None, Status.PARSE_ERROR, "no questions generated", usage=gen.usage, model=llm.model
            )
        emb = await llm.embed([sample.question, *questions])  # the only metric that embeds
        usage = gen.usage + emb.usage
        if emb.vectors is None or len(emb.vectors) != len(questions) + 1:
            return result(
                self.name,
                version,
                None,
                emb.status if emb.vectors is None else Status.PARSE_ERROR,
                emb.error or "wrong number of embeddings",
                usage=usage,
                model=llm.model,
            )
        value, status = self._compute_score(emb.vectors[0], emb.vectors[1:])
        return result(
            self.name,
            version,
            value,
            status,
            f"mean cosine over {len(questions)} generated questions",
            usage=usage,
            model=llm.model,
        )

    def planned_calls(self, sample: RagSample) -> PlannedCalls:
        """Question generation, then one embedding call: the question and the generated ones, each counted as long
        as the question."""
        embedded = len(sample.question.encode()) * (1 + QUESTIONS_PER_ANSWER)
        return PlannedCalls(chats=(PROMPT.render({"answer": sample.answer}),), embedded_bytes=embedded)

    def score_locally(self, sample: RagSample, judge: LocalScoring) -> MetricResult:
        embedding = judge.sentence_embedder
        embedding_name = embedding[1] if embedding else "bag-of-stems"
        version = f"local-answer-relevance-v1+{embedding_name}"
        if not sample.question.strip() or not sample.answer.strip():
            return result(self.name, version, None, Status.UNSCORABLE, "empty question or answer", model=judge.model)
        if text.is_noncommittal(sample.answer):
            value, status = self._compute_score([], [], noncommittal=True)
            return result(
                self.name,
                version,
                value,
                status,
                "noncommittal answer",
                model=judge.model,
                flags=["noncommittal"],
            )
        if embedding is not None:
            q, a = embedding[0]([sample.question, sample.answer])
        else:
            q, a = _bag_vectors(sample.question, sample.answer)
        value, status = self._compute_score(q, [a])
        return result(
            self.name, version, value, status, f"cosine(question, answer) with {embedding_name}", model=judge.model
        )

    @staticmethod
    def _compute_score(
        question: Sequence[float], generated: Sequence[Sequence[float]], *, noncommittal: bool = False
    ) -> tuple[float | None, Status]:
        """Mean cosine(question, generated_i); 0.0 for a noncommittal answer; undefined without generated
        questions or with a zero vector."""
        if noncommittal:
            return 0.0, Status.OK
        if not generated:
            return None, Status.UNSCORABLE
        cosines = [cosine(question, g) for g in generated]
        if any(c is None for c in cosines):
            return None, Status.UNSCORABLE
        return sum(c for c in cosines if c is not None) / len(cosines), Status.OK


def cosine(a: Sequence[float], b: Sequence[float]) -> float | None:
    if len(a) != len(b):
        return None
    norm = math.sqrt(sum(x * x for x in a)) * math.sqrt(sum(y * y for y in b))
    if norm == 0:
        return None
    return sum(x * y for x, y in zip(a, b, strict=True)) / norm


def _bag_vectors(a: str, b: str) -> tuple[list[float], list[float]]:
    ca, cb = Counter(text.content_tokens(a)), Counter(text.content_tokens(b))
    vocabulary = sorted(set(ca) | set(cb))
    # sqrt damping: one repeated word should not dominate a short text
    return [math.sqrt(ca[w]) for w in vocabulary], [math.sqrt(cb[w]) for w in vocabulary]
