"""An unauthenticated upload to a running `ragmon serve`'s API port: the agent's resident memory while it arrives,
and when the refusal came, for this tree or against a git revision.

The client sends the head of a `POST /api/query` with no key and `Content-Length: -1` (which `http.server`'s
handler read as "to the end of the stream"; `--declared` sends the true length instead), then streams `--mib` MiB
(as fast as the agent takes them) and reads the answer. The agent's RSS is sampled from `/proc/<pid>/status`
every 10 ms: before, at its peak, after. The time to the answer is from the end of the head.

    python benchmarks/api_upload.py --mib 256                      # this tree
    python benchmarks/api_upload.py --mib 256 --against 4f0e5cf    # and the http.server API of 4f0e5cf
"""

from __future__ import annotations

import argparse
import json
import os
import select
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

import _source_tree  # beside this script

MiB = 1024 * 1024


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _rss_bytes(pid: int) -> int:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def _run(tree: Path, scratch: Path, mib: int, declared: bool) -> dict[str, float]:
    api_port = _free_port()
    command = [sys.executable, "-m", "ragmon.cli", "serve", "--data-dir", str(scratch / "data")]
    command += ["--otlp-http", f"127.0.0.1:{_free_port()}", "--otlp-grpc", "", "--api", f"127.0.0.1:{api_port}"]
    env = {**_source_tree.environment(tree, scratch / "site"), "RAGMON_AGENT__API_KEYS": json.dumps({"t": "key"})}
    agent = subprocess.Popen(command, cwd=tree, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{api_port}/health", timeout=1):
                    break
            except OSError:
                if time.monotonic() > deadline or agent.poll() is not None:
                    raise RuntimeError(f"the agent of {tree} did not start") from None
                time.sleep(0.1)
        before = _rss_bytes(agent.pid)
        peak, sampling = [before], True

        def sample() -> None:
            while sampling:
                peak[0] = max(peak[0], _rss_bytes(agent.pid))
                time.sleep(0.01)

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        answered_s = float("nan")
        with socket.create_connection(("127.0.0.1", api_port), timeout=600) as sock:
            length = mib * MiB if declared else -1
            sock.sendall(f"POST /api/query HTTP/1.1\r\nHost: x\r\nContent-Length: {length}\r\n\r\n".encode())
            started, chunk, answer = time.monotonic(), bytes(MiB), b""
            try:
                for _ in range(mib):
                    sock.sendall(chunk)
                    if not answer and select.select([sock], [], [], 0)[0]:
                        answer = sock.recv(65536)
                        answered_s = time.monotonic() - started
            except OSError:
                pass  # the agent stopped reading a client it owed nothing more
            if not answer:
                sock.shutdown(socket.SHUT_WR)  # all sent: a server reading "to the end" may answer now
                answer = sock.recv(65536)
                answered_s = time.monotonic() - started
        time.sleep(0.5)
        sampling = False
        sampler.join()
        status = answer.split(b" ", 2)[1].decode() if answer else "none"
        return {
            "status": float(status) if status.isdigit() else 0.0,
            "answered_after_s": answered_s,
            "rss_before_mb": before / 1e6,
            "rss_peak_mb": peak[0] / 1e6,
            "rss_after_mb": _rss_bytes(agent.pid) / 1e6,
        }
    finally:
        agent.send_signal(signal.SIGTERM)
        try:
            agent.wait(60)
        except subprocess.TimeoutExpired:
            agent.kill()
            agent.wait(10)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mib", type=int, default=256, help="size of the unauthenticated upload")
    parser.add_argument("--declared", action="store_true", help="declare the true length, not -1")
    parser.add_argument("--against", metavar="REV", help="also run the agent of this git revision")
    args = parser.parse_args()
    with (
        tempfile.TemporaryDirectory(prefix="ragmon-api-upload-") as tmp,
        _source_tree.trees(args.against, Path(tmp)) as trees,
    ):
        for name, tree in trees.items():
            scratch = Path(tmp) / name.replace(" ", "-")
            os.makedirs(scratch)
            figures = _run(tree, scratch, args.mib, args.declared)
            print(
                f"{name:<10} {args.mib} MiB unauthenticated: answered {figures['status']:.0f} after "
                f"{figures['answered_after_s']:.3f} s; agent RSS {figures['rss_before_mb']:.0f} MB before, "
                f"{figures['rss_peak_mb']:.0f} MB at peak, {figures['rss_after_mb']:.0f} MB after",
                flush=True,
            )


if __name__ == "__main__":
    main()
