"""The agent engine: runs an agent function over a dataset of tasks, n rollouts each.

results = parity.engine.run(solve, tasks, rollouts_per_task=4, concurrency=16)
"""

from parity.engine.runner import AgentEngine, EngineConfig, RolloutResult, run

__all__ = ["AgentEngine", "EngineConfig", "RolloutResult", "run"]
