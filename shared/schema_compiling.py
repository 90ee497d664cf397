"""JSON Schemas from tenants and tool servers compiled away from the event loop: checked in a
process of its own, kept by a bounded thread.

Checking a schema (its bounds and the JSON Schema metaschema, shared/schema_validator.py ``checked``)
costs a few hundred milliseconds of Python for a schema at the size bound. On the loop that serves
every tenant, a tenant sending such schemas four at a time would hold everybody else's requests that
long; on a thread of the same process it would still take the interpreter's lock from the loop for
most of that time. So the check runs in one process apart (started at the first schema not cached,
``spawn``ed), and the thread only waits for it and keeps the result (``keep``): another tenant's
request waits for neither. Should that process fail, the thread checks the schema itself. A small
schema (below INLINE_BYTES), a millisecond or two to check, is checked on the thread at once: a
run bringing a client tool's parameters does not wait for the process apart to start (seconds of
CPU at its lower priority, longer on a busy machine).

``await compile_all(schemas)`` returns once each is in the validator's cache (compiled, or its
refusal kept), so that the synchronous ``compiled(schema)`` that follows answers from the cache. A
schema already cached costs its hash and nothing else, and a run with no schema does not touch the
thread at all. At most MAX_PENDING calls wait for the thread in one process; past that,
SchemaQueueFullError (the API answers 429). A check that takes more than CHECK_TIMEOUT_S is refused
(bound ``steps``) and its process replaced.

The process apart runs APART_NICE below the process that starts it (on Linux): its start, about a
second of CPU importing what the process's main module imports, and every check after are a tenant's
schemas' cost, and take the CPU the API's and workers' loops leave rather than a share beside them.
A thread of its own starts it, at that priority (a Linux thread's nice value is its own, and a
process it starts inherits it); the start has its own timeout, START_TIMEOUT_S, apart from a check's.
It exits once its parent is gone (``_exit_with_parent``): killed, the parent cannot stop it, and it
would wait on its queue for ever.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import multiprocessing
import os
import sys
import threading
import time
from collections.abc import Iterable
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import Any

import orjson

from agentmill_client.models import RunInput
from shared.schema_validator import checked, is_cached, keep

__all__ = ["MAX_PENDING", "SchemaQueueFullError", "compile_all", "run_schemas"]

MAX_PENDING = 64  # calls waiting for the thread, all tenants together
CHECK_TIMEOUT_S = 10.0  # one schema's check in the process apart (a bounded schema takes < 1 s)
START_TIMEOUT_S = 120.0  # the process apart's start, at its lower priority on a busy machine
APART_NICE = 10  # the process apart's nice value above its parent's (the module's docstring)
PARENT_POLL_S = 1.0  # how often the process apart looks for its parent
# A schema smaller than this (as JSON) is checked on the thread: a millisecond or two of the
# interpreter (a client tool's parameters, typically), where the process apart would first have to
# start (seconds at its priority on a busy machine) and then answer.
INLINE_BYTES = 512

log = logging.getLogger("agentmill.schemas")
_pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="schema-compile")
_process: ProcessPoolExecutor | None = None  # started at the first schema not cached
_lock = threading.Lock()
_pending = 0  # jobs given to the thread and not done (a caller cancelled meanwhile still counts)


class SchemaQueueFullError(Exception):
    """MAX_PENDING calls already wait for schemas to be compiled in this process."""


def run_schemas(run: RunInput) -> list[tuple[str, Any]]:
    """The JSON Schemas a run brings, with the field each is in (clientTools' parameters, its
    responseFormat's schema)."""
    schemas: list[tuple[str, Any]] = [
        (f"clientTools.{i}.parameters", t.parameters) for i, t in enumerate(run.client_tools or ())
    ]
    if run.response_format is not None and run.response_format.json_schema is not None:
        schemas.append(("responseFormat.jsonSchema.schema", run.response_format.json_schema.schema_))
    return schemas


def _apart() -> ProcessPoolExecutor:
    """The process apart, started now when there is none (RuntimeError when it cannot be)."""
    global _process
    if _process is None:
        started: list[ProcessPoolExecutor] = []
        starter = threading.Thread(target=_start_apart, args=(started,), name="schema-apart-start")
        starter.start()
        starter.join()
        if not started:
            raise RuntimeError("the process that checks schemas did not start")
        _process = started[0]
    return _process


def _start_apart(started: list[ProcessPoolExecutor]) -> None:
    """On a thread of its own, lowered by APART_NICE (Linux): the process apart, started by it and
    so at its priority, once it answers."""
    if sys.platform.startswith("linux"):
        me = threading.get_native_id()
        with contextlib.suppress(OSError):  # PRIO_PROCESS with a thread's id: that thread alone
            os.setpriority(os.PRIO_PROCESS, me, min(19, os.getpriority(os.PRIO_PROCESS, me) + APART_NICE))
    pool = ProcessPoolExecutor(
        max_workers=1, mp_context=multiprocessing.get_context("spawn"), initializer=_exit_with_parent
    )
    try:
        pool.submit(int).result(timeout=START_TIMEOUT_S)
    except Exception as exc:
        log.warning("schemas: the process that checks schemas did not start (%r)", exc)
        for proc in list(pool._processes.values()):
            with contextlib.suppress(OSError):
                proc.kill()
        pool.shutdown(wait=False, cancel_futures=True)
        return
    started.append(pool)


def _replace_process() -> None:
    """The process apart stopped (killed: it may be stuck on a check); the next check starts another."""
    global _process
    gone, _process = _process, None
    if gone is not None:
        for proc in list(gone._processes.values()):
            with contextlib.suppress(OSError):
                proc.kill()
        with contextlib.suppress(Exception):
            gone.shutdown(wait=False, cancel_futures=True)


def _exit_with_parent() -> None:
    """In the process apart, at its start: a thread that ends it once the process that started it
    is gone (its parent is then another)."""
    parent = os.getppid()

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(PARENT_POLL_S)
        os._exit(0)

    threading.Thread(target=watch, name="parent-watch", daemon=True).start()


def _compile(schemas: list[Any]) -> None:
    """On the thread: each schema checked in the process apart (the thread waits, holding no lock
    the event loop needs), then kept; here when that process cannot be had, and when the schema is
    small (below INLINE_BYTES as JSON)."""
    for schema in schemas:
        if _small(schema):
            keep(schema, checked(schema))
            continue
        try:
            refusal = _apart().submit(checked, schema).result(timeout=CHECK_TIMEOUT_S)
        except TimeoutError:
            refusal = ("steps", f"checking the schema took more than {CHECK_TIMEOUT_S:g} s")
            _replace_process()
        except (BrokenProcessPool, OSError, RuntimeError) as exc:
            log.warning("schemas: the process that checks schemas failed (%r): checked on this thread", exc)
            _replace_process()
            refusal = checked(schema)
        keep(schema, refusal)


def _small(schema: Any) -> bool:
    try:
        return len(orjson.dumps(schema)) < INLINE_BYTES
    except orjson.JSONEncodeError:  # refused by its check (bound ``bytes``), at once
        return True


def _done(_: object) -> None:
    global _pending
    with _lock:
        _pending -= 1


async def compile_all(schemas: Iterable[Any]) -> None:
    """Each of ``schemas`` compiled (or refused) into the validator's cache, on the thread when any
    is not there yet; SchemaQueueFullError when MAX_PENDING jobs already wait for it."""
    global _pending
    todo = [s for s in schemas if not is_cached(s)]
    if not todo:
        return
    with _lock:
        if _pending >= MAX_PENDING:
            raise SchemaQueueFullError(f"{MAX_PENDING} schema compilations are waiting already")
        _pending += 1
    job = _pool.submit(_compile, todo)
    job.add_done_callback(_done)
    await asyncio.wrap_future(job)
