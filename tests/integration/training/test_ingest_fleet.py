"""Scale-out proof: three ingests behind one port, two real vLLM replicas, the PostgreSQL store.

`parity.train` runs agents spread over the ingests; mid-step one ingest is SIGKILLed and
started again on its ports. No call an agent got an answer for is lost or stored twice,
every call carries the policy version of the weights that produced it, and every closed
session is assembled with all its calls.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from openai.types.chat import ChatCompletionMessageParam

import parity
from parity.api.assembler.v1 import assembler_service_pb2 as assembler_pb
from parity.api.common.v1 import llm_call_pb2, session_pb2
from parity.api.ingest.v1 import ingest_service_pb2 as ingest_pb
from parity.api.store.v1 import store_service_pb2 as store_pb
from parity.clients import AssemblerClient, IngestClient, RPCError, StoreClient
from parity.services.inference.vllm_launcher import VllmServer
from parity.training import StackAddresses
from tests.conftest import free_port
from tests.integration.openai_api import sampled_logprobs
from tests.integration.service_fixtures import RunningService, ServiceLauncher
from tests.integration.stack_fixtures import start_ingest
from tests.integration.training.train_api.agents import word_start_share
from tests.integration.vllm_fixtures import serving_model

pytestmark = [pytest.mark.vllm, pytest.mark.slow, pytest.mark.timeout(900)]

STEPS = 5
KILLED_AFTER_VERSION = 2
TASKS = [{"id": f"t{n}", "prompt": prompt} for n, prompt in enumerate(
    ["Tell me about your day.", "Describe the sea.", "What do you like?", "Say something kind."])]  # fmt: skip


@dataclass
class Attempts:
    """Every request the agents sent, by the nonce each carried in its `user` field."""

    answered: list[str] = field(default_factory=list)
    unanswered: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)


ATTEMPTS = Attempts()


async def answered(
    client: openai.AsyncOpenAI, task: dict[str, Any], messages: list[ChatCompletionMessageParam]
) -> Any:
    """An answer, asking again with a fresh nonce when the ingest holding the connection dies under it."""
    for _ in range(20):
        nonce = uuid.uuid4().hex
        try:
            reply = await client.chat.completions.create(
                model=task["model"], messages=messages, max_tokens=task["max_tokens"],
                temperature=task["temperature"], logprobs=True, user=nonce,
            )  # fmt: skip
        except (openai.APIConnectionError, openai.InternalServerError):
            with ATTEMPTS.lock:
                ATTEMPTS.unanswered.append(nonce)
            await asyncio.sleep(0.1)
            continue
        with ATTEMPTS.lock:
            ATTEMPTS.answered.append(nonce)
        return reply
    raise AssertionError("no ingest answered in 20 attempts")


async def two_turn_agent(task: dict[str, Any]) -> float:
    client = parity.get_async_chat_client(max_retries=0)
    messages: list[ChatCompletionMessageParam] = [{"role": "user", "content": task["prompt"]}]
    shares = []
    for follow_up in ("Say more.", None):
        reply = await answered(client, task, messages)
        shares.append(
            word_start_share([entry.token for entry in sampled_logprobs(reply.choices[0])])
        )
        if follow_up:
            messages += [{"role": "assistant", "content": reply.choices[0].message.content},
                         {"role": "user", "content": follow_up}]  # fmt: skip
    return sum(shares) / len(shares)


@pytest.fixture(scope="module")
def two_replicas(
    training_vllm: VllmServer, tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[list[VllmServer]]:
    """The session's training vLLM and one more: the run's first sync puts its weights on both."""
    with serving_model(tiny_model_dir, tmp_path_factory, served_model_name="tiny") as second:
        yield [training_vllm, second]


@dataclass
class Fleet:
    """Ingests sharing one HTTP port and their store, each with its own gRPC port and spool."""

    launcher: ServiceLauncher
    store_address: str
    upstreams: str
    http_port: int
    ports: list[int]
    spool_dir: Path
    ingests: list[RunningService] = field(default_factory=list)

    @property
    def peers(self) -> str:
        return ",".join(f"127.0.0.1:{port}" for port in self.ports)

    def start(self, index: int) -> RunningService:
        ingest, _ = start_ingest(self.launcher, self.store_address, self.upstreams, self.spool_dir / f"spool-{index}.db",
                                 "--http-reuse-port", "--peers", self.peers, port=self.ports[index],
                                 http_port=self.http_port)  # fmt: skip
        if index < len(self.ingests):
            self.ingests[index] = ingest
        else:
            self.ingests.append(ingest)
        return ingest

    def restart(self, index: int) -> RunningService:
        """Kill ingest `index` with SIGKILL and start it again on the same ports and spool."""
        victim = self.ingests[index]
        victim.process.send_signal(signal.SIGKILL)
        victim.process.wait()
        return self.start(index)


def stats(ingest: RunningService) -> ingest_pb.GetStatsResponse:
    return IngestClient(ingest.address, retries=0).get_stats(ingest_pb.GetStatsRequest())


def kill_mid_step(fleet: Fleet, index: int, done: threading.Event, report: dict[str, Any]) -> None:
    """Once training is past KILLED_AFTER_VERSION, SIGKILL ingest `index` while it has requests in flight,
    and start it again."""
    victim = fleet.ingests[index]
    while not done.is_set():
        try:
            seen = stats(victim)
        except RPCError:
            continue
        if seen.policy_version >= KILLED_AFTER_VERSION and not seen.paused and seen.in_flight > 0:
            report["killed_at_version"], report["in_flight"] = seen.policy_version, seen.in_flight
            report["killed_at"] = time.time()
            restarted = report["restarted"] = fleet.restart(index)
            # Before any sync could set it: the version it starts at is the one it stamps until the next.
            report["restarted_version"] = stats(restarted).policy_version
            return
        time.sleep(0.005)


def answers_on_the_shared_port(ingest: RunningService, http_port: int, model: str) -> bool:
    """Whether `ingest` takes a share of new agents' connections to the port the fleet shares: each request on a
    connection of its own, for the kernel to hand to any of the fleet's listeners (SO_REUSEPORT)."""
    served = stats(ingest).request_count
    for attempt in range(
        60
    ):  # a third of the connections each: 60 all going elsewhere is a chance of 3e-11
        with httpx.Client(timeout=60) as client:
            reply = client.post(f"http://127.0.0.1:{http_port}/sessions/probe-{attempt}/v1/chat/completions",
                                json={"model": model, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 1})  # fmt: skip
        assert reply.status_code == 200, reply.text
        if stats(ingest).request_count > served:
            return True
    return False


