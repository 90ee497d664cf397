"""The API as its processes serve it: producer.api's app, given what the producer does not hold
itself (a fork's state, rebuilt by the pure machine: app.forks)."""

from __future__ import annotations

from fastapi import FastAPI
from redis.asyncio import Redis

from app.forks import state_of
from producer.api import app as api_app
from shared.script_sending import Parts
from shared.settings import Settings

__all__ = ["create_app"]


def create_app(
    settings: Settings | None = None, *, redis: Redis | Parts | None = None, background: bool = True
) -> FastAPI:
    """``producer.api.app.create_app`` with the app layer's parts (same arguments)."""
    return api_app.create_app(settings, redis=redis, background=background, state_of=state_of)
