"""A blob transfer that takes longer than `retry.max_elapsed` is still retried or resumed after a reset: the
budget bounds time spent failing and waiting, not time spent moving bytes. A cross-border layer of a few
hundred MB at about 1 MB/s takes the whole default budget (300 s) to send; a reset near its end failed the image
where the chunked upload should have resumed.

Here the budget is 1 s and each transfer takes several seconds of clear progress before its reset, so the
outcome does not hang on how fast a loaded machine runs."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from mirror.demo.localregistry import LocalRegistry, start_registry
from mirror.demo.sample import MiB
from mirror.registry.retry import RetryPolicy, retry_step
from tests.faultproxy import Fault, FaultProxy
from tests.support import blob_exists, cdn_server
from tests.test_faults import BIG_IMAGE, CHUNKED, large_image, layer_requests, sync, upload_uuid

BUDGET = {"attempts": 3, "base_delay": 0.05, "max_delay": 0.1, "max_elapsed": 1.0}
STALL = 1.5  # seconds each of the first chunks waits for its answer: three of them are 4.5 s, the budget 1 s
TRICKLE = 2.5  # seconds the source's CDN takes to send a blob, in ten pieces


def test_a_chunked_upload_longer_than_the_retry_budget_resumes_after_a_reset(
    tmp_path: Path, source: LocalRegistry, target: LocalRegistry, target_proxy: FaultProxy
) -> None:
    """Three chunks confirmed, slowly; the fourth lost after 1 MiB. The session holds 6 MiB: the upload asks how
    much arrived and goes on from there, where it failed because sending the first three took over the budget."""
    size = 12 * MiB
    digest = large_image(source, size)
    lost = Fault("drop_request", method="PATCH", path=r"/blobs/uploads/", skip=3, after_bytes=MiB)
    slow = Fault("stall", method="PATCH", path=r"/blobs/uploads/", seconds=STALL, count=3)
    target_proxy.add(lost, slow)
    mark = len(target.access_log())

    assert sync(tmp_path, source, target_proxy, images=BIG_IMAGE, transfer=CHUNKED, retry=BUDGET) == 0

    assert (slow.applied, lost.applied) == (3, 1)
    asked = [e for e in layer_requests(target_proxy, "GET", digest) if e.status == 204]
    assert len(asked) == 1  # "how much arrived?", then on from the registry's offset
    assert target_proxy.request_bytes["PATCH"] == size  # no byte the registry held was sent again
    assert len([e for e in target_proxy.log if e.method == "POST"]) == 2  # config blob + layer: one session each
    patches = [e for e in target.access_log()[mark:] if e.method == "PATCH"]
    assert len(patches) == 6 and len({upload_uuid(e.path) for e in patches}) == 1  # six chunks, one session
    assert blob_exists(target, "mirrored/layer", digest)


def test_a_streamed_put_longer_than_the_retry_budget_is_sent_again_after_a_reset(
    tmp_path: Path, target: LocalRegistry, target_proxy: FaultProxy
) -> None:
    """One PUT streamed from a source whose CDN trickles the layer for 2.5 s, reset near its end: the bytes were
    moving all along, so the blob is sent again in a new session rather than failing the image."""
    with cdn_server(tmp_path / "source" / "data", delay=TRICKLE) as cdn:
        source = start_registry(tmp_path / "source", redirect_to=cdn.url)
        try:
            size = 6 * MiB
            digest = large_image(source, size)
            finishing = re.escape(digest.replace(":", "%3A"))
            reset = Fault("reset_request", method="PUT", path=finishing, after_bytes=5 * MiB)
            target_proxy.add(reset)

            assert sync(tmp_path, source, target_proxy, images=BIG_IMAGE, retry=BUDGET) == 0
        finally:
            source.stop()

    assert reset.applied == 1
    assert [e.status for e in layer_requests(target_proxy, "PUT", digest)] == [0, 201]  # reset, then sent whole
    assert cdn.requests >= 3  # the config once, the layer twice
    assert blob_exists(target, "mirrored/layer", digest)


def test_a_chunked_upload_reset_more_often_than_the_attempts_goes_on_while_each_resume_gets_further(
    tmp_path: Path, source: LocalRegistry, target: LocalRegistry, target_proxy: FaultProxy
) -> None:
    """A link that resets every second chunk: five resets against three attempts. Each resume gets the registry
    to confirm one more chunk, so none of them counts against the attempts; the upload failed at the third."""
    size = 12 * MiB  # six chunks of 2 MiB
    digest = large_image(source, size)
    # the 2nd, 4th, 6th, 8th and 10th PATCH sent is dropped after 1 MiB: each fault counts the PATCHes the ones
    # before it let through
    resets = [
        Fault("drop_request", method="PATCH", path=r"/blobs/uploads/", skip=n, after_bytes=MiB) for n in range(1, 6)
    ]
    target_proxy.add(*resets)

    assert sync(tmp_path, source, target_proxy, images=BIG_IMAGE, transfer=CHUNKED, retry=BUDGET) == 0

    assert [fault.applied for fault in resets] == [1, 1, 1, 1, 1]
    asked = [e for e in layer_requests(target_proxy, "GET", digest) if e.status == 204]
    assert len(asked) == 5  # "how much arrived?" after each reset, then on from there
    assert target_proxy.request_bytes["PATCH"] == size  # every chunk reached the registry once
    patches = [e for e in target.access_log() if e.method == "PATCH"]
    assert len(patches) == 6 and len({upload_uuid(e.path) for e in patches}) == 1  # one session throughout
    assert blob_exists(target, "mirrored/layer", digest)


def test_a_chunked_upload_whose_resumes_get_no_further_is_still_bounded_by_the_attempts(
    tmp_path: Path, source: LocalRegistry, target: LocalRegistry, target_proxy: FaultProxy
) -> None:
    """Every PATCH after the first chunk is dropped: the first try, which got a chunk confirmed, is free; the
    resumes confirm nothing more, so three attempts are all they get, and the image fails rather than retrying
    for ever."""
    digest = large_image(source, 12 * MiB)
    stuck = Fault("drop_request", method="PATCH", path=r"/blobs/uploads/", skip=1, count=100, after_bytes=MiB)
    target_proxy.add(stuck)

    assert sync(tmp_path, source, target_proxy, images=BIG_IMAGE, transfer=CHUNKED, retry=BUDGET) == 1

    assert stuck.applied == 1 + BUDGET["attempts"]
    assert not blob_exists(target, "mirrored/layer", digest)


async def no_wait(delay: float) -> None:
    """The retries' sleep, taken at once: what is counted is the tries, not the time."""


