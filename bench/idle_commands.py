"""The Redis commands an idle pool sends: ``--workers`` worker processes with nothing to do, each at
the default poll delay, after ``--settle`` seconds, counted over ``--seconds`` with MONITOR, each
command by who sent it (a client, or a script on the server) and per second. Like
bench/redis_insn_per_step.py it measures the tree it is run from, so an older checkout is measured
beside this one:

    cd /work/wt-OTHER && /path/to/.venv/bin/python /path/to/bench/idle_commands.py [--workers 3]

It needs only the tree's ``tests.support`` (``RedisServer``, ``procs.workers``).
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import sys
import threading
import time

sys.path.insert(0, os.getcwd())  # the tree measured is the one it runs in

import redis

from tests.support.procs import workers
from tests.support.redis_server import RedisServer


def _name(command: str) -> str:
    parts = command.split(" ")
    name = parts[0].upper()
    if name in ("FCALL", "FCALL_RO", "EVALSHA") and len(parts) > 1:
        return f"{name} {parts[1].strip(chr(34)).rsplit('_', 1)[0]}"  # the function, not its version
    return name


def count(url: str, seconds: float) -> collections.Counter[tuple[str, str]]:
    """(sender, command) -> calls seen by MONITOR in ``seconds``."""
    seen: collections.Counter[tuple[str, str]] = collections.Counter()
    r = redis.Redis.from_url(url)
    with r.monitor() as m:  # type: ignore[no-untyped-call]
        stop = time.monotonic() + seconds
        done = threading.Timer(seconds + 0.5, lambda: r.ping())  # a command to end the last wait
        done.start()
        for ev in m.listen():
            if time.monotonic() > stop:
                break
            lua = ev.get("client_type") == "lua" or ev.get("client_address") == "lua"
            seen["lua" if lua else "client", _name(ev["command"])] += 1
        done.cancel()
    return seen


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--settle", type=float, default=15.0)  # an older tree's third process took over 6 s
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--poll-delay", default="0.05")
    ap.add_argument("--json", help="also write the figures here")
    a = ap.parse_args()
    server = RedisServer()
    server.start()
    try:
        with workers(server.url, a.workers, env={"AGENTMILL_POLL_DELAY_S": a.poll_delay}):
            time.sleep(a.settle)
            seen = count(server.url, a.seconds)
    finally:
        server.stop()
    rate = {f"{who} {cmd}": n / a.seconds for (who, cmd), n in seen.items()}
    for k, v in sorted(rate.items(), key=lambda kv: -kv[1]):
        print(f"{k:48s} {v:7.2f}/s")
    client = sum(v for k, v in rate.items() if k.startswith("client "))
    total = sum(rate.values())
    print(f"{a.workers} idle worker(s): {client:.1f} commands/s sent, {total:.1f}/s with the scripts' own")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"workers": a.workers, "sent": client, "all": total, "by_command": rate}, f, indent=1)


if __name__ == "__main__":
    main()
