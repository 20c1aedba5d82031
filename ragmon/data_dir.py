"""What an agent's data directory holds, named once: the agent writes these files and folders, and the processes that
share the directory with it — `ragmon report`, `query`, `alerts`, `calibrate`, `backeval`, a `ragmon judge` worker —
find the agent, its store and its queue by the same names. An SDK module (standard library only) because the judges,
which may not import the agent, read two of them (`ragmon.judges.agent_client`).

    <data_dir>/
      agent.lock          the owner's exclusive lock, held for its lifetime (`ragmon.agent.agent.DataDirLock`)
      agent.json          where the owner's API listens: {"pid", "api"}, removed when it lets go
      judge-api.token     the secret a `ragmon judge` worker presents to the agent's judge endpoints (mode 0600)
      judge-queue.sqlite  the durable judge queue, shared by the agent and `ragmon judge` workers
      chdb/               the embedded store (unless a ClickHouse server is used)
      wal/                the write-ahead log of acknowledged requests
      state/              the pipeline's cursors and journals; state/quarantine/ holds requests the store refused
"""

from __future__ import annotations

from pathlib import Path

AGENT_LOCK_FILE = "agent.lock"
AGENT_FILE = "agent.json"
JUDGE_TOKEN_FILE = "judge-api.token"
JUDGE_QUEUE_FILE = "judge-queue.sqlite"
STORE_DIR = "chdb"
WAL_DIR = "wal"
STATE_DIR = "state"
QUARANTINE_DIR = "quarantine"  # under STATE_DIR


def embedded_store(data_dir: str | Path) -> Path:
    """Where the embedded store of `data_dir` lives."""
    return Path(data_dir) / STORE_DIR
