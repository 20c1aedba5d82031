"""`ragmon serve` as a real subprocess on loopback ports, for end-to-end and crash tests."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class EngineServer:
    """A ClickHouse HTTP endpoint over its own embedded engine (tests/support/chhttp.py), in a child process: the
    store of
    agents started with `--clickhouse-url`, as a ClickHouse server would be."""

    def __init__(self, data_dir: Path) -> None:
        port = free_port()
        script = (
            "import threading; from tests.support.chhttp import ClickHouseHttpServer; "
            f"ClickHouseHttpServer({str(data_dir)!r}, port={port}).start(); "
            "print('ready', flush=True); threading.Event().wait()"
        )
        self.url = f"http://127.0.0.1:{port}"
        self.process = subprocess.Popen([sys.executable, "-c", script], cwd=REPO, stdout=subprocess.PIPE, text=True)
        assert self.process.stdout is not None
        if self.process.stdout.readline().strip() != "ready":
            self.stop()
            raise RuntimeError("the ClickHouse HTTP endpoint did not start")

    def stop(self) -> None:
        self.process.kill()
        self.process.wait(30)
        if self.process.stdout is not None:
            self.process.stdout.close()


class AgentProcess:
    def __init__(self, data_dir: Path, *, extra_env: dict[str, str] | None = None, grpc: bool = True) -> None:
        self.data_dir = data_dir
        self.http_port = free_port()
        self.grpc_port = free_port() if grpc else 0
        self.api_port = free_port()
        self.extra_env = extra_env or {}
        self.process: subprocess.Popen[str] | None = None
        self.log_path = data_dir.parent / f"{data_dir.name}-agent.log"

    @property
    def otlp_http(self) -> str:
        return f"http://127.0.0.1:{self.http_port}"

    @property
    def api(self) -> str:
        return f"http://127.0.0.1:{self.api_port}"

    def start(self, timeout_s: float = 60.0) -> AgentProcess:
        command = [
            sys.executable,
            "-m",
            "ragmon.cli",
            "serve",
            "--data-dir",
            str(self.data_dir),
            "--otlp-http",
            f"127.0.0.1:{self.http_port}",
            "--otlp-grpc",
            f"127.0.0.1:{self.grpc_port}" if self.grpc_port else "",
            "--api",
            f"127.0.0.1:{self.api_port}",
        ]
        env = {**os.environ, "PYTHONUNBUFFERED": "1", **self.extra_env}
        log = open(self.log_path, "a")  # noqa: SIM115 - closed when the process is stopped
        self.process = subprocess.Popen(command, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT, text=True)
        log.close()
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"ragmon serve exited with {self.process.returncode}:\n{self.log()}")
            try:
                with urllib.request.urlopen(f"{self.api}/health", timeout=1) as response:
                    if response.status == 200:
                        return self
            except OSError:
                time.sleep(0.1)
        self.process.kill()  # not left running behind the failed test
        self.process.wait(10)
        raise TimeoutError(f"ragmon serve not ready in {timeout_s} s:\n{self.log()}")

    def log(self) -> str:
        return self.log_path.read_text() if self.log_path.exists() else ""

    def stop(self, timeout_s: float = 60.0) -> int:
        assert self.process is not None
        self.process.send_signal(signal.SIGTERM)
        return self.process.wait(timeout_s)

    def kill(self) -> None:
        assert self.process is not None
        self.process.kill()
        self.process.wait(10)

    def query(self, sql: str) -> list[dict[str, Any]]:
        request = urllib.request.Request(
            f"{self.api}/api/query",
            data=json.dumps({"sql": sql}).encode(),
            method="POST",
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=30) as response:
            rows: list[dict[str, Any]] = json.loads(response.read())
            return rows

    def metric(self, name: str) -> float | None:
        """One unlabelled sample of the agent's /metrics (served beside the OTLP/HTTP receiver; None when absent)."""
        with urllib.request.urlopen(f"{self.otlp_http}/metrics", timeout=10) as response:
            for line in response.read().decode().splitlines():
                if line.startswith(name + " "):
                    return float(line.split()[1])
        return None

    def wait_for(self, sql: str, expected: Any, timeout_s: float = 30.0) -> Any:
        """Poll a one-value query until it returns `expected` (the writer stores asynchronously)."""
        deadline = time.monotonic() + timeout_s
        value = None
        while time.monotonic() < deadline:
            rows = self.query(sql)
            value = next(iter(rows[0].values())) if rows else None
            if value == expected:
                return value
            time.sleep(0.1)
        return value