def synced_windows(trainer_log: str) -> list[tuple[float, float, int]]:
    """(start, end, version) of every weight sync the trainer logged: ingests paused through each."""
    windows = []
    for line in trainer_log.splitlines():
        with contextlib.suppress(ValueError):
            record = json.loads(line)
            if record.get("event") == "weights_synced":
                end = datetime.fromisoformat(record["timestamp"].replace("Z", "+00:00")).timestamp()
                windows.append((end - record["total_s"], end, record["policy_version"]))
    return windows


def test_three_ingests_train_through_a_killed_and_restarted_ingest_without_losing_a_call(
    module_services: ServiceLauncher,
    two_replicas: list[VllmServer],
    fresh_postgres_url: str,
    tmp_path: Path,
) -> None:
    launcher = module_services
    upstreams = ",".join(server.base_url for server in two_replicas)
    store = launcher.start("store", "--url", fresh_postgres_url, "--shutdown-grace-s", "0.5")
    assembler = launcher.start("assembler", "--store-address", store.address, "--group-idle-s", "5",
                               "--shutdown-grace-s", "0.5")  # fmt: skip
    fleet = Fleet(
        launcher, store.address, upstreams, free_port(), [free_port() for _ in range(3)], tmp_path
    )
    for n in range(3):
        fleet.start(n)
    http_port = fleet.http_port
    trainer = launcher.start(
        "trainer", "--assembler-address", assembler.address, "--ingest-address", fleet.peers, "--replicas", upstreams,
        "--work-dir", str(tmp_path / "trainer"), "--shutdown-grace-s", "1",
    )  # fmt: skip

    done, report = threading.Event(), dict[str, Any]()
    killer = threading.Thread(target=kill_mid_step, args=(fleet, 1, done, report), daemon=True)
    killer.start()
    try:
        result = parity.train(
            two_turn_agent, TASKS, model=two_replicas[0].config.model_path,
            stack=StackAddresses(f"http://127.0.0.1:{http_port}", assembler.address, trainer.address, store.address),
            steps=STEPS, groups_per_batch=2, rollouts_per_task=4, max_tokens=8, learning_rate=3e-3,
            output_dir=str(tmp_path / "runs"), progress=False,
        )  # fmt: skip
    finally:
        done.set()
        killer.join(60)
    assert result.state == "completed", result.error
    assert result.steps == STEPS
    assert "restarted" in report, (
        "the ingest was never caught with requests in flight after the second sync"
    )
    assert ATTEMPTS.unanswered, "the kill broke no agent's request"
    assert report["restarted_version"] >= report["killed_at_version"]

    # Agents were spread over all three ingests (the killed one had requests in flight), and the restarted one
    # takes its share of new connections: the run's last steps may have made too few of them to show it.
    survivors = [ingest for ingest in fleet.ingests if ingest is not report["restarted"]]
    assert len(survivors) == 2 and all(stats(ingest).request_count > 0 for ingest in survivors)
    assert report["in_flight"] > 0
    assert answers_on_the_shared_port(report["restarted"], http_port, two_replicas[0].model_name)

    # Every answered request is in the store exactly once; an unanswered one at most once.
    store_client = StoreClient(store.address)
    sessions = store_client.list_sessions(
        store_pb.ListSessionsRequest(session_id_prefix=result.run_id, page_size=1000)).sessions  # fmt: skip
    calls: list[llm_call_pb2.LlmCall] = []
    for session in sessions:
        calls += store_client.list_calls(
            store_pb.ListCallsRequest(session_id=session.session_id, view=store_pb.CALL_VIEW_FULL, page_size=1000)
        ).calls  # fmt: skip
    by_nonce: dict[str, list[llm_call_pb2.LlmCall]] = {}
    for call in calls:
        by_nonce.setdefault(json.loads(call.request_json)["user"], []).append(call)
    assert {nonce: len(by_nonce.get(nonce, [])) for nonce in ATTEMPTS.answered} == dict.fromkeys(
        ATTEMPTS.answered, 1
    )
    assert all(
        call.outcome == llm_call_pb2.CALL_OUTCOME_SUCCEEDED
        for n in ATTEMPTS.answered
        for call in by_nonce[n]
    )
    assert all(len(by_nonce.get(nonce, [])) <= 1 for nonce in ATTEMPTS.unanswered)
    assert set(by_nonce) <= set(ATTEMPTS.answered) | set(ATTEMPTS.unanswered)

    # Each call's version is one the replicas served while it ran: none before the last sync that ended
    # before it started, none after the last sync that began before it ended.
    windows = synced_windows(trainer.log())
    assert [version for _, _, version in windows] == list(range(STEPS + 1))
    for call in calls:
        started, ended = (
            call.timings.start_time.ToNanoseconds() / 1e9,
            call.timings.end_time.ToNanoseconds() / 1e9,
        )
        lowest = max((version for _, end, version in windows if end <= started), default=0)
        highest = max((version for start, _, version in windows if start <= ended), default=0)
        assert lowest <= call.policy_version <= highest, (
            call.call_id,
            started,
            call.policy_version,
            windows,
        )
    restarted_calls = [
        call
        for call in calls
        if call.timings.start_time.ToNanoseconds() / 1e9 > report["killed_at"]
    ]
    assert (
        restarted_calls
        and min(call.policy_version for call in restarted_calls) >= report["killed_at_version"]
    )

    # Every closed session was assembled, each with every call it holds.
    assembler_client = AssemblerClient(assembler.address)
    closed = [s for s in sessions if s.state == session_pb2.SESSION_STATE_CLOSED]
    assert len(closed) >= STEPS * 2 * 4
    for session in closed:
        trajectories = assembler_client.list_trajectories(assembler_pb.ListTrajectoriesRequest(
            session_id=session.session_id, view=assembler_pb.TRAJECTORY_VIEW_FULL)).trajectories  # fmt: skip
        sampled = {
            call_id for t in trajectories for sample in t.samples for call_id in sample.call_ids
        }
        held = {call.call_id for call in calls if call.session_id == session.session_id
                and call.outcome == llm_call_pb2.CALL_OUTCOME_SUCCEEDED}  # fmt: skip
        assert sampled == held, session.session_id
