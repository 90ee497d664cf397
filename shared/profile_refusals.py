"""What start-up says of a profile file it refuses (shared/profiles.py loads it), and of profiles
whose model calls would go out without their key: a line naming ``AGENTMILL_PROFILES`` and the
profile, for the entry points to print (shared/settings_errors.py, ``exit_on_refusal``)."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

if TYPE_CHECKING:
    from shared.profiles import AgentProfile

__all__ = ["PROFILES_ENV", "describe_profile_errors", "missing_keys"]

PROFILES_ENV = "AGENTMILL_PROFILES"


def describe_profile_errors(exc: ValidationError, data: Any) -> str:
    """The first errors of a profile file, each under the name of the profile it is in."""
    listed = data.get("profiles") if isinstance(data, dict) else None
    clauses = []
    for e in exc.errors(include_url=False)[:3]:
        loc = list(e["loc"])
        where = ".".join(str(x) for x in loc)
        if len(loc) >= 2 and loc[0] == "profiles" and isinstance(loc[1], int) and isinstance(listed, list):
            entry = listed[loc[1]] if loc[1] < len(listed) else None
            name = entry.get("name") if isinstance(entry, dict) else None
            rest = ".".join(str(x) for x in loc[2:])
            where = f"profile {name!r}" if name else f"profiles.{loc[1]}"
            where += f": {rest}" if rest else ""
        msg = str(e["msg"]).removeprefix("Value error, ")
        clauses.append(f"{where}: {msg}" if where else msg)
    more = len(exc.errors()) - len(clauses)
    return "; ".join(clauses) + (f" (and {more} more)" if more > 0 else "")


def missing_keys(profiles: dict[str, AgentProfile]) -> str | None:
    """Why these profiles' model calls would go out without their key, or None: an ``apiKeyEnv``
    naming a variable that is unset or empty, an ``apiKeyFile`` that cannot be read. Checked by
    the processes that call the providers (workers)."""
    for p in profiles.values():
        cfg = p.provider
        if cfg.api_key_env and not os.environ.get(cfg.api_key_env):
            return (
                f"{PROFILES_ENV}: profile {p.name!r}: provider.apiKeyEnv names {cfg.api_key_env}, "
                "which is not set in this process's environment"
            )
        if cfg.api_key_file and not os.access(cfg.api_key_file, os.R_OK):
            return (
                f"{PROFILES_ENV}: profile {p.name!r}: provider.apiKeyFile {cfg.api_key_file} cannot be read"
            )
    return None
