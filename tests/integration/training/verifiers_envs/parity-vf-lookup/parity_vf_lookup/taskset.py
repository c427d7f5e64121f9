"""Ask for a word's code: the model calls the lookup tool, reads its result and answers (two model calls); 1.0
when the answer holds the code, and a little for a short answer (a shaping reward)."""

import verifiers.v1 as vf

from parity_vf_lookup.codes import CODES
from parity_vf_lookup.tool import LookupToolset


class LookupData(vf.TaskData):
    word: str


class LookupTaskConfig(vf.TaskConfig):
    tools: vf.ToolsetConfig = vf.ToolsetConfig()


class LookupTask(vf.Task[LookupData, vf.State, LookupTaskConfig]):
    @classmethod
    def toolsets(cls, config: LookupTaskConfig) -> list[vf.Toolset]:
        return [LookupToolset(config.tools)]

    @vf.reward(weight=1.0)
    async def answered(self, trace: vf.Trace) -> float:
        return float(CODES[self.data.word] in trace.last_reply)

    @vf.reward(weight=0.1)
    async def brief(self, trace: vf.Trace) -> float:
        return max(0.0, 1.0 - len(trace.last_reply) / 200)


class LookupConfig(vf.TasksetConfig):
    task: LookupTaskConfig = LookupTaskConfig()


class LookupTaskset(vf.Taskset[LookupTask, LookupConfig]):
    def load(self) -> list[LookupTask]:
        return [
            LookupTask(
                LookupData(
                    prompt=f"What is the code of the word {word!r}? Use the lookup tool.", word=word
                ),
                self.config.task,
            )
            for word in CODES
        ]