async def test_an_attempt_that_secures_more_costs_no_attempt_and_one_that_secures_nothing_does() -> None:
    """Three attempts allowed: two failures that each secure more are free, then three that secure nothing
    end it, five tries in all; the mark that counts is the highest yet, not any change."""
    marks = iter([1, 2, 1, 2, 2, 2])  # after each failed try: higher, higher, lower, then level
    mark = [0]
    tries: list[int] = []

    async def step(attempt: int) -> None:
        tries.append(attempt)
        mark[0] = next(marks)
        raise TimeoutError("reset")

    policy = RetryPolicy(attempts=3, base_delay=0.0, max_delay=0.0, max_elapsed=60.0)
    with pytest.raises(TimeoutError):
        await retry_step(policy, step, lambda exc: True, "a step", no_wait, secured=lambda: mark[0])
    assert tries == [1, 2, 3, 4, 5]


class FakeClock:
    """Stands for the `time` module in registry/retry.py alone (the event loop keeps the real clock)."""

    def __init__(self) -> None:
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now


async def test_attempts_that_move_nothing_are_still_bounded_by_the_budget(monkeypatch: pytest.MonkeyPatch) -> None:
    """Progress restarts the clock; it does not lift the budget: after an attempt that moved nothing and took
    longer than `max_elapsed`, the step is not tried again."""
    clock = FakeClock()
    monkeypatch.setattr("mirror.registry.retry.time", clock)
    moved = [0]
    tries: list[int] = []

    async def step(attempt: int) -> None:
        tries.append(attempt)
        clock.now += 2.0  # each try takes twice the budget
        if attempt == 1:
            moved[0] += 1  # only the first moves bytes
        raise TimeoutError("reset")

    policy = RetryPolicy(attempts=5, base_delay=0.0, max_delay=0.0, max_elapsed=1.0)
    with pytest.raises(TimeoutError):
        await retry_step(policy, step, lambda exc: True, "a step", no_wait, progress=lambda: moved[0])
    assert tries == [1, 2]
