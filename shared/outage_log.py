"""A Redis outage in a process's log: one line when it begins, one when it ends with its length,
nothing in between, however many calls fail meanwhile (the worker and the API, through
shared/redis_watch.py; their loops ask ``active`` to keep their own failures out of the log)."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

__all__ = ["OutageLog", "shown_url"]


def shown_url(url: str) -> str:
    """``url`` as a log line may show it: its password (``user:secret@``) masked."""
    scheme, sep, rest = url.rpartition("://")
    userinfo, at, host = rest.rpartition("@")
    if not at:
        return url
    user, colon, _ = userinfo.partition(":")
    return f"{scheme}{sep}{user}{':***' if colon else ''}@{host}"


class OutageLog:
    def __init__(self, log: logging.Logger, url: str, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.log = log
        self.url = shown_url(url)
        self.clock = clock
        self.since: float | None = None  # when the outage began (clock), None while Redis answers
        self.reason = ""

    @property
    def active(self) -> bool:
        return self.since is not None

    def unreachable(self, reason: str) -> None:
        """A probe failed: the first of an outage is logged."""
        self.reason = reason
        if self.since is None:
            self.since = self.clock()
            self.log.warning("redis unreachable at %s: %s", self.url, reason)

    def reachable(self) -> None:
        """A probe succeeded: the end of an outage is logged with its length."""
        if self.since is not None:
            self.log.info("redis reachable again after %.1f s", self.clock() - self.since)
            self.since = None
            self.reason = ""
