"""Checking the agent's listen addresses before anything is created, so a taken port names its flag.

A bind that fails deep in a receiver says only "[Errno 98] address already in use" — and by then the data
directory, its store and its log exist. Trying each address first (with the same SO_REUSEADDR the receivers set,
so a port in TIME_WAIT still counts as free) turns that into one line naming the flag to change, and leaves
nothing behind.
"""

from __future__ import annotations

import errno
import socket


class PortInUse(OSError):
    """A listen address another process holds."""


def check_ports_free(addresses: list[tuple[str, str, int]]) -> None:
    """Each (flag, host, port) must be bindable; port 0 (any free port) always is."""
    for flag, host, port in addresses:
        if port == 0:
            continue
        try:
            family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][0]
        except socket.gaierror as exc:
            raise PortInUse(f"{flag} {host}:{port}: cannot resolve {host!r} ({exc.strerror})") from None
        with socket.socket(family, socket.SOCK_STREAM) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                probe.bind((host, port))
            except OSError as exc:
                if exc.errno == errno.EADDRINUSE:
                    raise PortInUse(
                        f"{flag} {host}:{port} is already in use (another ragmon serve, a collector?); "
                        f"stop it or pass another address, e.g. {flag} {host}:{port + 1}"
                    ) from None
                raise PortInUse(f"{flag} {host}:{port}: cannot listen there ({exc.strerror})") from None
