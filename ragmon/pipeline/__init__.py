"""The span's path through the agent, from the write-ahead log to a score (`pipeline.py` reads top to bottom): the
log and its intake, the store writer, the sampling stage, what happens to decided traces, the roll-up, and the judge
queue and in-agent worker. `ragmon.agent` builds one `Pipeline` and feeds it from the receivers; `ragmon judge` and
`ragmon backeval` use the judge's side of the store (`judge_store`) and its events (`score_events`).
"""

from ragmon.pipeline.judge_store import StoreScoreSink, agent_store_side, open_store_side
from ragmon.pipeline.judging import JudgeEndpoints
from ragmon.pipeline.metrics import pipeline_families
from ragmon.pipeline.pipeline import Pipeline
from ragmon.pipeline.score_events import FLUSH_ON_STOP_S, open_events

__all__ = [
    "FLUSH_ON_STOP_S",
    "JudgeEndpoints",
    "Pipeline",
    "StoreScoreSink",
    "agent_store_side",
    "open_events",
    "open_store_side",
    "pipeline_families",
]
