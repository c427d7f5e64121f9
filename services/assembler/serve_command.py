"""How `parity assembler serve` runs the AssemblerService."""

from __future__ import annotations

import json
from dataclasses import dataclass

from parity.api.assembler.v1 import assembler_service_pb2, assembler_service_pb2_grpc
from parity.core.settings_fields import setting
from parity.services.assembler.assembler import Assembler
from parity.services.assembler.filters import THREAD_ADVANTAGES, FilterSettings
from parity.services.assembler.llm_judge import DEFAULT_INSTRUCTIONS, JudgeSettings, LlmJudge
from parity.services.assembler.prefix_merge import DEFAULT_MAX_OPEN_THREADS
from parity.services.assembler.reward_function import RewardFunction
from parity.services.assembler.rollout_tracker import AssemblySettings
from parity.services.assembler.samples import OVERLONG_POLICIES, LengthLimit
from parity.services.assembler.scoring import Scorer
from parity.services.assembler.servicer import AssemblerServicer
from parity.services.assembler.store_client import StoreClient
from parity.services.runtime.config import ServerConfig
from parity.services.runtime.errors import InvalidArgument
from parity.services.runtime.server import ServiceBinding
from parity.services.runtime.service_definition import ServiceDefinition

FULL_NAME = assembler_service_pb2.DESCRIPTOR.services_by_name["AssemblerService"].full_name
DEFAULT_PORT = 50053


