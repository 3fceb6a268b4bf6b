"""Unit tests of the one retry primitive (``aiostream_kafka.retry``), no broker: the
back-off's growth, cap and jitter; what is retried and what propagates at once; the
deadline (the attempt in progress and the hook cut by it, the timeout naming and chaining
the last error); cancellation. Millisecond values: the file runs in well under 2 s."""

from __future__ import annotations

import asyncio
import random
import time

import pytest

from aiostream_kafka.errors import (
    KafkaError,
    KafkaTimeoutError,
    NetworkError,
    TLSHandshakeError,
)
from aiostream_kafka.group.coordinator import GroupConfig
from aiostream_kafka.group.offsets import GroupOffsets
from aiostream_kafka.protocol import error_codes as ec
from aiostream_kafka.retry import Backoff, is_retriable, retry_until
from aiostream_kafka.structs import TopicPartition


class Attempts:
    """An attempt that raises the scripted errors in turn, then returns ``"done"``."""

    def __init__(self, *errors: Exception, hang: bool = False) -> None:
        self.errors = list(errors)
        self.hang = hang  # after the errors: never return
        self.calls = 0
        self.at: list[float] = []

    async def __call__(self) -> str:
        self.calls += 1
        self.at.append(time.monotonic())
        if self.errors:
            raise self.errors.pop(0)
        if self.hang:
            await asyncio.sleep(3600)
        return "done"


def fixed(s: float) -> Backoff:
    return Backoff(s, s, jitter=0.0)


# -- the back-off --------------------------------------------------------------------------


def test_backoff_doubles_up_to_the_cap_and_starts_over_after_reset() -> None:
    backoff = Backoff(0.01, 0.05, jitter=0.0)
    assert [backoff.next_delay() for _ in range(5)] == pytest.approx([0.01, 0.02, 0.04, 0.05, 0.05])
    backoff.reset()
    assert backoff.next_delay() == pytest.approx(0.01)


def test_backoff_of_a_config_is_retry_backoff_ms_up_to_retry_backoff_max_ms() -> None:
    backoff = Backoff.of(GroupConfig("g", retry_backoff_ms=20, retry_backoff_max_ms=70))
    assert (backoff.initial_s, backoff.max_s, backoff.jitter) == (0.02, 0.07, 0.2)


def test_jitter_stays_within_20_percent_and_never_passes_the_cap() -> None:
    rng = random.Random(27)
    firsts = [Backoff(0.1, 1.0, rng=rng).next_delay() for _ in range(2000)]
    assert all(0.08 <= d <= 0.12 for d in firsts)
    assert min(firsts) < 0.082 and max(firsts) > 0.118  # really spread over the band
    capped = Backoff(0.1, 0.1, rng=rng)
    at_cap = [capped.next_delay() for _ in range(2000)]
    assert all(0.08 <= d <= 0.1 for d in at_cap)
    # Reproducible with the same seed.
    again = [Backoff(0.1, 1.0, rng=random.Random(27)).next_delay() for _ in range(1)]
    assert again == firsts[:1]


def test_default_classification() -> None:
    assert is_retriable(NetworkError("lost"))
    assert is_retriable(KafkaTimeoutError("slow"))
    assert is_retriable(ec.NotCoordinatorError("moved"))
    assert is_retriable(TLSHandshakeError("x"))  # a NetworkError, as every loop had it
    assert not is_retriable(ec.TopicAuthorizationFailedError("no"))
    assert not is_retriable(KafkaError("plain"))
    assert not is_retriable(ValueError("bug"))


# -- retry_until ---------------------------------------------------------------------------


async def test_retries_retriable_errors_then_returns_the_result() -> None:
    attempt = Attempts(NetworkError("a"), ec.NotCoordinatorError("b"))
    seen: list[Exception] = []

    async def between(error: Exception) -> None:
        seen.append(error)

    got = await retry_until(
        "x", attempt, deadline=time.monotonic() + 1, backoff=fixed(0.001), between=between
    )
    assert got == "done" and attempt.calls == 3
    assert [type(e) for e in seen] == [NetworkError, ec.NotCoordinatorError]


