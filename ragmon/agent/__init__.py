"""The agent (`ragmon serve`): the wiring of receivers, the pipeline, alerting, the API and dashboard, and the store
(`agent.py`), and who owns a data directory (`ownership.py`).

Only the commands import this package, inside their functions: `import ragmon` never pulls the agent's dependencies.
"""

from ragmon.agent.agent import Agent, split_host_port
from ragmon.agent.alerting import AlertingService
from ragmon.agent.ownership import (
    DataDirInUse,
    DataDirLock,
    DataDirUnavailable,
    claim_or_find_agent,
    describe_owner,
    read_owner,
)

__all__ = [
    "Agent",
    "AlertingService",
    "DataDirInUse",
    "DataDirLock",
    "DataDirUnavailable",
    "claim_or_find_agent",
    "describe_owner",
    "read_owner",
    "split_host_port",
]
