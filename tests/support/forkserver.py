"""The project's processes for tests, forked from a server that has imported them once.

A worker, the API or a CLI command started as ``python -m app.…`` spends about 3 s of CPU on its
imports on a 2-core CI machine, and the suite starts hundreds of them. The fork server
(tests/support/forkserver_main.py, one per test process, started at its first use) imports the
process roots once and forks a child per start: the child is a real process of its own (its own
pid, signals, descriptors, directory and environment) that runs the module as ``python -m`` would.

``popen`` and ``run`` take what ``subprocess.Popen``/``subprocess.run`` take in the tests' helpers and
answer the same way (``poll``, ``wait`` with ``TimeoutExpired``, ``returncode``, signals; a
``CompletedProcess``). A start the server cannot make as ``python -m`` would (no ``-m``, an
interpreter setting in the environment that differs from the server's) goes to ``subprocess``, and
``AGENTMILL_TEST_FORKSERVER=0`` sends every start there.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import selectors
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
HEADER = struct.Struct("!I")

__all__ = ["Child", "popen", "run"]


class ForkServer:
    """The server process of this test process, and how to ask it for a child."""

    def __init__(self) -> None:
        """Starts the server process; ``ready`` waits for its imports."""
        self.dir = tempfile.mkdtemp(prefix="agentmill-forkserver-")
        self.path = os.path.join(self.dir, "s")
        self.env = dict(os.environ)
        self.log = open(os.path.join(self.dir, "server.log"), "ab")  # noqa: SIM115 - lives with the server
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.support.forkserver_main", self.path],
            cwd=ROOT, env=self.env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=self.log,
        )  # fmt: skip
        self.started = False
        atexit.register(self.close)

    def ready(self) -> ForkServer:
        if not self.started:
            assert self.proc.stdout is not None
            line = self.proc.stdout.readline()
            if line.strip() != b"ready":
                self.proc.kill()
                raise RuntimeError(
                    f"the fork server did not start: {Path(self.log.name).read_text()[-2000:]}"
                )
            self.started = True
        return self

    def takes(self, env: Mapping[str, str]) -> bool:
        """Whether a child with ``env`` starts as a fresh interpreter would: the settings the
        interpreter reads at its own start (``PYTHON*``) are the server's."""
        ours = {k: v for k, v in self.env.items() if k.startswith("PYTHON")}
        theirs = {k: v for k, v in env.items() if k.startswith("PYTHON")}
        return ours == theirs and self.proc.poll() is None

    def spawn(self, module: str, args: list[str], env: Mapping[str, str], cwd: str, fds: list[int]) -> Child:
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        conn.connect(self.path)
        body = json.dumps({"module": module, "args": args, "env": dict(env), "cwd": cwd}).encode()
        message = HEADER.pack(len(body)) + body
        sent = socket.send_fds(conn, [message[:4096]], fds)
        conn.sendall(message[sent:])
        return Child(conn, [sys.executable, "-m", module, *args])

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        self.log.close()
        with contextlib.suppress(OSError):
            os.unlink(self.path)


_server: ForkServer | None = None
_lock = threading.Lock()


def prestart() -> None:
    """Starts this test process's server without waiting for it (tests/conftest.py, at session
    start): its imports then overlap collection instead of stalling the first test that needs it
    (a stall of seconds in an async test also stalls the API or worker it runs in its own loop)."""
    global _server
    if os.environ.get("AGENTMILL_TEST_FORKSERVER") == "0":
        return
    with _lock:
        if _server is None:
            _server = ForkServer()


def _the_server() -> ForkServer:
    global _server
    with _lock:
        if _server is None or _server.proc.poll() is not None:
            _server = ForkServer()
        return _server.ready()


