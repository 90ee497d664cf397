"""How many due jobs a worker's claim takes, how many of the jobs it claimed start in one
event-loop turn, and how long the runs it started go first (worker/process/arq_worker.py)."""

from __future__ import annotations

__all__ = ["FIRST_STEP_TURNS", "IDLE_RIDES", "RIDE_JOBS", "START_CHUNK", "claim_size"]

# A poll claims up to four batches (claim_size); the runs it starts take their first steps (their
# driver built, their first commit framed) in the loop turn after their task is made. 256 of them
# made one turn of 25-60 ms, during which no timer of any run fired (bench figure 4's loop lag):
# they start this many a turn.
START_CHUNK = 32

# A worker that has just started the runs of a claim and goes back to waiting for a signal lets
# them go first for this many turns of its event loop: a one-step run reaches its ending commit
# within them, and the next wait's call (its claim framed, its BLPOP sent: 0.2-0.4 ms of the loop)
# no longer lands between the run's start and that commit (bench/latency_timeline.py). A signal
# that comes meanwhile stays on the wake list: the wait then takes it at once.
FIRST_STEP_TURNS = 16

# The most jobs a claim riding behind a wait takes (worker/process/woken_claims.py): enough for the
# jobs a signal usually announces; a burst is claimed by the polls after it, as a full claim's queue
# is. A worker paused (or cut off) just after it sent its wait holds at most these until it resumes
# or its lease runs out.
RIDE_JOBS = 8

# An idle worker's waits carry a claim for this many waits in a row that took nothing (a second or
# so at the default poll delay); after that its waits carry none, and it polls by counting the queue
# every IDLE_POLLS poll intervals: a pool with no work issues a count a poll (2 commands with its
# wait), not a claim script's 6. The first claim that takes a job brings the rides back, so a pool
# that was idle for longer pays one claim's round trip on its first run.
IDLE_RIDES = 8


def claim_size(room: int, due: int, batch: int, workers: int = 2) -> int:
    """How many of ``due`` jobs one poll claims with ``room`` free slots: up to ``batch``, or half
    of what is due (at most half the room, at most four batches) when that is more, so that other
    workers find the other half. A worker alone (``workers`` live, itself included) shares with no
    one: it takes what is due, up to its room and four batches. The jobs a poll claims take their
    first steps in one event-loop turn: four batches keep that turn short."""
    share = due if workers <= 1 else min(due // 2, room // 2)
    return max(0, min(room, max(batch, min(share, 4 * batch))))
