"""One route to Redis: the runtime reaches a partition's node only through
``Partitions`` (``call``, ``call_key``, ``pipelined``/``each``, ``sending``), which follow a failover
and a moved slot. A client held from ``Partitions.client`` would keep talking to a node that may
have become a replica; a connection taken from a pool by hand would bypass the retries."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RUNTIME = ["shared", "worker", "producer"]
ROUTE = {"shared/partitions.py", "shared/route.py", "shared/topology.py"}
POOL = "shared/redis_conn.py"  # the clients' pool itself (QuickPool.get_connection hands connections out)
# A client taken once for what is not a call to a partition: registering the scripts (redis-py
# binds them to a client; every call names its own) and arq's own pool (its records on partition 0
# go through Partitions.call: ResilientWorker.record_health).
ANCHORED = re.compile(r"\.client\((self\.)?(arq_)?parts\.parts\[0\]\)")


def _sources() -> list[tuple[str, str]]:
    out = []
    for pkg in RUNTIME:
        for f in sorted((ROOT / pkg).rglob("*.py")):
            rel = f.relative_to(ROOT).as_posix()
            if rel not in ROUTE:
                out.append((rel, f.read_text()))
    return out


def test_no_runtime_module_holds_a_partition_client_or_a_pooled_connection() -> None:
    found = []
    for rel, src in _sources():
        for n, line in enumerate(src.splitlines(), 1):
            code = line.split("#", 1)[0]
            if ("get_connection(" in code and rel != POOL) or "for_slot(" in code or "topology.call(" in code:
                found.append(f"{rel}:{n}: {line.strip()}")
            for m in re.finditer(r"\.client\([^)]*\)", code):
                if not ANCHORED.search(m.group(0)) and "parts" in code:
                    found.append(f"{rel}:{n}: {line.strip()}")
    assert found == [], "reach a partition through Partitions (call/pipelined/each/sending):\n" + "\n".join(
        found
    )


def test_the_rule_sees_a_bypass() -> None:
    assert ANCHORED.search(".client(self.parts.parts[0])")
    assert not ANCHORED.search(".client(part)")
    bypass = "        redis = self.parts.client(part)"
    assert re.search(r"\.client\([^)]*\)", bypass) and not ANCHORED.search(bypass)
