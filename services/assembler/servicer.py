"""AssemblerService over gRPC: converts protos to calls on the Assembler and back."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import grpc
import structlog

from parity.api.assembler.v1 import assembler_service_pb2 as pb
from parity.api.assembler.v1 import assembler_service_pb2_grpc as pb_grpc
from parity.api.assembler.v1 import batch_pb2, trajectory_pb2
from parity.api.common.v1 import llm_call_pb2
from parity.core.tokens import token_count
from parity.services.assembler import trajectory_views
from parity.services.assembler.assembler import Assembler
from parity.services.assembler.batch_feed import BatchFeed, Subscription
from parity.services.assembler.batches import Batch
from parity.services.assembler.samples import history_mode
from parity.services.assembler.trajectory_views import AssembledTrajectory
from parity.services.runtime.errors import InvalidArgument, ParityError


def batch_to_proto(batch: Batch) -> batch_pb2.Batch:
    stats = batch.stats
    return batch_pb2.Batch(
        batch_id=batch.batch_id,
        sequence=batch.sequence,
        samples=batch.samples,
        group_ids=batch.group_ids,
        redelivered=batch.redelivered,
        dropped_group_ids=batch.dropped_group_ids,
        stats=batch_pb2.BatchStats(
            sample_count=stats.sample_count,
            group_count=stats.group_count,
            merged_call_count=stats.merged_call_count,
            split_count=stats.split_count,
            token_count=stats.token_count,
            loss_token_fraction=stats.loss_token_fraction,
            truncated_count=stats.truncated_count,
            filtered_counts=stats.filtered_counts,
            reward_mean=stats.reward_mean,
            reward_std=stats.reward_std,
            unique_token_count=stats.unique_token_count,
            split_reasons=stats.split_reasons,
            capped_episode_count=stats.capped_episode_count,
            thread_count=stats.thread_count,
            threads_per_session=stats.threads_per_session,
            max_thread_repetition=stats.max_thread_repetition,
            threads_ended_at_limit=stats.threads_ended_at_limit,
        ),
    )


def trajectory_to_proto(assembled: AssembledTrajectory) -> trajectory_pb2.Trajectory:
    trajectory = assembled.trajectory
    threads = {
        call_id: (s.thread_index, s.thread_id)
        for s in assembled.built.samples
        for call_id in s.call_ids
    }
    steps = []
    for index, call in enumerate(trajectory.calls):
        prompt_tokens = token_count(call.prompt_token_ids) or call.usage.prompt_tokens
        completion_tokens = (
            sum(token_count(c.token_ids) for c in call.choices) or call.usage.completion_tokens
        )
        thread_index, thread_id = threads.get(call.call_id, (0, ""))
        steps.append(trajectory_pb2.Step(
            call_id=call.call_id, step_index=index, prompt_token_count=prompt_tokens,
            completion_token_count=completion_tokens, reward=trajectory.step_rewards.get(index, 0.0),
            has_reward=index in trajectory.step_rewards,
            thread_index=thread_index, thread_id=thread_id,
        ))  # fmt: skip
    return trajectory_pb2.Trajectory(
        session_id=trajectory.session_id,
        trajectory_name=trajectory.name,
        episode_id=assembled.episode_id,
        group_id=assembled.group_id,
        state=assembled.state,
        steps=steps,
        reward=trajectory.reward,
        has_reward=trajectory.has_reward,
        rewards=trajectory.rewards,
        samples=assembled.samples,
        filter_reason=assembled.filter_reason,
        split_count=assembled.split_count,
        outcome=assembled.outcome,
        split_reasons=assembled.split_reasons,
        token_count=assembled.token_count,
        unique_token_count=assembled.unique_token_count,
        merged_call_count=assembled.merged_call_count,
        thread_count=assembled.built.threads,
        history_mode=history_mode(trajectory.calls[0].history_mode)
        if trajectory.calls
        else llm_call_pb2.HISTORY_MODE_UNSPECIFIED,
    )


_CAPPED_EPISODES = {
    pb.CAPPED_EPISODES_UNSPECIFIED: "drop", pb.CAPPED_EPISODES_DROP: "drop",
    pb.CAPPED_EPISODES_ZERO_REWARD: "zero_reward", pb.CAPPED_EPISODES_KEEP_REWARD: "keep_reward",
}  # fmt: skip


class AssemblerServicer(pb_grpc.AssemblerServiceServicer):
    def __init__(self, assembler: Assembler) -> None:
        self.assembler = assembler

    async def ReportReward(
        self, request: pb.ReportRewardRequest, context: grpc.aio.ServicerContext
    ) -> pb.ReportRewardResponse:
        return pb.ReportRewardResponse(
            reward_id=await self.assembler.tracker.report_reward(request.reward)
        )

    async def CloseSession(
        self, request: pb.CloseSessionRequest, context: grpc.aio.ServicerContext
    ) -> pb.CloseSessionResponse:
        structlog.contextvars.bind_contextvars(session_id=request.session_id)
        if request.capped_episodes not in _CAPPED_EPISODES:
            raise InvalidArgument(
                f"capped_episodes {request.capped_episodes} is not a CappedEpisodes value"
            )
        session = await self.assembler.tracker.close_session(
            request.session_id, request.outcome, request.error_message,
            reward=request.reward if request.HasField("reward") else None,
            group_id=request.group_id, episode_id=request.episode_id, group_size=request.group_size,
            validation=request.validation, run_id=request.run_id,
            capped_episodes=_CAPPED_EPISODES[request.capped_episodes], teacher_scored=request.teacher_scored,
            from_store=request.from_store,
        )  # fmt: skip
        return pb.CloseSessionResponse(session=session)

    async def GetTrajectory(
        self, request: pb.GetTrajectoryRequest, context: grpc.aio.ServicerContext
    ) -> pb.GetTrajectoryResponse:
        structlog.contextvars.bind_contextvars(session_id=request.session_id)
        assembled = await trajectory_views.get_trajectory(
            self.assembler.tracker,
            request.session_id,
            request.trajectory_name,
            request.view == pb.TRAJECTORY_VIEW_FULL,
        )
        return pb.GetTrajectoryResponse(trajectory=trajectory_to_proto(assembled))

    async def ListTrajectories(
        self, request: pb.ListTrajectoriesRequest, context: grpc.aio.ServicerContext
    ) -> pb.ListTrajectoriesResponse:
        trajectories, token = await trajectory_views.list_trajectories(
            self.assembler.tracker, session_id=request.session_id, group_id=request.group_id, state=request.state,
            page_size=request.page_size, page_token=request.page_token,
            with_samples=request.view == pb.TRAJECTORY_VIEW_FULL,
        )  # fmt: skip
        return pb.ListTrajectoriesResponse(
            trajectories=[trajectory_to_proto(t) for t in trajectories], next_page_token=token
        )

    async def StreamBatches(
        self,
        request_iterator: AsyncIterator[pb.StreamBatchesRequest],
        context: grpc.aio.ServicerContext,
    ) -> AsyncIterator[pb.StreamBatchesResponse]:
        first = await anext(aiter(request_iterator), None)
        if first is None or first.WhichOneof("message") != "subscribe":
            raise InvalidArgument("the first StreamBatches message must be a subscribe")
        subscribe = first.subscribe
        structlog.contextvars.bind_contextvars(consumer_id=subscribe.consumer_id)
        feed = await self.assembler.subscribe(Subscription(
            subscribe.consumer_id, subscribe.groups_per_batch, subscribe.max_unacked_batches or 1,
            subscribe.policy_version if subscribe.HasField("policy_version") else None,
            subscribe.max_policy_lag if subscribe.HasField("max_policy_lag") else None,
            subscribe.run_id,
        ))  # fmt: skip
        acks = asyncio.create_task(_forward_acks(request_iterator, feed))
        try:
            while True:
                yield pb.StreamBatchesResponse(batch=batch_to_proto(await feed.next_batch()))
        finally:
            acks.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await acks
            feed.close()

    async def ReleaseBatch(
        self, request: pb.ReleaseBatchRequest, context: grpc.aio.ServicerContext
    ) -> pb.ReleaseBatchResponse:
        return pb.ReleaseBatchResponse(
            pending_group_count=self.assembler.former.release(request.run_id)
        )

    async def GetStats(
        self, request: pb.GetStatsRequest, context: grpc.aio.ServicerContext
    ) -> pb.GetStatsResponse:
        stats = self.assembler.stats
        return pb.GetStatsResponse(
            closed_session_count=stats.closed_sessions,
            pending_group_count=self.assembler.tracker.pending_group_count(request.run_id),
            delivered_batch_count=stats.delivered_batches,
            acknowledged_batch_count=stats.acknowledged_batches,
            delivered_sample_count=stats.delivered_samples,
            filtered_counts=dict(stats.filtered_of(request.run_id)),
            error_counts=dict(stats.errors),
            validation_session_count=stats.validation_sessions,
        )


async def _forward_acks(
    request_iterator: AsyncIterator[pb.StreamBatchesRequest], feed: BatchFeed
) -> None:
    """Hand each acknowledgement to the feed; the first bad message ends the stream."""
    try:
        async for request in request_iterator:
            if request.WhichOneof("message") != "ack":
                raise InvalidArgument("after the subscribe, StreamBatches messages must be acks")
            ack = request.ack
            await feed.acknowledge(
                ack.batch_id, ack.policy_version if ack.HasField("policy_version") else None
            )
    except ParityError as error:
        feed.fail(error)
    except grpc.aio.AioRpcError:
        # The client went away; the response side ends with it.
        return
