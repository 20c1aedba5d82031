"""`Store`'s methods are grouped by who calls them: each public method is defined in exactly one reader's module
(`sinks/for_*.py`) or in what they share (`store_base.py`), and each reader's Protocol names methods `Store` has, with
the same parameters — so a reader's needs are read in one place and cannot drift from what the store offers."""

from __future__ import annotations

import inspect

import pytest
from ragmon.sinks.dashboard_queries import DashboardStore
from ragmon.sinks.for_alerting import AlertingMethods, AlertingStore
from ragmon.sinks.for_conversations import ConversationMethods, ConversationStore
from ragmon.sinks.for_documents import DocumentMethods, DocumentStore
from ragmon.sinks.for_feedback import FeedbackMethods, FeedbackStore
from ragmon.sinks.for_judge import JudgeMethods, JudgeQueueStore, JudgeStore
from ragmon.sinks.for_questions import QuestionMethods, QuestionStore, QuestionViewStore
from ragmon.sinks.for_report import ReportMethods, ReportStore
from ragmon.sinks.for_review import ReviewMethods, ReviewStore
from ragmon.sinks.for_sampler import SamplerMethods, SamplerStore
from ragmon.sinks.for_writer import WriterMethods, WriterStore
from ragmon.sinks.store import Store
from ragmon.sinks.store_base import StoreBase

GROUPS = (
    WriterMethods,
    SamplerMethods,
    JudgeMethods,
    ReportMethods,
    ReviewMethods,
    AlertingMethods,
    ConversationMethods,
    DocumentMethods,
    FeedbackMethods,
    QuestionMethods,
    StoreBase,
)
PROTOCOLS = (
    WriterStore,
    SamplerStore,
    JudgeStore,
    JudgeQueueStore,
    ReportStore,
    ReviewStore,
    AlertingStore,
    DashboardStore,
    ConversationStore,
    DocumentStore,
    FeedbackStore,
    QuestionStore,
    QuestionViewStore,
)


def public(cls: type) -> set[str]:
    return {name for name in vars(cls) if not name.startswith("_")}


def test_each_public_method_is_defined_in_one_group() -> None:
    owners = {name: [group.__name__ for group in GROUPS if name in public(group)] for name in public_api(Store)}
    assert {name: found for name, found in owners.items() if len(found) != 1} == {"migrate": []}
    assert public(Store) == {"migrate"}  # the schema's, beside the migrations; nothing else lives on Store itself


def public_api(cls: type) -> set[str]:
    return {name for name in dir(cls) if not name.startswith("_")}


def protocol_members(protocol: type) -> set[str]:
    return {
        name
        for klass in protocol.__mro__
        if klass not in (object,) and getattr(klass, "_is_protocol", False)
        for name in vars(klass)
        if not name.startswith("_")
    } | set(getattr(protocol, "__annotations__", {}))


@pytest.mark.parametrize("protocol", PROTOCOLS, ids=lambda p: p.__name__)
def test_each_readers_protocol_is_what_the_store_offers(protocol: type) -> None:
    members = protocol_members(protocol)
    assert members and members <= public_api(Store) | {"topology"}
    for name in sorted(members - {"topology"}):
        wanted, offered = inspect.signature(getattr(protocol, name)), inspect.signature(getattr(Store, name))
        assert [(p.name, p.kind) for p in wanted.parameters.values()] == [
            (p.name, p.kind) for p in offered.parameters.values()
        ][: len(wanted.parameters)], name
        assert all(
            p.default is inspect.Parameter.empty or p.default == offered.parameters[p.name].default
            for p in wanted.parameters.values()
        ), name
