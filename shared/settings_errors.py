"""Settings the environment holds and the model refuses: one line naming each as it is set, and the
entry points' answer to them (that line on stderr, exit code 2), whichever command read them."""

from __future__ import annotations

import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager

from pydantic import ValidationError
from pydantic.fields import FieldInfo

__all__ = ["SettingsError", "describe", "exit_on_refusal"]


class SettingsError(ValueError):
    """The environment's settings, refused: one line per setting, named as it is set."""


def describe(exc: ValidationError, fields: Mapping[str, FieldInfo]) -> str:
    """``exc`` of the settings model whose ``fields`` these are, a clause per refused setting."""
    lines = []
    for e in exc.errors(include_url=False):
        field = str(e["loc"][0]) if e["loc"] else ""
        info = fields.get(field)
        alias = info.validation_alias if info is not None else field if field.isupper() else None
        msg = str(e["msg"]).removeprefix("Value error, ")
        if not field:  # the model's own rule (two settings together): its message names them
            lines.append(msg)
            continue
        name = alias if isinstance(alias, str) else f"AGENTMILL_{field.upper()}"
        lines.append(f"{name}: {msg} (got {_shown(e['input'])!r})")
    return "invalid settings: " + "; ".join(lines)


def _shown(value: object) -> object:
    """A refused value as the line shows it: a URL's password (``user:secret@host``) masked."""
    if isinstance(value, str) and "@" in value:
        head, _, tail = value.rpartition("@")
        scheme, sep, userinfo = head.rpartition("//")
        user, colon, _ = userinfo.partition(":")
        return f"{scheme}{sep}{user}{colon}{'***' if colon else ''}@{tail}"
    return value


@contextmanager
def exit_on_refusal(prog: str) -> Iterator[None]:
    """Around an entry point: settings it reads that the environment got wrong end it with their
    line on stderr and exit code 2, not a traceback."""
    try:
        yield
    except SettingsError as exc:
        print(f"{prog}: {exc}", file=sys.stderr)
        sys.exit(2)