async def test_waits_grow_between_attempts() -> None:
    attempt = Attempts(*(NetworkError(str(i)) for i in range(4)))
    await retry_until("x", attempt, deadline=None, backoff=Backoff(0.005, 1.0, jitter=0.0))
    gaps = [b - a for a, b in zip(attempt.at, attempt.at[1:], strict=False)]
    for gap, wait in zip(gaps, [0.005, 0.01, 0.02, 0.04], strict=True):
        assert wait - 0.001 <= gap < wait + 0.03


@pytest.mark.parametrize("error", [ValueError("bug"), ec.TopicAuthorizationFailedError("no")])
async def test_a_non_retriable_error_propagates_at_once_without_waiting(error: Exception) -> None:
    attempt = Attempts(error)
    called: list[Exception] = []

    async def between(exc: Exception) -> None:
        called.append(exc)

    started = time.monotonic()
    with pytest.raises(type(error)) as info:
        await retry_until(
            "x", attempt, deadline=time.monotonic() + 5, backoff=fixed(1.0), between=between
        )
    assert info.value is error
    assert attempt.calls == 1 and not called
    assert time.monotonic() - started < 0.2  # a wait of the back-off would take 1 s


async def test_the_classifier_decides_what_is_retried() -> None:
    with pytest.raises(NetworkError):  # retriable by default, not for this call
        await retry_until(
            "x",
            Attempts(NetworkError("lost")),
            deadline=None,
            backoff=fixed(0.001),
            retriable=lambda e: isinstance(e, ec.NotCoordinatorError),
        )
    attempt = Attempts(KeyError("soon"))
    assert (
        await retry_until(
            "x",
            attempt,
            deadline=None,
            backoff=fixed(0.001),
            retriable=lambda e: isinstance(e, KeyError),
        )
        == "done"
    )


async def test_the_timeout_names_what_the_limit_and_the_last_error_and_chains_it() -> None:
    errors = [NetworkError(f"lost #{i}") for i in range(1000)]
    attempt = Attempts(*errors)
    started = time.monotonic()
    with pytest.raises(KafkaTimeoutError) as info:
        await retry_until(
            "create_topics",
            attempt,
            deadline=time.monotonic() + 0.06,
            limit="60 ms",
            backoff=fixed(0.005),
        )
    assert time.monotonic() - started < 0.2
    last = errors[attempt.calls - 1]
    assert str(info.value) == (
        f"create_topics did not succeed within 60 ms; last error: NetworkError: {last}"
    )
    assert info.value.__cause__ is last


async def test_a_wait_that_would_end_past_the_deadline_ends_at_it_and_nothing_follows() -> None:
    attempt = Attempts(NetworkError("lost"))
    started = time.monotonic()
    with pytest.raises(KafkaTimeoutError, match="last error: NetworkError: lost"):
        await retry_until(
            "x", attempt, deadline=time.monotonic() + 0.05, backoff=fixed(1.0),
        )  # fmt: skip
    # Given up at the deadline: not a back-off early, not a back-off late.
    assert 0.045 < time.monotonic() - started < 0.2
    assert attempt.calls == 1


async def test_the_attempt_in_progress_is_cut_at_the_deadline() -> None:
    started = time.monotonic()
    with pytest.raises(KafkaTimeoutError) as info:
        await retry_until(
            "x", Attempts(hang=True), deadline=time.monotonic() + 0.05, limit="50 ms",
            backoff=fixed(0.001),
        )  # fmt: skip
    assert 0.04 < time.monotonic() - started < 0.3
    assert str(info.value) == "x did not succeed within 50 ms; the first attempt had not finished"
    assert info.value.__cause__ is None

    # After a retriable error, the hanging attempt's timeout names that error.
    lost = NetworkError("lost")
    with pytest.raises(KafkaTimeoutError, match="last error: NetworkError: lost") as info:
        await retry_until(
            "x", Attempts(lost, hang=True), deadline=time.monotonic() + 0.05,
            backoff=fixed(0.001),
        )  # fmt: skip
    assert info.value.__cause__ is lost


async def test_the_hook_runs_under_the_deadline_too() -> None:
    async def slow_refresh(error: Exception) -> None:
        await asyncio.sleep(3600)

    started = time.monotonic()
    with pytest.raises(KafkaTimeoutError, match="last error: NetworkError: lost"):
        await retry_until(
            "x", Attempts(NetworkError("lost")), deadline=time.monotonic() + 0.05,
            backoff=fixed(0.001), between=slow_refresh,
        )  # fmt: skip
    assert time.monotonic() - started < 0.3


