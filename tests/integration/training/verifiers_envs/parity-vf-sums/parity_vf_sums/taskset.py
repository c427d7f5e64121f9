"""Sums of two small numbers: one question, one reply, 1.0 when the reply's last number is the sum, and a little
for a short reply (a shaping reward: it is what makes a random test model's rewards vary)."""

import random
import re

import verifiers.v1 as vf


class SumsData(vf.TaskData):
    answer: int


class SumsTask(vf.Task[SumsData]):
    @vf.reward(weight=1.0)
    async def correct(self, trace: vf.Trace) -> float:
        numbers = re.findall(r"-?\d+", trace.last_reply)
        return float(bool(numbers) and int(numbers[-1]) == self.data.answer)

    @vf.reward(weight=0.1)
    async def brief(self, trace: vf.Trace) -> float:
        return max(0.0, 1.0 - len(trace.last_reply) / 200)


class SumsConfig(vf.TasksetConfig):
    num_tasks: int = 100
    """How many tasks to build."""
    max_operand: int = 9
    """The largest number added."""
    seed: int = 0


class SumsTaskset(vf.Taskset[SumsTask, SumsConfig]):
    def load(self) -> list[SumsTask]:
        generator = random.Random(self.config.seed)
        tasks = []
        for _ in range(self.config.num_tasks):
            a, b = (generator.randint(0, self.config.max_operand) for _ in range(2))
            data = SumsData(prompt=f"What is {a} + {b}? Answer with the number.", answer=a + b)
            tasks.append(SumsTask(data, self.config.task))
        return tasks
