"""A Redis Cluster's slot map as its nodes report it: ``CLUSTER SHARDS`` (Redis 7) or ``CLUSTER
SLOTS`` (before), read into one shape, a ``Shard`` per master (shared/topology.py binds clients to it)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = ["Shard", "from_shards", "from_slots"]

Shard = tuple[list[tuple[int, int]], str, list[str]]  # slot ranges, master address, every node address


def _pairs(item: Any) -> dict[str, Any]:
    """A CLUSTER SHARDS map: a dict under RESP3, a flat key/value list under RESP2."""
    if isinstance(item, dict):
        return {str(k): v for k, v in item.items()}
    return {str(item[i]): item[i + 1] for i in range(0, len(item), 2)}


def from_shards(raw: Sequence[Any], host: str, *, tls: bool) -> list[Shard]:
    """CLUSTER SHARDS as node ``host`` answered it: a node that does not know its own endpoint
    (``?`` or empty) is at ``host``; with ``tls``, nodes are reached on their TLS port."""
    out = []
    for shard in raw:
        s = _pairs(shard)
        flat = [int(x) for x in s.get("slots") or []]
        ranges = list(zip(flat[::2], flat[1::2], strict=True))
        master, everyone = None, []
        for node in s.get("nodes") or []:
            n = _pairs(node)
            endpoint = n.get("endpoint") or n.get("ip")
            if endpoint in (None, "", "?"):
                endpoint = host
            port = n.get("tls-port") if tls and n.get("tls-port") else n.get("port")
            a = f"{endpoint}:{port}"
            everyone.append(a)
            if n.get("role") == "master":
                master = a
        if ranges and master is not None:
            out.append((ranges, master, everyone))
    return out


def from_slots(raw: Sequence[Any], host: str) -> list[Shard]:
    """CLUSTER SLOTS (before Redis 7): [start, end, [ip, port, id], replicas…] per range."""
    out = []
    for start, end, *nodes in raw:
        addrs = [f"{n[0] or host}:{n[1]}" for n in nodes]
        out.append(([(int(start), int(end))], addrs[0], addrs))
    return out
