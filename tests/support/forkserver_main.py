"""The fork server's own process: imports the project's process roots once, then forks a child per
request that runs ``python -m <module> <args>`` as that command would, from the imports already made.

    python -m tests.support.forkserver_main <socket path>

A request is one message on a new connection to the socket: a 4-byte length, a JSON header
(``module``, ``args``, ``env``, ``cwd``) and three descriptors (SCM_RIGHTS) for the child's stdin,
stdout and stderr. The answer is a line with the child's pid, and, when the child has ended, a line
with its wait status; then the connection closes. The client side is tests/support/forkserver.py.

Nothing here configures logging, reads settings or starts a loop or a thread before a fork: the
child starts from what importing the modules made, as a fresh process would, but without paying
for the imports again (about 3 s of CPU a process on a 2-core CI machine).
"""

from __future__ import annotations

import atexit
import contextlib
import gc
import importlib
import json
import os
import runpy
import selectors
import signal
import socket
import struct
import sys
import threading
import traceback
import warnings

# The process roots and what they import later, inside functions (off the loop, or per command).
PRELOAD = (
    "app.cli.main",
    "app.worker",
    "app.api",
    "app.supervisor",
    "producer.schedules.firer",
    # imported by a worker or the API as it starts (the loop, the economy lane, the HTTP clients' anyio)
    "uvloop",
    "anyio._backends._asyncio",
    "worker.economy.loop",
    "worker.models.anthropic",
)
HEADER = struct.Struct("!I")


def _at_least(conn: socket.socket, data: bytes, size: int) -> bytes:
    """``data`` and what follows it on ``conn`` until it holds ``size`` bytes."""
    while len(data) < size:
        more = conn.recv(1 << 16)
        if not more:
            raise EOFError("the request ended early")
        data += more
    return data


def _read_request(conn: socket.socket) -> tuple[dict[str, object], list[int]]:
    data, fds, _flags, _addr = socket.recv_fds(conn, 1 << 16, 3)
    data = _at_least(conn, data, HEADER.size)
    (size,) = HEADER.unpack_from(data)
    data = _at_least(conn, data, HEADER.size + size)
    return json.loads(data[HEADER.size : HEADER.size + size]), list(fds)


def _exit_code(code: object) -> int:
    """What the interpreter would exit with for ``SystemExit(code)``."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)
    return 1


def _child(request: dict[str, object], fds: list[int]) -> None:
    """Become ``python -m module args`` with the request's descriptors, directory and environment."""
    code = 1
    try:
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
        os.closerange(3, 1 << 16)  # the server's socket, other children's connections, the fds sent
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        cwd = str(request["cwd"])
        os.chdir(cwd)
        env = request["env"]
        assert isinstance(env, dict)
        os.environ.clear()
        os.environ.update({str(k): str(v) for k, v in env.items()})
        module, args = str(request["module"]), request["args"]
        assert isinstance(args, list)
        sys.path[0] = cwd  # as `python -m` puts the working directory first
        sys.argv = [module, *map(str, args)]  # runpy sets argv[0] to the module's file
        # runpy's warning that the module was imported before it runs as __main__: the server's own
        # preloading (PRELOAD), which a fresh `python -m` does not do, so it does not say it either
        warnings.filterwarnings("ignore", message=".* found in sys.modules after import of package",
                                category=RuntimeWarning, module="runpy")  # fmt: skip
        try:
            runpy.run_module(module, run_name="__main__", alter_sys=True)
            code = 0
        except SystemExit as e:
            code = _exit_code(e.code)
        except BaseException:
            traceback.print_exc()
            code = 1
        # What the interpreter does at exit: wait for non-daemon threads, run atexit's functions.
        threading._shutdown()  # type: ignore[attr-defined]
        atexit._run_exitfuncs()
    except BaseException:
        traceback.print_exc()
    finally:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):  # a closed pipe at exit, as the interpreter ignores it
                stream.flush()
        os._exit(code)


def _warm(module: str) -> None:
    """A test's own server (``tests.support.*``: the MCP servers) is imported here at its first
    start, so that every later child finds its SDK imported (the child still runs the module as
    ``__main__``). The process roots are imported at start-up (PRELOAD)."""
    if module.startswith("tests.support.") and module not in sys.modules:
        with contextlib.suppress(Exception):
            importlib.import_module(module)


def serve(path: str) -> None:
    for name in PRELOAD:
        importlib.import_module(name)
    # The Lua scripts rendered and the function library built (pure text, the same in every process):
    # each worker and API process did it again at start (about 0.3 s of CPU).
    importlib.import_module("shared.scripts").warm()
    # What the imports built, frozen before any fork (gc.freeze's own advice for a pre-forking
    # server): a child's first collection (a worker's and the API's settle_gc at start, about 60 ms
    # of CPU each time over the whole preloaded heap) skips it, and does not write to every object's
    # header, which copied the server's pages into each child. The child still settles its own heap.
    gc.collect()
    gc.freeze()
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(path)
    server.listen(64)
    sel = selectors.DefaultSelector()
    sel.register(server, selectors.EVENT_READ)
    children: dict[int, socket.socket] = {}
    sys.stdout.write("ready\n")
    sys.stdout.flush()
    while True:
        for _ in sel.select(timeout=0.02):  # the server socket is the one registered
            conn, _ = server.accept()
            try:
                request, fds = _read_request(conn)
            except (OSError, EOFError, ValueError):
                conn.close()
                continue
            _warm(str(request["module"]))
            pid = os.fork()
            if pid == 0:
                _child(request, fds)
            for fd in fds:
                os.close(fd)
            children[pid] = conn
            with contextlib.suppress(OSError):
                conn.sendall(f"{pid}\n".encode())
        while children:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
            ended = children.pop(pid, None)
            if ended is not None:
                with contextlib.suppress(OSError):
                    ended.sendall(f"{status}\n".encode())
                ended.close()
        if os.getppid() == 1:  # the test process is gone
            return


if __name__ == "__main__":
    serve(sys.argv[1])