class Child:
    """A forked child, as much of ``subprocess.Popen`` as the tests use."""

    def __init__(self, conn: socket.socket, args: list[str]) -> None:
        self.args = args
        self.returncode: int | None = None
        self._conn = conn
        self._buf = b""
        line = self._line(60.0)
        if line is None:
            raise RuntimeError("the fork server did not answer with a pid")
        self.pid = int(line)

    def _line(self, timeout: float | None) -> bytes | None:
        """The next line from the server, None when none came within ``timeout``."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while b"\n" not in self._buf:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            self._conn.settimeout(left)
            try:
                more = self._conn.recv(4096)
            except (TimeoutError, BlockingIOError):
                return None
            if not more:
                raise RuntimeError("the fork server closed the connection before the child's end")
            self._buf += more
        line, self._buf = self._buf.split(b"\n", 1)
        return line

    def _settle(self, timeout: float | None) -> int | None:
        if self.returncode is None:
            line = self._line(timeout)
            if line is None:
                return None
            self.returncode = os.waitstatus_to_exitcode(int(line))
            self._conn.close()
        return self.returncode

    def poll(self) -> int | None:
        return self._settle(0.0)

    def wait(self, timeout: float | None = None) -> int:
        code = self._settle(timeout)
        if code is None:
            raise subprocess.TimeoutExpired(self.args, timeout or 0.0)
        return code

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, sig)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


def _fd(target: Any, stack: contextlib.ExitStack, mode: int) -> int:
    """A descriptor for ``target``: None or DEVNULL as /dev/null, a file object's or an int's own."""
    if target is None or target == subprocess.DEVNULL:
        fd = os.open(os.devnull, mode)
        stack.callback(os.close, fd)
        return fd
    if isinstance(target, int):
        return target
    return int(target.fileno())


def _module(argv: list[str]) -> tuple[str, list[str]] | None:
    return (argv[1], argv[2:]) if len(argv) >= 2 and argv[0] == "-m" else None


def popen(
    argv: list[str],
    *,
    cwd: Path | str = ROOT,
    env: Mapping[str, str] | None = None,
    stdin: Any = None,
    stdout: Any = None,
    stderr: Any = None,
) -> Child | subprocess.Popen[bytes]:
    """``[sys.executable, *argv]`` started as ``subprocess.Popen`` would (None streams: /dev/null)."""
    env = dict(os.environ if env is None else env)
    mod = _module(argv)
    server = None if mod is None or os.environ.get("AGENTMILL_TEST_FORKSERVER") == "0" else _the_server()
    if mod is None or server is None or not server.takes(env):
        return subprocess.Popen(
            [sys.executable, *argv], cwd=cwd, env=env,
            stdin=subprocess.DEVNULL if stdin is None else stdin,
            stdout=subprocess.DEVNULL if stdout is None else stdout,
            stderr=subprocess.DEVNULL if stderr is None else stderr,
        )  # fmt: skip
    with contextlib.ExitStack() as stack:
        fds = [
            _fd(stdin, stack, os.O_RDONLY),
            _fd(stdout, stack, os.O_WRONLY),
            _fd(stderr, stack, os.O_WRONLY),
        ]
        return server.spawn(mod[0], mod[1], env, str(cwd), fds)


def _pump(outs: list[int], stdin: int | None, data: bytes) -> list[bytes]:
    """Everything the child writes on ``outs`` until it closes them, ``data`` written to ``stdin``."""
    if stdin is not None:

        def feed() -> None:
            with contextlib.suppress(OSError), open(stdin, "wb", closefd=True) as w:
                w.write(data)

        threading.Thread(target=feed, daemon=True).start()
    got = {fd: bytearray() for fd in outs}
    with selectors.DefaultSelector() as sel:
        for fd in outs:
            sel.register(fd, selectors.EVENT_READ)
        while sel.get_map():
            for key, _ in sel.select():
                chunk = os.read(key.fd, 1 << 16)
                if chunk:
                    got[key.fd] += chunk
                else:
                    sel.unregister(key.fd)
    return [bytes(got[fd]) for fd in outs]


def run(
    argv: list[str],
    *,
    cwd: Path | str = ROOT,
    env: Mapping[str, str] | None = None,
    timeout: float = 60.0,
    input: str | bytes | None = None,
    text: bool = True,
) -> subprocess.CompletedProcess[Any]:
    """``subprocess.run([sys.executable, *argv], capture_output=True, text=text, …)`` through the
    fork server: raises ``TimeoutExpired`` (the child killed) past ``timeout``."""
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    in_r, in_w = os.pipe() if input is not None else (None, None)
    try:
        child = popen(argv, cwd=cwd, env=env, stdin=in_r, stdout=out_w, stderr=err_w)
    finally:
        for fd in (out_w, err_w, in_r):
            if fd is not None:
                os.close(fd)
    data = input.encode() if isinstance(input, str) else (input or b"")
    outcome: list[list[bytes]] = []
    reader = threading.Thread(target=lambda: outcome.append(_pump([out_r, err_r], in_w, data)), daemon=True)
    reader.start()
    reader.join(timeout)
    if reader.is_alive():
        child.kill()
        child.wait(10)
        reader.join(10)
        for fd in (out_r, err_r):
            with contextlib.suppress(OSError):
                os.close(fd)
        raise subprocess.TimeoutExpired([sys.executable, *argv], timeout)
    os.close(out_r)
    os.close(err_r)
    code = child.wait(30)
    out, err = outcome[0]
    if text:
        return subprocess.CompletedProcess([sys.executable, *argv], code, out.decode(), err.decode())
    return subprocess.CompletedProcess([sys.executable, *argv], code, out, err)
