"""Answer relevance: does the answer address the question? The judge writes the questions the answer would
answer; the score is the mean cosine between their embeddings and the real question's (Ragas' answer
relevancy). A noncommittal answer ("I don't know") scores 0. The embedding model is pinned and recorded."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import ClassVar

from pydantic import BaseModel, Field
from ragmon.judges.metrics._common import result
from ragmon.judges.prompts import Example, Prompt
from ragmon.judges.protocol import Embedder, StructuredLLM
from ragmon.judges.types import MetricResult, RagSample, Status

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

    async def score(self, sample: RagSample, llm: StructuredLLM, embedder: Embedder) -> MetricResult:
        version = f"{PROMPT_VERSION}+{embedder.embedding_model}"
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
        emb = await embedder.embed([sample.question, *questions])
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