async def test_the_attempts_own_timeout_error_is_not_taken_for_the_deadline() -> None:
    async def attempt() -> None:
        async with asyncio.timeout(0.001):
            await asyncio.sleep(1)

    with pytest.raises(TimeoutError) as info:
        await retry_until("x", attempt, deadline=time.monotonic() + 5, backoff=fixed(0.001))
    assert not isinstance(info.value, KafkaTimeoutError)


async def test_the_hook_can_stop_the_retries_or_choose_the_wait() -> None:
    class Fatal(Exception):
        pass

    async def stop(error: Exception) -> None:
        raise Fatal from error

    attempt = Attempts(NetworkError("a"), NetworkError("b"))
    with pytest.raises(Fatal):
        await retry_until("x", attempt, deadline=None, backoff=fixed(0.001), between=stop)
    assert attempt.calls == 1

    async def short(error: Exception) -> float:
        return 0.001  # instead of the back-off's 1 s

    attempt = Attempts(ec.ConcurrentTransactionsError("busy"))
    started = time.monotonic()
    await retry_until("x", attempt, deadline=None, backoff=Backoff(1.0, 1.0), between=short)
    assert time.monotonic() - started < 0.2 and attempt.calls == 2


async def test_give_up_chooses_the_error_raised_at_the_deadline() -> None:
    def unknown(timeout: KafkaTimeoutError) -> Exception:
        return ec.UnknownTopicOrPartitionError(f"topic 't' not there: {timeout}")

    with pytest.raises(ec.UnknownTopicOrPartitionError, match="last error: KeyError") as info:
        await retry_until(
            "x", Attempts(KeyError("t")), deadline=time.monotonic() + 0.02,
            backoff=fixed(0.05), retriable=lambda e: isinstance(e, KeyError), give_up=unknown,
        )  # fmt: skip
    assert isinstance(info.value.__cause__, KafkaTimeoutError)
    assert isinstance(info.value.__cause__.__cause__, KeyError)


async def test_cancellation_during_the_wait_propagates_and_nothing_follows() -> None:
    attempt = Attempts(*(NetworkError("lost") for _ in range(10)))
    task = asyncio.create_task(
        retry_until("x", attempt, deadline=time.monotonic() + 5, backoff=fixed(0.05))
    )
    await asyncio.sleep(0.01)  # the first attempt failed; the task waits 50 ms
    assert attempt.calls == 1
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await asyncio.sleep(0.08)  # past the wait it was in: no other attempt
    assert task.cancelled() and attempt.calls == 1


async def test_cancellation_of_the_attempt_is_not_taken_for_the_deadline() -> None:
    attempt = Attempts(hang=True)
    task = asyncio.create_task(
        retry_until("x", attempt, deadline=time.monotonic() + 5, backoff=fixed(0.001))
    )
    await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert task.cancelled() and attempt.calls == 1


# -- a converted site ----------------------------------------------------------------------


class FakeMember:
    generation = 1
    member_id = "m"
    owned = frozenset({TopicPartition("t", 0)})

    def __init__(self) -> None:
        self.lost: list[object] = []

    def final_error(self) -> KafkaError | None:
        return None

    async def coordinator_node(self) -> int:
        raise ec.CoordinatorNotAvailableError(f"no coordinator (look-up {len(self.lost) + 1})")

    def coordinator_lost(self, why: object) -> None:
        self.lost.append(why)

    def request_rejoin(self, reason: str) -> None:
        pass


async def test_group_commit_forgets_the_coordinator_and_its_timeout_names_the_last_error() -> None:
    from aiostream_kafka.admin.types import OffsetAndMetadata

    member = FakeMember()
    config = GroupConfig(
        "g", default_api_timeout_ms=60, retry_backoff_ms=5, retry_backoff_max_ms=10
    )
    offsets = GroupOffsets(None, config, member)  # type: ignore[arg-type]
    with pytest.raises(KafkaTimeoutError) as info:
        await offsets.commit({TopicPartition("t", 0): OffsetAndMetadata(5)})
    assert len(member.lost) >= 2  # forgotten after every failed attempt
    assert str(info.value).startswith("group 'g': commit did not succeed within 60 ms; ")
    assert f"last error: CoordinatorNotAvailableError: {member.lost[-1]}" in str(info.value)
    assert info.value.__cause__ is member.lost[-1]
