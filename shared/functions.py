"""How a script reaches Redis: by ``EVALSHA`` (its text cached by SHA on each node) or as a function
of one Redis Functions library (``FCALL``, Redis >= 7), chosen once per process at start-up.

Both kinds of script object offer one interface (``Script``), so the route (shared/route.py,
``Partitions.call``) never asks which: called with ``keys=, args=, client=``, ``command`` for a raw
command tuple, ``queue`` on a redis-py pipeline, and ``load`` for a node that does not know it
(``missing``: NOSCRIPT for a script, "Function not found" for a function: a restarted node without
persistence, a node new to the cluster). ``load_key`` names what ``load`` loads, so a route loads it
once per node.

The library (``Library``) is every script of shared.scripts.SCRIPTS in one Lua library, its name and
its functions' names carrying its version (a hash of its code: ``agentmill_<v>``, ``commit_<v>``), so
processes of two deploys on one Redis each call their own code, as they each did by SHA. At start-up
(``prepare``) a process loads its library on every master where it is missing (Functions replicate,
and persist in RDB/AOF, so a promoted replica has them) and deletes the libraries of other versions:
a process of another deploy still running meets "Function not found" and loads its own again.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
from collections.abc import Iterable, Sequence
from typing import Any, Protocol

from redis.commands.core import AsyncScript
from redis.exceptions import NoScriptError, ResponseError

__all__ = [
    "LIBRARY_PREFIX",
    "MIN_VERSION",
    "EvalScript",
    "FunctionScript",
    "Library",
    "Script",
    "chosen",
    "each_with_reload",
    "missing",
    "prepare",
    "use_functions",
]

log = logging.getLogger(__name__)

LIBRARY_PREFIX = "agentmill_"
NO_CONTEXT = "NOCONTEXT the library does not know"  # a function's answer to a context token it was not told (prelude.lua)
FIXED_KEYS = 8  # the partition's fixed keys ending a framed call's KEYS (shared.script_sending.Framing)
MIN_VERSION = (7, 0)  # FUNCTION LOAD / FCALL
_chosen: bool | None = None  # what start-up chose for this process (mode auto); None: not yet


class Script(Protocol):
    """A script on one Redis node, whichever way it is run."""

    @property
    def load_key(self) -> str: ...

    def command(self, keys: Sequence[Any], args: Sequence[Any]) -> tuple[Any, ...]: ...

    def queue(self, pipe: Any, keys: Sequence[Any], args: Sequence[Any]) -> None: ...

    async def load(self, client: Any) -> None: ...

    async def __call__(
        self, keys: Sequence[Any] | None = None, args: Iterable[Any] | None = None, client: Any = None
    ) -> Any: ...


def missing(exc: BaseException) -> bool:
    """Did a node refuse a call because it does not know the script or the function?"""
    if isinstance(exc, NoScriptError):
        return True
    if not isinstance(exc, ResponseError):
        return False
    text = str(exc)  # a pipeline's annotated error carries the reply's text
    return (
        "Function not found" in text
        or "NOSCRIPT" in text
        or "No matching script" in text
        or NO_CONTEXT in text
    )


class EvalScript(AsyncScript):
    """A script run by EVALSHA (redis-py's, which loads it on NOSCRIPT when called)."""

    def __init__(self, registered_client: Any, script: str) -> None:
        self.registered_client = registered_client
        self.script = script
        self.sha = hashlib.sha1(script.encode()).hexdigest()  # what Redis names it (UTF-8, as sent)

    @property
    def load_key(self) -> str:
        return self.sha

    def command(self, keys: Sequence[Any], args: Sequence[Any]) -> tuple[Any, ...]:
        return ("EVALSHA", self.sha, len(keys), *keys, *args)

    def queue(self, pipe: Any, keys: Sequence[Any], args: Sequence[Any]) -> None:
        pipe.scripts.add(self)  # the pipeline loads it before it sends, as ``await script(client=pipe)``
        pipe.evalsha(self.sha, len(keys), *keys, *args)

    async def load(self, client: Any) -> None:
        await client.script_load(self.script)


class Library:
    """One version of the function library: its name (``agentmill_<version>``) and Lua code."""

    def __init__(self, version: str, code: str) -> None:
        self.version = version
        self.name = LIBRARY_PREFIX + version
        self.code = code

    async def load(self, client: Any) -> None:
        """Load this library on ``client``'s node, unless it is there: its name carries its version,
        so a library of that name is this code (Redis answers before compiling it again)."""
        try:
            await client.execute_command("FUNCTION", "LOAD", self.code)
        except ResponseError as exc:
            if "already exists" not in str(exc):
                raise

    async def tell_contexts(self, client: Any) -> None:
        """``client``'s node told the context tokens of this process (prelude.lua's register_contexts)."""
        argv = CONTEXTS.argv()
        if not argv:  # nothing to tell: the library itself
            await self.load(client)
            return
        await client.execute_command("FCALL", f"contexts_{self.version}", 0, *argv)

    async def ensure(self, client: Any) -> list[str]:
        """This library loaded on ``client``'s node (only when missing), the other versions deleted;
        the names of those deleted."""
        listed = await client.execute_command("FUNCTION", "LIST", "LIBRARYNAME", LIBRARY_PREFIX + "*")
        names = [_text(_field(lib, "library_name")) for lib in listed or []]
        others = [n for n in names if n.startswith(LIBRARY_PREFIX) and n != self.name]
        if self.name not in names:
            await self.load(client)
        for name in others:
            with contextlib.suppress(ResponseError):  # deleted meanwhile by another process starting
                await client.execute_command("FUNCTION", "DELETE", name)
        return others


class _Contexts:
    """The contexts this process frames calls with, each under its tokens (with Functions, a call on a
    partition sends a token in place of the context, some 500 bytes that Lua would hash byte by byte,
    and without the partition's eight fixed keys when it has keys of its own: prelude.lua keeps them
    per token once told, ``FunctionScript.load``). Bounded: the oldest forgotten past ``MAX`` (a
    token it forgot is made again, the same, from its context at its next call)."""

    MAX = 256  # one per partition and settings: a process has a handful

    def __init__(self) -> None:
        self.of: dict[str, tuple[str, str]] = {}  # context -> (token with its fixed keys, token without)
        self.told: dict[str, tuple[str, str, str, tuple[Any, ...]]] = {}  # token without -> all of it

    def tokens(self, context: str, keys: Sequence[Any]) -> tuple[str, str]:
        got = self.of.get(context)
        if got is None:
            digest = hashlib.sha1(context.encode()).hexdigest()[:16]
            got = (f"ctk:{digest}", f"ctx:{digest}")
            if len(self.of) >= self.MAX:
                oldest = next(iter(self.of))
                self.told.pop(self.of.pop(oldest)[1], None)
            self.of[context] = got
            self.told[got[1]] = (*got, context, tuple(keys[-FIXED_KEYS:]))
        return got

    def argv(self) -> list[Any]:
        """register_contexts' arguments: per context its tokens, the context, its fixed keys."""
        return [x for tok_k, tok, context, fixed in self.told.values() for x in (tok_k, tok, context, *fixed)]


CONTEXTS = _Contexts()


def know_context(context: str, keys: Sequence[Any]) -> None:
    """Keep ``context``'s tokens (its partition's fixed keys ending ``keys``), to be told to a node
    with the others the first time it answers NOCONTEXT (shared.script_sending.Framing)."""
    CONTEXTS.tokens(context, keys)


class FunctionScript:
    """One function of a ``Library``: FCALL, the library loaded again where the node lacks it. A
    script on a partition (``framed``: called as shared.script_sending.Framing frames it) sends its
    context's token instead of the context, and not the fixed keys when it has keys of its own (a
    call with no key of its own still names a key of its slot, so a cluster redirects it)."""

    def __init__(self, registered_client: Any, library: Library, script: str, framed: bool = False) -> None:
        self.registered_client = registered_client
        self.library = library
        self.name = f"{script}_{library.version}"
        self.framed = framed

    @property
    def load_key(self) -> str:
        return self.library.name

    def command(self, keys: Sequence[Any], args: Sequence[Any]) -> tuple[Any, ...]:
        if not self.framed or len(args[-1]) < 64:
            return ("FCALL", self.name, len(keys), *keys, *args)
        with_keys, without = CONTEXTS.tokens(args[-1], keys)
        n = len(keys) - FIXED_KEYS
        if n > 0:
            return ("FCALL", self.name, n, *keys[:n], *args[:-1], without)
        return ("FCALL", self.name, len(keys), *keys, *args[:-1], with_keys)

    def queue(self, pipe: Any, keys: Sequence[Any], args: Sequence[Any]) -> None:
        pipe.execute_command(*self.command(keys, args))

    async def load(self, client: Any) -> None:
        """The library on ``client``'s node, told this process's context tokens (loaded first when
        the node lacks it)."""
        if not self.framed:
            await self.library.load(client)
            return
        try:
            await self.library.tell_contexts(client)
        except ResponseError as exc:
            if not missing(exc):
                raise
            await self.library.load(client)
            await self.library.tell_contexts(client)

    async def __call__(
        self, keys: Sequence[Any] | None = None, args: Iterable[Any] | None = None, client: Any = None
    ) -> Any:
        command = self.command(list(keys or ()), list(args or ()))
        client = self.registered_client if client is None else client
        try:  # on a pipeline: queued, and a missing library is that command's error reply
            return await client.execute_command(*command)
        except ResponseError as exc:
            if not missing(exc):
                raise
        await self.load(client)
        return await client.execute_command(*command)


def chosen() -> bool | None:
    """What start-up chose for this process (None: it has not chosen)."""
    return _chosen


def use_functions(mode: str) -> bool:
    """AGENTMILL_REDIS_FUNCTIONS: on, off, or auto (what start-up chose; Functions until it has)."""
    if mode == "on":
        return True
    if mode == "off":
        return False
    return True if _chosen is None else _chosen


async def server_version(client: Any) -> tuple[int, ...]:
    info = await client.info("server")
    return tuple(int(x) for x in str(info["redis_version"]).split(".")[:2])


async def prepare(clients: Sequence[Any], mode: str, library: Library) -> bool:
    """Start-up: choose Functions or EVALSHA for this process (``mode`` auto: Functions when every
    master is Redis >= 7) and, with Functions, ``library`` on every master. Returns the choice.
    ``mode`` on against an older Redis raises RuntimeError."""
    global _chosen
    if mode == "off":
        return False
    versions = [await server_version(c) for c in clients]
    old = [v for v in versions if v < MIN_VERSION]
    if old:
        if mode == "on":
            raise RuntimeError(
                "AGENTMILL_REDIS_FUNCTIONS=on, but a Redis master is version "
                f"{'.'.join(map(str, old[0]))} (Functions need 7.0): set it to auto or off"
            )
        _chosen = False
        log.info("Redis %s: scripts by EVALSHA", ".".join(map(str, old[0])))
        return False
    for c in clients:
        deleted = await library.ensure(c)
        if deleted:
            log.info("function libraries of other versions deleted: %s", ", ".join(deleted))
    if mode == "auto":
        _chosen = True
    return True


async def each_with_reload(parts: Any, script: Script, queue: Any, *, deadline_s: float = 30.0) -> list[Any]:
    """``Partitions.each(queue)`` for commands of ``script``; once more after loading it on every
    master where a node did not know it (a fresh or restarted node)."""
    try:
        return list(await parts.each(queue, deadline_s=deadline_s))
    except ResponseError as exc:
        if not missing(exc):
            raise
        for client in parts.topology.clients():
            await script.load(client)
        return list(await parts.each(queue, deadline_s=deadline_s))


def _field(entry: Any, name: str) -> Any:
    """A field of a FUNCTION LIST entry (a flat list under RESP2, a dict under RESP3)."""
    if isinstance(entry, dict):
        return entry.get(name, entry.get(name.encode()))
    items = list(entry)
    for i in range(0, len(items) - 1, 2):
        if _text(items[i]) == name:
            return items[i + 1]
    return None


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
