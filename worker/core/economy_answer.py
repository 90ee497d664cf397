"""What a run holds of its economy call (``EconomyPort.answer``, worker/ports.py)."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["EconomyAnswer"]


@dataclass(frozen=True, slots=True)
class EconomyAnswer:
    """What the run holds of its economy call: the batch's answer (JSON: ``{"body": …}`` or
    ``{"error": …}``) for that call, and whether the reconciler sent the call to the standard lane."""

    reply: bytes | None
    standard: bool
