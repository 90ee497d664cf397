"""The effect runner: ask the machine what to do, do it, commit, feed the outcome back.

- driver.py: ``RunDriver``, the loop — apply decisions, commit, start effects, feed results back
- opening.py: the first events of a job (a start, or a resume from the checkpoint)
- effect.py: ``EffectContext``, what an effect is given instead of the driver, and what it posts back
- effects.py: starting what the machine asks for (context, model and tool calls, timers, compaction)
- model_call.py: one model call — capacity, stream, coalesce deltas (``ModelStream``), the reply; summaries
- tool_call.py: one tool call — execute it, and report the result with its record
- run_ports.py: ``RunPorts``, the ports one run's driver is given
The driver reaches the world only through the ports it is given (worker/ports.py); effects only
through their context, and they report back only through the run's inbox.
"""

from worker.runner.driver import RunDriver
from worker.runner.run_ports import RunPorts

__all__ = ["RunDriver", "RunPorts"]
