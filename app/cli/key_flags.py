"""``agentmill submit``'s flags for the caller's keys (RunInput.concurrency, .rate, .debounce), each
one string: ``KEY[=LIMIT]``, ``KEY=LIMIT/PERIOD_S``, ``KEY=PERIOD_MS``. A key may hold '=' itself:
the last one splits. The values are checked as any submission's are (422 naming the field)."""

from __future__ import annotations

from typing import Any

import click

__all__ = ["concurrency_flag", "debounce_flag", "rate_flag"]


def _split(value: str, flag: str, form: str) -> tuple[str, str]:
    key, sep, rest = value.rpartition("=")
    if not sep or not key or not rest:
        raise click.BadParameter(f"{value!r}: expected {form}", param_hint=flag)
    return key, rest


def _int(text: str, value: str, flag: str, form: str) -> int:
    if not text.isascii() or not text.isdigit():
        raise click.BadParameter(f"{value!r}: expected {form}", param_hint=flag)
    return int(text)


def concurrency_flag(value: str) -> dict[str, Any]:
    """``KEY`` (the tenant's quota gives the limit) or ``KEY=LIMIT``."""
    form = "KEY or KEY=LIMIT"
    key, sep, limit = value.rpartition("=")
    if not sep or not limit.isascii() or not limit.isdigit():  # no limit: all of it is the key
        return {"key": value}
    if not key:
        raise click.BadParameter(f"{value!r}: expected {form}", param_hint="--concurrency")
    return {"key": key, "limit": _int(limit, value, "--concurrency", form)}


def rate_flag(value: str) -> dict[str, Any]:
    """``KEY=LIMIT/PERIOD_S``: at most LIMIT starts of the key per PERIOD_S seconds."""
    form = "KEY=LIMIT/PERIOD_S (e.g. cust-9=10/60)"
    key, rest = _split(value, "--rate", form)
    limit, slash, period = rest.partition("/")
    if not slash:
        raise click.BadParameter(f"{value!r}: expected {form}", param_hint="--rate")
    return {
        "key": key,
        "limit": _int(limit, value, "--rate", form),
        "periodS": _int(period, value, "--rate", form),
    }


def debounce_flag(value: str) -> dict[str, Any]:
    """``KEY=PERIOD_MS``: the key's runs within the period replace the one waiting to start."""
    form = "KEY=PERIOD_MS (e.g. chat-42=2000)"
    key, period = _split(value, "--debounce", form)
    return {"key": key, "periodMs": _int(period, value, "--debounce", form)}
