"""A local HTTP ledger that records every tool execution by Idempotency-Key (for the chaos test).

It runs in a thread of the test process, so it outlives the worker processes being killed.
"""

from __future__ import annotations

import json
import threading
import time
from collections import defaultdict
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class Ledger:
    def __init__(self, delay_s: float = 0.0) -> None:
        self.delay_s = delay_s
        self.lock = threading.Lock()
        self.executions: dict[str, list[float]] = defaultdict(list)
        ledger = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body: dict[str, Any] = json.loads(self.rfile.read(length) or b"{}")
                key = self.headers.get("Idempotency-Key") or "missing"
                delay = float(body.get("arguments", {}).get("delayMs", 0)) / 1000.0 or ledger.delay_s
                if delay:
                    time.sleep(delay)
                with ledger.lock:
                    ledger.executions[key].append(time.time())
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

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = int(self.server.server_address[1])
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/exec"

    def __enter__(self) -> Ledger:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()

    def counts(self) -> dict[str, int]:
        with self.lock:
            return {k: len(v) for k, v in self.executions.items()}
