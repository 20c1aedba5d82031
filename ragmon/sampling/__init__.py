"""Tail sampling: which traces keep their text (question, passages, answer) and go to the judges.

Every span's numbers are stored regardless; the sampler only decides about content. One policy per module, each
one class holding its settings and its rule, stated once over a `TraceView` (view.py) so that a trace decided alone
and a batch of traces decided as arrays run the same definition; `Decision` is explicit about the awkward states;
each kept trace records the policies that fired and its inclusion probability, so judged quality can be weighted
back to all traffic.
"""

from ragmon.sampling.config import SamplerConfig, build_policies
from ragmon.sampling.decision import Decision, Verdict
from ragmon.sampling.sampler import DecidedTrace, Sampler, decision_counts
from ragmon.sampling.trace import TraceFragment, TraceSummary

__all__ = [
    "DecidedTrace",
    "Decision",
    "Sampler",
    "SamplerConfig",
    "TraceFragment",
    "TraceSummary",
    "Verdict",
    "build_policies",
    "decision_counts",
]