@dataclass
class AssemblerConfig(ServerConfig):
    port: int = setting(DEFAULT_PORT, "gRPC port; 0 picks a free one")
    store_address: str = setting("127.0.0.1:50051", "the token store's gRPC address")
    store_retry_s: float = setting(
        30.0, "how long a store call is retried while the store is unavailable"
    )
    group_size: int = setting(
        0, "episodes per group when CloseSession gives no group_size; 0 waits for --group-idle-s"
    )
    group_idle_s: float = setting(
        30.0, "a group short of its size is batched this long after its last rollout closed"
    )
    drop_failed_rollouts: bool = setting(
        True, "never train on rollouts that failed, timed out or were cancelled"
    )
    drop_unrewarded: bool = setting(True, "never train on trajectories that no reward scores")
    drop_zero_variance_groups: bool = setting(
        True, "drop groups of 2+ trajectories whose returns are all equal"
    )
    max_sample_tokens: int = setting(0, "longest sample in tokens; 0 means no limit")
    overlong: str = setting(
        "truncate", "what happens to a sample over --max-sample-tokens", OVERLONG_POLICIES
    )
    max_open_threads: int = setting(
        DEFAULT_MAX_OPEN_THREADS,
        "sequences a trajectory keeps open while its calls are merged (an agent's subagent "
        "threads, forks); past it the least recently extended one ends",
    )
    thread_advantage: str = setting(
        "episode",
        "which group a named thread's samples are compared in: the episode's group, or per role (the "
        "thread's name across the group's episodes)",
        THREAD_ADVANTAGES,
    )
    max_policy_lag: int = setting(
        -1,
        "policy versions a sample may lag the trainer, for subscriptions that set none; -1 disables",
    )
    reward_function: str = setting(
        "", "reward function as package.module:function, called with (metadata, messages)"
    )
    reward_timeout_s: float = setting(30.0, "seconds a reward function call may take")
    judge_model: str = setting(
        "", "LiteLLM model of an LLM judge, e.g. openai/gpt-4o-mini or hosted_vllm/NAME"
    )
    judge_api_base: str = setting(
        "", "the judge provider's base URL, e.g. http://127.0.0.1:8100/v1"
    )
    judge_api_key_env: str = setting(
        "", "environment variable that holds the judge provider's API key"
    )
    judge_instructions: str = setting(
        "", "system prompt of the judge (default: score 0 to 1, the number only)"
    )
    judge_max_tokens: int = setting(16, "longest judge reply in tokens")
    judge_extra_body: str = setting(
        "", "JSON object of provider-specific request fields for the judge"
    )
    judge_concurrency: int = setting(8, "judge requests in flight at most")

    def __post_init__(self) -> None:
        super().__post_init__()
        if not self.store_address:
            raise InvalidArgument("store_address is required")
        if self.store_retry_s < 0 or self.group_idle_s < 0 or self.reward_timeout_s <= 0:
            raise InvalidArgument(
                "store_retry_s and group_idle_s must be >= 0, reward_timeout_s > 0"
            )
        if self.group_size < 0 or self.max_sample_tokens < 0 or self.max_policy_lag < -1:
            raise InvalidArgument(
                "group_size and max_sample_tokens must be >= 0, max_policy_lag >= -1"
            )
        if self.overlong not in OVERLONG_POLICIES:
            raise InvalidArgument(
                f"overlong must be one of {OVERLONG_POLICIES}, got {self.overlong!r}"
            )
        if self.max_open_threads < 1:
            raise InvalidArgument(f"max_open_threads must be >= 1, got {self.max_open_threads}")
        if self.thread_advantage not in THREAD_ADVANTAGES:
            raise InvalidArgument(
                f"thread_advantage must be one of {THREAD_ADVANTAGES}, got {self.thread_advantage!r}"
            )
        if self.judge_max_tokens < 1 or self.judge_concurrency < 1:
            raise InvalidArgument("judge_max_tokens and judge_concurrency must be >= 1")
        if self.judge_extra_body:
            try:
                extra = json.loads(self.judge_extra_body)
            except json.JSONDecodeError as error:
                raise InvalidArgument(f"judge_extra_body is not JSON: {error}") from None
            if not isinstance(extra, dict):
                raise InvalidArgument("judge_extra_body must be a JSON object")

    def assembly_settings(self) -> AssemblySettings:
        return AssemblySettings(
            group_size=self.group_size,
            group_idle_s=self.group_idle_s,
            filters=FilterSettings(
                drop_failed_rollouts=self.drop_failed_rollouts,
                drop_unrewarded=self.drop_unrewarded,
                drop_zero_variance_groups=self.drop_zero_variance_groups,
                length=LengthLimit(self.max_sample_tokens, self.overlong),
                max_open_threads=self.max_open_threads,
                thread_advantage=self.thread_advantage,
            ),
            max_policy_lag=None if self.max_policy_lag < 0 else self.max_policy_lag,
        )

    def scorers(self) -> list[Scorer]:
        """The reward function and the judge, loaded now so a bad one stops the service at start."""
        scorers: list[Scorer] = []
        if self.reward_function:
            scorers.append(RewardFunction(self.reward_function, self.reward_timeout_s))
        if self.judge_model:
            scorers.append(LlmJudge(JudgeSettings(
                model=self.judge_model, api_base=self.judge_api_base, api_key_env=self.judge_api_key_env,
                instructions=self.judge_instructions or DEFAULT_INSTRUCTIONS, max_tokens=self.judge_max_tokens,
                extra_body=json.loads(self.judge_extra_body) if self.judge_extra_body else {},
                concurrency=self.judge_concurrency,
            )))  # fmt: skip
        return scorers


def build_bindings(config: AssemblerConfig) -> list[ServiceBinding]:
    scorers = config.scorers()
    holder: dict[str, Assembler] = {}

    async def start() -> None:
        # The gRPC channel binds to the running loop, so the client is made here.
        store = StoreClient(
            config.store_address,
            retry_s=config.store_retry_s,
            max_message_bytes=config.max_message_bytes,
        )
        holder["assembler"] = Assembler(store, config.assembly_settings(), scorers)
        await holder["assembler"].start()

    async def stop() -> None:
        await holder["assembler"].stop()

    def add(server: object) -> None:
        assembler_service_pb2_grpc.add_AssemblerServiceServicer_to_server(
            AssemblerServicer(holder["assembler"]), server
        )

    return [ServiceBinding(FULL_NAME, add, on_start=start, on_stop=stop)]


DEFINITION = ServiceDefinition(
    name="assembler",
    description="Serve the trajectory assembler (samples and training batches).",
    config_cls=AssemblerConfig,
    build_bindings=build_bindings,
)
