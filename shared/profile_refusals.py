"""What start-up says of a profile file it refuses (shared/profiles.py loads it): a line naming
``AGENTMILL_PROFILES`` and the profile, for the entry points to print (shared/settings_errors.py,
``exit_on_refusal``)."""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

__all__ = ["PROFILES_ENV", "describe_profile_errors"]

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
