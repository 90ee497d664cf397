"""What a Redis Cluster node says about the cluster, read from its text replies (``CLUSTER NODES``,
``CLUSTER INFO``): the parsing behind tests/support/redis_cluster.py's waits and fault injection."""

from __future__ import annotations

from typing import Any, NamedTuple, TypedDict

__all__ = [
    "ClusterMaster",
    "NodeStats",
    "info_fields",
    "line_of",
    "myself",
    "owners",
    "parse_ranges",
    "stats",
]


class ClusterMaster(NamedTuple):
    host: str
    port: int
    slots: tuple[tuple[int, int], ...]  # inclusive (start, end) ranges


class NodeStats(TypedDict):
    port: int
    role: str  # "master" or "replica"
    cpu_s: float  # used_cpu_user + used_cpu_sys
    commands: int  # total_commands_processed
    keys: int  # DBSIZE


def parse_ranges(fields: list[str]) -> tuple[tuple[int, int], ...]:
    """The slot fields of a CLUSTER NODES line ("0-5460", "7", "[93->-id]" while migrating)."""
    out = []
    for f in fields:
        if f.startswith("["):
            continue
        start, _, end = f.partition("-")
        out.append((int(start), int(end or start)))
    return tuple(out)


def myself(nodes: str) -> list[str] | None:
    """The fields of the answering node's own line of CLUSTER NODES."""
    for line in nodes.splitlines():
        fields = line.split()
        if "myself" in fields[2].split(","):
            return fields
    return None


def owners(nodes: str) -> dict[int, list[tuple[int, int]]]:
    """CLUSTER NODES as one node sees it: master port -> its slot ranges (masters it sees as up)."""
    out: dict[int, list[tuple[int, int]]] = {}
    for line in nodes.splitlines():
        fields = line.split()
        flags = fields[2].split(",")
        if "master" in flags and "fail" not in flags and len(fields) > 8:
            out[int(fields[1].split("@")[0].rpartition(":")[2])] = list(parse_ranges(fields[8:]))
    return out


def line_of(nodes: str, port: int) -> list[str] | None:
    """The fields of the CLUSTER NODES line of the node on ``port``."""
    return next((x.split() for x in nodes.splitlines() if f":{port}@" in x.split()[1]), None)


def info_fields(text: str) -> dict[str, str]:
    """CLUSTER INFO's ``field:value`` lines."""
    return dict(line.split(":", 1) for line in text.splitlines() if ":" in line)


def stats(port: int, info: dict[str, Any], keys: int) -> NodeStats:
    """A node's load from its INFO (all sections) and DBSIZE."""
    return NodeStats(
        port=port,
        role="master" if info["role"] == "master" else "replica",
        cpu_s=float(info["used_cpu_user"]) + float(info["used_cpu_sys"]),
        commands=int(info["total_commands_processed"]),
        keys=keys,
    )
