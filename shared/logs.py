"""Logging: plain or JSON lines; every line about a run carries runId, sessionId, attempt and worker id.

The runner sets the run context in contextvars, so one run can be followed across workers.
Secrets never reach a log record: nothing here formats settings or headers.
"""

from __future__ import annotations

import contextvars
import logging
import sys
import time
from typing import Any

import orjson

__all__ = ["JsonFormatter", "PlainFormatter", "configure", "process_context", "run_context"]

run_context: contextvars.ContextVar[dict[str, Any] | None] = contextvars.ContextVar(
    "agentmill_run", default=None
)
process_context: dict[str, Any] = {}


class _ContextFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        ctx = run_context.get() or {}
        for k, v in {**process_context, **ctx}.items():
            setattr(record, k, v)
        record.ctx = {**process_context, **ctx}
        return True


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "ts": round(record.created, 3),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
            **getattr(record, "ctx", {}),
        }
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        return orjson.dumps(out, default=str).decode()


class PlainFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        ctx = getattr(record, "ctx", {})
        tail = " ".join(f"{k}={v}" for k, v in ctx.items() if k != "workerId")
        base = f"{time.strftime('%H:%M:%S', time.localtime(record.created))} {record.levelname[0]} {record.name}: {record.getMessage()}"
        text = f"{base} [{tail}]" if tail else base
        if record.exc_info:
            text += "\n" + self.formatException(record.exc_info)
        return text


def configure(*, json_lines: bool = False, level: str = "INFO", **process: Any) -> None:
    process_context.update({k: v for k, v in process.items() if v is not None})
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if json_lines else PlainFormatter())
    handler.addFilter(_ContextFilter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    logging.getLogger("arq").setLevel(logging.WARNING if level.upper() == "INFO" else level.upper())
    logging.getLogger("httpx").setLevel(logging.WARNING)
