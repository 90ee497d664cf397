"""A local HTTP ledger that records every tool execution by Idempotency-Key (for the chaos test).

It runs in a thread of the test process, so it outlives the worker processes being killed. Each
execution is recorded with its time and the request's ``Agentmill-Fencing-Token``.

``hold_accepts()`` makes it a busy downstream: it stops accepting connections and fills its short
listen backlog, so the kernel drops new SYNs and callers' connects hang (retrying SYN) until
``release_accepts()``, which also widens the backlog so the callers that come next are not dropped.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections import defaultdict
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class Ledger:
    def __init__(self, delay_s: float = 0.0, backlog: int = 128) -> None:
        self.delay_s = delay_s
        self.backlog = backlog
        self.lock = threading.Lock()
        self.executions: dict[str, list[float]] = defaultdict(list)
        self.tokens: dict[str, list[str]] = defaultdict(list)
        self.arrived: dict[str, int] = defaultdict(int)  # requests by key, counted before their delay
        self.accepting = threading.Event()
        self.accepting.set()
        self._fillers: list[socket.socket] = []
        ledger = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body: dict[str, Any] = json.loads(self.rfile.read(length) or b"{}")
                key = self.headers.get("Idempotency-Key") or "missing"
                delay = float(body.get("arguments", {}).get("delayMs", 0)) / 1000.0 or ledger.delay_s
                with ledger.lock:
                    ledger.arrived[key] += 1
                if delay:
                    time.sleep(delay)
                with ledger.lock:
                    ledger.executions[key].append(time.time())
                    ledger.tokens[key].append(self.headers.get("Agentmill-Fencing-Token") or "")
                    n = len(ledger.executions[key])
                out = json.dumps({"recorded": key, "execution": n}).encode()
                try:
                    self.send_response(200)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(out)))
                    self.end_headers()
                    self.wfile.write(out)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the worker died mid-call: the execution is recorded all the same

            def log_message(self, format: str, *args: Any) -> None:
                return

        class Server(ThreadingHTTPServer):
            request_queue_size = backlog
            daemon_threads = True

            def get_request(self) -> tuple[socket.socket, Any]:
                ledger.accepting.wait()  # held: connections wait in the (full) accept queue
                return self.socket.accept()

        self.server = Server(("127.0.0.1", 0), Handler)
        self.port = int(self.server.server_address[1])
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/exec"

    def __enter__(self) -> Ledger:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release_accepts()
        self.server.shutdown()
        self.server.server_close()

    def hold_accepts(self) -> int:
        """Stop accepting and fill the accept queue; returns how many connections filled it."""
        self.accepting.clear()
        self.server.socket.listen(self.backlog)
        for _ in range(256):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.settimeout(0.3)
            try:
                s.connect(("127.0.0.1", self.port))
            except OSError:  # timed out: the queue is full and the SYN was dropped
                s.close()
                break
            self._fillers.append(s)
        return len(self._fillers)

    def release_accepts(self) -> None:
        """Accept again, with a roomy backlog (Linux takes a new backlog from a second listen)."""
        for s in self._fillers:
            s.close()
        self._fillers.clear()
        self.server.socket.listen(128)
        self.accepting.set()

    def counts(self) -> dict[str, int]:
        with self.lock:
            return {k: len(v) for k, v in self.executions.items()}

    def executed_at(self) -> dict[str, list[float]]:
        with self.lock:
            return {k: list(v) for k, v in self.executions.items()}
