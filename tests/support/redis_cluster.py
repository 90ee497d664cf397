"""A private Redis Cluster on loopback ports, for the tests and the bench.

Like ``tests.support.redis_server.RedisServer`` for one server: it starts its own ``redis-server``
processes (each with its own directory, ``nodes.conf`` and log under one temp dir), joins them with
``redis-cli --cluster create``, and never touches a Redis it did not start. The admin calls
(failover, kill, restart, stats) are synchronous and every wait is bounded; what the nodes answer
is read by tests/support/cluster_nodes.py.

Each node gets an explicit cluster bus port (``--cluster-port``): the default, port + 10000, can
fall outside 65535 for an ephemeral port.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from types import TracebackType
from typing import Any, cast

import redis

from shared.keys import SLOTS
from tests.support import cluster_nodes
from tests.support.cluster_nodes import ClusterMaster, NodeStats
from tests.support.redis_server import free_port, redis_server_binary

__all__ = ["ClusterMaster", "LocalRedisCluster", "LocalRedisClusterError", "NodeStats", "redis_cli_binary"]

HOST = "127.0.0.1"
MANUAL_FAILOVER_S = 6.0  # Redis gives a manual failover up after 5 s (CLUSTER_MF_TIMEOUT)


class LocalRedisClusterError(RuntimeError):
    pass


def redis_cli_binary() -> str | None:
    return shutil.which("redis-cli")


class LocalRedisCluster:
    def __init__(
        self,
        masters: int = 3,
        replicas_per_master: int = 1,
        node_timeout_ms: int = 1000,
        appendonly: bool = False,
    ) -> None:
        server, cli = redis_server_binary(), redis_cli_binary()
        if server is None or cli is None:
            raise LocalRedisClusterError(
                "redis-server and redis-cli are needed for a Redis Cluster (bin/dev installs them on Debian)"
            )
        if masters < 1 or (masters < 3 and replicas_per_master):
            raise LocalRedisClusterError(
                "a cluster of fewer than 3 masters is made here without replicas only"
            )
        self.server_binary, self.cli_binary = server, cli
        self.masters_count, self.replicas_per_master = masters, replicas_per_master
        self.node_timeout_ms, self.appendonly = node_timeout_ms, appendonly
        n = masters * (1 + replicas_per_master)
        taken: set[int] = set()
        while len(taken) < 2 * n:  # a client port and a bus port per node, all distinct
            taken.add(free_port())
        pool = sorted(taken)
        self.ports: list[int] = pool[:n]
        self._bus = dict(zip(self.ports, pool[n:], strict=True))
        self._tmp: tempfile.TemporaryDirectory[str] | None = None
        self.dir = Path()
        self._procs: dict[int, subprocess.Popen[bytes]] = {}
        self._admin: dict[int, redis.Redis] = {}

    # lifecycle

    def start(self, timeout_s: float = 30.0) -> LocalRedisCluster:
        self._tmp = tempfile.TemporaryDirectory(prefix="agentmill-cluster-")
        self.dir = Path(self._tmp.name)
        deadline = time.monotonic() + timeout_s
        try:
            for port in self.ports:
                self._launch(port)
            for port in self.ports:
                self._wait(f"node {port} answering PING", partial(self._ping, port), deadline)
            if self.masters_count < 3:
                self._create_small()
            else:
                self._create(deadline)
            self._wait("every node cluster_state:ok with all slots", self._settled, deadline)
            self._wait("every replica in sync with its master", self._replicas_linked, deadline)
        except BaseException as e:
            logs = self._logs_tail()
            self.stop()
            if isinstance(e, LocalRedisClusterError):
                raise LocalRedisClusterError(f"{e}\n{logs}") from e
            raise
        return self

    def _create_small(self) -> None:
        """One or two masters (the bench's one-master baseline): redis-cli refuses fewer than three,
        so the slots are split by hand and the nodes meet."""
        first = self.ports[0]
        for port in self.ports[1:]:
            self._call(port, "CLUSTER", "MEET", HOST, str(first), str(self._bus[first]))
        n = len(self.ports)
        for i, port in enumerate(self.ports):
            lo, hi = i * SLOTS // n, (i + 1) * SLOTS // n - 1
            self._call(port, "CLUSTER", "ADDSLOTSRANGE", str(lo), str(hi))

    def _create(self, deadline: float) -> None:
        cmd = [self.cli_binary, "--cluster", "create", *(f"{HOST}:{p}" for p in self.ports),
               "--cluster-replicas", str(self.replicas_per_master), "--cluster-yes"]  # fmt: skip
        try:
            done = subprocess.run(cmd, capture_output=True, timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired as e:
            raise LocalRedisClusterError(f"redis-cli --cluster create timed out: {e.stdout!r}") from e
        if done.returncode != 0:
            out = (done.stdout + done.stderr).decode(errors="replace")[-2000:]
            raise LocalRedisClusterError(f"redis-cli --cluster create failed ({done.returncode}): {out}")

    def stop(self) -> None:
        for client in self._admin.values():
            client.close()
        self._admin.clear()
        for proc in self._procs.values():
            if proc.poll() is None:
                proc.terminate()
        for proc in self._procs.values():
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self._procs.clear()
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None

    def __enter__(self) -> LocalRedisCluster:
        return self.start()

    def __exit__(
        self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    # the cluster as it is now

    @property
    def url(self) -> str:
        """redis://host:port of a live master (any node is a valid seed for discovery)."""
        masters = self.masters()
        return f"redis://{HOST}:{masters[0].port if masters else self.ports[0]}/0"

    def alive(self, port: int) -> bool:
        proc = self._procs.get(port)
        return proc is not None and proc.poll() is None

    def masters(self) -> list[ClusterMaster]:
        """Live nodes that are masters owning slots, each with the ranges it says it owns."""
        out = []
        for port in self._live():
            try:
                me = self._myself(port)
            except redis.RedisError:
                continue
            if "master" in me[2].split(",") and len(me) > 8:
                out.append(ClusterMaster(HOST, port, cluster_nodes.parse_ranges(me[8:])))
        return sorted(out, key=lambda m: m.slots)

    def master_for_slot(self, slot: int) -> int:
        for m in self.masters():
            if any(a <= slot <= b for a, b in m.slots):
                return m.port
        raise LocalRedisClusterError(f"no live master owns slot {slot}")

    def replicas_of(self, master_port: int, *, linked: bool = False) -> list[int]:
        """Live replicas of ``master_port``, those with their replication link up first (only
        those, with ``linked``)."""
        found = []
        for port in self._live():
            try:
                info = self._info(port, "replication")
            except redis.RedisError:
                continue
            if info.get("role") == "slave" and int(info.get("master_port", 0)) == master_port:
                found.append((info.get("master_link_status") != "up", port))
        return [p for down, p in sorted(found) if not (linked and down)]

    def replica_of(self, master_port: int) -> int:
        replicas = self.replicas_of(master_port)
        if not replicas:
            raise LocalRedisClusterError(f"master {master_port} has no live replica")
        return replicas[0]

    def node_stats(self) -> dict[int, NodeStats]:
        """Per live node (by port): role, CPU seconds, commands processed and keys."""
        out: dict[int, NodeStats] = {}
        for port in self._live():
            try:
                info = self._info(port)
                keys = int(self._call(port, "DBSIZE"))
            except redis.RedisError:
                continue
            out[port] = cluster_nodes.stats(port, info, keys)
        return out

    # faults

    def failover(self, slot: int, timeout_s: float = 15.0) -> int:
        """A manual CLUSTER FAILOVER on a replica of the master owning ``slot``; waits until that
        replica is its master and every live node agrees and reports ok. Returns the new master's port.
        Asked again when Redis gives it up (after 5 s: the masters refuse to vote for a replica of a
        master they voted for within twice the node timeout, as in failovers of one slot in a row)."""
        deadline = time.monotonic() + timeout_s
        old = self.master_for_slot(slot)
        self.replica_of(old)  # raises at once when it has none
        self._wait(f"a replica of {old} in sync", lambda: self._linked_replica(old) is not None, deadline)
        new = self._linked_replica(old)
        assert new is not None
        self._wait(f"{old} knowing {new} as its replica", lambda: self._knows_replica(old, new), deadline)
        while True:
            self._call(new, "CLUSTER", "FAILOVER")
            attempt = min(deadline, time.monotonic() + MANUAL_FAILOVER_S)
            try:
                self._wait(
                    f"replica {new} promoted for slot {slot}", lambda: self._settled(slot, new), attempt
                )
                return new
            except LocalRedisClusterError:
                if time.monotonic() >= deadline:
                    raise

    def kill_master(self, slot: int, *, wait: bool = True, timeout_s: float = 20.0) -> int:
        """SIGKILL the master owning ``slot``; returns its port. ``wait``: until a replica is promoted
        and every live node agrees and reports ok."""
        port = self.master_for_slot(slot)
        self.kill_node(port)
        if wait:
            self.wait_failover(slot, port, timeout_s=timeout_s)
        return port

    def wait_failover(self, slot: int, dead: int, *, timeout_s: float = 20.0) -> None:
        """Until a replica has taken ``slot`` over from the killed master ``dead`` and every live
        node agrees and reports ok. A failover that does not come raises with every node's view
        and the tail of its log: the cluster's own story, apart from what its clients did."""
        try:
            self._wait(
                f"a replica promoted for slot {slot} after killing {dead}",
                lambda: self._settled(slot, exclude=dead),
                time.monotonic() + timeout_s,
            )
        except LocalRedisClusterError as e:
            raise LocalRedisClusterError(f"{e}\n{self._logs_tail()}") from e

    def restart_node(self, port: int, *, wait: bool = True, timeout_s: float = 20.0) -> None:
        """Start a killed node again with its old nodes.conf: it rejoins (as a replica if it lost
        its slots meanwhile). ``wait``: until it is in sync (or owns slots) and the cluster is ok."""
        if self.alive(port):
            raise LocalRedisClusterError(f"node {port} is running")
        self._launch(port)
        if not wait:
            return
        deadline = time.monotonic() + timeout_s
        self._wait(f"node {port} answering PING", lambda: self._ping(port), deadline)
        self._wait(f"node {port} rejoined", lambda: self._settled() and self._rejoined(port), deadline)

    def kill_node(self, port: int) -> None:
        """SIGKILL any node (no wait)."""
        proc = self._procs[port]
        proc.kill()
        proc.wait()
        self._drop_admin(port)

    # internals

    def _launch(self, port: int) -> None:
        d = self.dir / f"node-{port}"
        d.mkdir(exist_ok=True)
        args = [
            self.server_binary, "--port", str(port), "--bind", HOST, "--protected-mode", "yes",
            "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
            "--cluster-port", str(self._bus[port]),
            "--cluster-node-timeout", str(self.node_timeout_ms),
            "--cluster-replica-validity-factor", "0",  # a replica may always take over (tests kill at will)
            "--repl-diskless-sync-delay", "0",  # replicas sync at once, not after 5 s
            "--save", "", "--appendonly", "yes" if self.appendonly else "no",
            "--dir", str(d), "--daemonize", "no", "--loglevel", "notice",
            "--logfile", str(d / "redis.log"),
        ]  # fmt: skip
        self._procs[port] = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def _live(self) -> list[int]:
        return [p for p in self.ports if self.alive(p)]

    def _client(self, port: int) -> redis.Redis:
        if port not in self._admin:
            self._admin[port] = redis.Redis(
                host=HOST, port=port, socket_connect_timeout=0.5, socket_timeout=2.0, decode_responses=True
            )
        return self._admin[port]

    def _call(self, port: int, *args: str) -> Any:
        return self._client(port).execute_command(*args)  # type: ignore[no-untyped-call]

    def _info(self, port: int, section: str | None = None) -> dict[str, Any]:
        return cast(dict[str, Any], self._client(port).info(section))

    def _cluster_info(self, port: int) -> dict[str, str]:
        return cluster_nodes.info_fields(str(self._call(port, "CLUSTER", "INFO")))

    def _drop_admin(self, port: int) -> None:
        client = self._admin.pop(port, None)
        if client is not None:
            client.close()

    def _ping(self, port: int) -> bool:
        if not self.alive(port):
            raise LocalRedisClusterError(f"redis-server on port {port} exited")
        try:
            return bool(self._client(port).ping())
        except redis.ConnectionError:
            return False

    def _nodes(self, port: int) -> str:
        return str(self._call(port, "CLUSTER", "NODES"))

    def _myself(self, port: int) -> list[str]:
        fields = cluster_nodes.myself(self._nodes(port))
        if fields is None:
            raise LocalRedisClusterError(f"node {port}: no 'myself' line in CLUSTER NODES")
        return fields

    def _settled(
        self, slot: int | None = None, owner: int | None = None, *, exclude: int | None = None
    ) -> bool:
        """Every live node reports cluster_state:ok with every slot ok, and (given ``slot``) every
        live node sees ``owner`` (or any master but ``exclude``) owning it."""
        for port in self._live():
            info = self._cluster_info(port)
            if info.get("cluster_state") != "ok" or int(info.get("cluster_slots_ok", 0)) != SLOTS:
                return False
            if slot is None:
                continue
            holders = [
                p
                for p, ranges in cluster_nodes.owners(self._nodes(port)).items()
                if any(a <= slot <= b for a, b in ranges)
            ]
            if len(holders) != 1 or holders[0] == exclude or (owner is not None and holders[0] != owner):
                return False
            if not self.alive(holders[0]):
                return False
        return True

    def _linked_replica(self, master_port: int) -> int | None:
        return next(iter(self.replicas_of(master_port, linked=True)), None)

    def _knows_replica(self, master_port: int, replica_port: int) -> bool:
        """Does the master's own view (its CLUSTER NODES) have ``replica_port`` as its replica? A
        replica's link can be up before that (just after a failover, the old master turned replica):
        its manual failover request is then ignored by the master and times out after 5 s."""
        nodes = self._nodes(master_port)
        line, me = cluster_nodes.line_of(nodes, replica_port), cluster_nodes.myself(nodes)
        return line is not None and me is not None and "slave" in line[2].split(",") and line[3] == me[0]

    def _replicas_linked(self) -> bool:
        replicas = 0
        for port in self._live():
            info = self._info(port, "replication")
            if info.get("role") == "slave":
                if info.get("master_link_status") != "up":
                    return False
                replicas += 1
        return replicas == self.masters_count * self.replicas_per_master

    def _rejoined(self, port: int) -> bool:
        """Every other live node sees ``port`` up, and it is a replica in sync or a master whose slots
        every live node agrees on."""
        for other in self._live():
            if other == port:
                continue
            line = cluster_nodes.line_of(self._nodes(other), port)
            if line is None or {"fail", "fail?"} & set(line[2].split(",")):
                return False
        info = self._info(port, "replication")
        if info.get("role") == "slave":
            return info.get("master_link_status") == "up"
        ranges = cluster_nodes.parse_ranges(self._myself(port)[8:])
        return bool(ranges) and self._settled(ranges[0][0], port)

    def _wait(self, what: str, check: Callable[[], bool], deadline: float) -> None:
        last: Exception | None = None
        while True:
            try:
                if check():
                    return
            except redis.RedisError as e:
                last = e
            if time.monotonic() > deadline:
                why = f" (last error: {last!r})" if last else ""
                raise LocalRedisClusterError(f"timed out waiting for {what}{why}; nodes: {self._summary()}")
            time.sleep(0.02)

    def _summary(self) -> str:
        parts = []
        for port in self.ports:
            if not self.alive(port):
                parts.append(f"{port}=down")
                continue
            try:
                info = self._cluster_info(port)
                role = self._info(port, "replication").get("role")
                parts.append(f"{port}={role}/{info.get('cluster_state')}/ok={info.get('cluster_slots_ok')}")
            except redis.RedisError as e:
                parts.append(f"{port}=error:{e}")
        return ", ".join(parts)

    def _logs_tail(self, chars: int = 1000) -> str:
        out = []
        for port in sorted(self.ports, key=self.alive):  # nodes that exited first
            log = self.dir / f"node-{port}" / "redis.log"
            if log.exists():
                out.append(f"--- node {port} log tail ---\n{log.read_text(errors='replace')[-chars:]}")
        return "\n".join(out)
