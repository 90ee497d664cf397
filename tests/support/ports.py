"""Loopback ports for the servers the tests and the bench start.

``bind(("127.0.0.1", 0))`` hands out a port from the kernel's ephemeral range, and hands it out
again as soon as it is free: to another pytest-xdist process's server, or as the local port of an
outgoing connection. A test that kills a server and then waits for its clients (or a cluster's
nodes) to notice could then find a stranger at that address. So a port here comes from below the
ephemeral range, from a band of its own for each pytest-xdist worker, and is never handed out
twice by one process (a killed server's address stays dead unless its test restarts it there).
"""

from __future__ import annotations

import os
import random
import socket
import threading

__all__ = ["free_port"]

LOWEST = 10_000  # below: well-known services' ports


def _ephemeral_low() -> int:
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32_768  # Linux's default


def _band() -> range:
    """This process's ports: its pytest-xdist worker's share of [LOWEST, the ephemeral range)."""
    top = max(_ephemeral_low(), LOWEST + 2_000)
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    count = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1") or 1)
    index = int(worker[2:]) if worker.startswith("gw") and worker[2:].isdigit() else 0
    size = (top - LOWEST) // max(count, 1)
    start = LOWEST + min(index, count - 1) * size
    return range(start, start + size)


class _Ports:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._band: range | None = None
        self._next = 0

    def take(self) -> int:
        with self._lock:
            if self._band is None:
                self._band = _band()
                # A start of its own for each process, so two runs outside xdist (a bench beside a
                # test) rarely walk the same ports.
                self._next = random.Random(os.getpid()).randrange(len(self._band))
            band = self._band
            for _ in range(len(band)):
                port = band[self._next % len(band)]
                self._next += 1
                if _bindable(port):
                    return port
            raise RuntimeError(f"no free port left in {band.start}..{band.stop - 1}")


def _bindable(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


_PORTS = _Ports()


def free_port() -> int:
    """A loopback port nothing listens on, not in the ephemeral range, not handed out before by
    this process, and in this pytest-xdist worker's band."""
    return _PORTS.take()
