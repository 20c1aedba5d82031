"""The issue's incident as an app: a support bot over a small corpus of paragraphs, one release per run.

Run as `python -m tests.agent.incident_app ENDPOINT RELEASE REQUESTS SEED [--unchanged]`.

Three requests in four are traced with OpenInference names through the OpenTelemetry SDK (a CHAIN root with the
question and answer, a RETRIEVER span whose documents carry their chunk id, text, score and — in the document's
metadata — the paragraph they were cut from, an LLM span with tokens); one in four with ragmon's SDK (its
documents carry their chunk id and, as a tuple's 4th element, their paragraph). `service.version` is the release, a
resource attribute in both.

Release A: chunks of whole paragraphs; each question retrieves the paragraph that answers it and another, and the
answer paraphrases it with a sentence of its own (partly grounded). Release B: new chunking (other chunk ids), answers
copied from the passages (better grounded) — except that the most common question, "how do I reset my password",
now retrieves the paragraph on changing the e-mail address instead of the one on passwords, and is answered from
it. With --unchanged, B is A under another name (a release that changes nothing).
"""

from __future__ import annotations

import json
import random
import sys

from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

import ragmon

FEATURE = "support"
PARAGRAPHS = {
    "para-password": "To reset your password, open Settings, choose Security and press Reset password. "
    "A reset link is sent to your e-mail address and stays valid for one hour.",
    "para-email": "To change your e-mail address, open Settings, choose Profile and enter the new address. "
    "A confirmation message is sent to the new address.",
    "para-invoice": "Invoices are in the Billing page under Documents. Each invoice is a PDF you can download.",
    "para-refund": "Refunds are paid back to the original card within ten working days after we approve them.",
    "para-shipping": "Orders ship within two working days. You receive a tracking number by e-mail when they ship.",
    "para-cancel": "You can cancel your plan at any time in Billing; it stays active until the end of the period.",
}
# (group's paraphrases, its paragraph, the other paragraph retrieved with it, weight)
QUESTIONS = (
    (
        ("How do I reset my password?", "how can I reset my password", "I forgot my password, how do I reset it?"),
        "para-password",
        "para-email",
        0.34,
    ),
    (("Where can I find my invoice?", "where are my invoices"), "para-invoice", "para-cancel", 0.22),
    (("When will I get my refund?", "how long does a refund take"), "para-refund", "para-invoice", 0.16),
    (("When will my order ship?", "how fast do orders ship"), "para-shipping", "para-refund", 0.16),
    (("How do I cancel my plan?", "can I cancel my subscription"), "para-cancel", "para-invoice", 0.12),
)
BROKEN = "para-password"


def _first_sentence(paragraph: str) -> str:
    return PARAGRAPHS[paragraph].split(". ")[0] + "."


def answer_for(release: str, paragraphs: list[str], rng: random.Random) -> str:
    if release == "A":  # a paraphrase with a claim of its own beside the passage's
        extra = rng.choice(("Our team is happy to help with anything else.", "This usually takes a few minutes."))
        return f"{_first_sentence(paragraphs[0])} {extra}"
    return PARAGRAPHS[paragraphs[0]]  # B: the passage itself


def plan(release: str, unchanged: bool, rng: random.Random) -> tuple[str, list[str], str]:
    """(question, retrieved paragraphs, answer) of one request."""
    group = rng.choices(QUESTIONS, [q[3] for q in QUESTIONS])[0]
    phrasings, right, other, _ = group
    question = rng.choice(phrasings)
    behaves_as = "A" if unchanged else release
    paragraphs = [right, other]
    if behaves_as == "B" and right == BROKEN:
        paragraphs = ["para-email", "para-cancel"]  # the new chunking lost the password paragraph's match
    return question, paragraphs, answer_for(behaves_as, paragraphs, rng)


def chunk_id(release: str, paragraph: str, unchanged: bool) -> str:
    return f"{paragraph}#c0" if release == "A" or unchanged else f"{paragraph}#v2-{len(paragraph) % 3}"


def main(endpoint: str, release: str, requests: int, seed: int, unchanged: bool) -> int:
    rng = random.Random(seed)
    resource = {"service.version": release}
    ragmon.configure(
        service_name="support-bot",
        endpoint=endpoint,
        capture_content=True,
        settings={"sdk": {"resource_attributes": resource}},
    )
    # the feature as a resource attribute (OTEL_RESOURCE_ATTRIBUTES=ragmon.feature=support would do the same)
    oi_resource = {"service.name": "support-bot-oi", "ragmon.feature": FEATURE, **resource}
    provider = TracerProvider(resource=Resource.create(oi_resource))
    provider.add_span_processor(
        BatchSpanProcessor(OTLPSpanExporter(endpoint=f"{endpoint}/v1/traces"), max_queue_size=100_000)
    )
    tracer = provider.get_tracer("incident-app")
    for _ in range(requests):
        question, paragraphs, answer = plan(release, unchanged, rng)
        if rng.random() < 0.25:
            with ragmon.request(FEATURE, question=question) as req:
                with ragmon.search(top_k=2, data_source="help-center") as search:
                    search.record(
                        documents=[
                            (chunk_id(release, p, unchanged), 0.9 - 0.1 * i, PARAGRAPHS[p], p)  # p: its paragraph
                            for i, p in enumerate(paragraphs)
                        ]
                    )
                with ragmon.generate("gpt-4o-mini", provider="openai") as generate:
                    generate.record(input_tokens=180, output_tokens=40, answer=answer)
                req.record(answer=answer)
            continue
        with tracer.start_as_current_span("support.chain") as chain:
            chain.set_attributes(
                {
                    "openinference.span.kind": "CHAIN",
                    "input.value": question,
                    "output.value": answer,
                    "ragmon.feature": FEATURE,
                }
            )
            with tracer.start_as_current_span("retrieve") as retriever:
                retriever.set_attribute("openinference.span.kind", "RETRIEVER")
                retriever.set_attribute("input.value", question)
                for i, paragraph in enumerate(paragraphs):
                    prefix = f"retrieval.documents.{i}.document"
                    retriever.set_attribute(f"{prefix}.id", chunk_id(release, paragraph, unchanged))
                    retriever.set_attribute(f"{prefix}.content", PARAGRAPHS[paragraph])
                    retriever.set_attribute(f"{prefix}.score", 0.9 - 0.1 * i)
                    retriever.set_attribute(f"{prefix}.metadata", json.dumps({"paragraph_id": paragraph}))
            with tracer.start_as_current_span("llm") as llm:
                llm.set_attributes(
                    {
                        "openinference.span.kind": "LLM",
                        "llm.model_name": "gpt-4o-mini",
                        "llm.token_count.prompt": 180,
                        "llm.token_count.completion": 40,
                        "input.value": question,
                        "output.value": answer,
                    }
                )
    provider.shutdown()
    ragmon.shutdown(30.0)
    return 0


if __name__ == "__main__":
    args = [a for a in sys.argv[1:] if a != "--unchanged"]
    sys.exit(main(args[0], args[1], int(args[2]), int(args[3]), "--unchanged" in sys.argv))
