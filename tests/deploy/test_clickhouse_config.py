"""deploy/clickhouse: the example cluster definition and the agents' settings profile agree with the cluster the
migration job names and with what the cluster schema needs."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from typing import Any

from tests.deploy.conftest import DEPLOY, k8s_find


def migrate_job_cluster(k8s_docs: list[dict[str, Any]]) -> str:
    (job,) = k8s_find(k8s_docs, "Job", "ragmon-migrate")
    args = job["spec"]["template"]["spec"]["containers"][0]["args"]
    return str(args[args.index("--cluster") + 1])


def test_cluster_definition_matches_the_migration_job(k8s_docs: list[dict[str, Any]]) -> None:
    root = ET.parse(DEPLOY / "clickhouse" / "cluster.xml").getroot()
    servers = root.find("remote_servers")
    assert servers is not None
    clusters = list(servers)
    assert [c.tag for c in clusters] == [migrate_job_cluster(k8s_docs)]
    shards = clusters[0].findall("shard")
    assert len(shards) >= 2
    for shard in shards:
        # Replicated tables copy rows between replicas; Distributed must write one replica per shard.
        assert shard.findtext("internal_replication") == "true"
        assert len(shard.findall("replica")) >= 2
    # The macros the generated engines' Keeper paths use.
    macros = root.find("macros")
    assert macros is not None and {m.tag for m in macros} >= {"shard", "replica"}
    assert root.find("zookeeper") is not None


def test_agent_profile_makes_distributed_inserts_synchronous(k8s_docs: list[dict[str, Any]]) -> None:
    sql = (DEPLOY / "clickhouse" / "agent-profile.sql").read_text(encoding="utf-8")
    statement = "\n".join(line for line in sql.splitlines() if not line.startswith("--"))
    match = re.search(
        r"CREATE SETTINGS PROFILE IF NOT EXISTS (\w+) ON CLUSTER (\w+)\s+SETTINGS (.+?)\s+TO \w+;", statement
    )
    assert match is not None, statement
    assert match.group(2) == migrate_job_cluster(k8s_docs)
    assert "distributed_foreground_insert = 1" in match.group(3)
