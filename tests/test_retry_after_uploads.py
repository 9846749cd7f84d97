"""A registry's `Retry-After` on an upload step (the POST that opens a session, a PATCH, a streamed PUT), which
the transport does not retry (`retry_step` restarts the step), is waited for as it is on a GET: the step goes
again no sooner than the registry asked, whatever the policy's own backoff; a wait past the policy's time
budget is not slept through, and the failure says why. Real registries behind the fault proxy; the gaps are
read from the proxy's log, with no timing margin: a 2 s wait against a policy whose backoff is 0.01 s."""

from __future__ import annotations

import email.utils
import re
import time
from pathlib import Path

import httpx
import pytest

from mirror.demo.localregistry import LocalRegistry
from mirror.demo.sample import MiB
from mirror.registry.errors import RegistryError, raise_for_response
from mirror.registry.retry import RetryPolicy, retry_step
from tests.faultproxy import Fault, FaultProxy, Logged
from tests.support import blob_exists
from tests.test_faults import BIG_IMAGE, CHUNKED, assert_mirrored, large_image, sync
from tests.test_sync import seed_release

WAIT = 2  # seconds the registry asks for
POLICY = {"attempts": 3, "base_delay": 0.01, "max_delay": 0.01, "max_elapsed": 30}


def first_after(proxy: FaultProxy, refused: Logged, method: str, pattern: str) -> Logged:
    return next(e for e in proxy.log if e.at > refused.at and e.method == method and re.search(pattern, e.path))


@pytest.mark.parametrize(
    ("method", "chunked"),
    [("POST", False), ("PATCH", True), ("PUT", False)],
    ids=["start-upload", "upload-chunk", "streamed-put"],
)
def test_an_upload_step_answered_429_is_tried_again_after_the_wait_asked_for(
    tmp_path: Path, source: LocalRegistry, target: LocalRegistry, target_proxy: FaultProxy, method: str, chunked: bool
) -> None:
    """One image of two blobs (its config, a 6 MiB layer); the layer's upload meets a 429 asking for 2 s. Its
    next attempt begins by asking whether the blob landed anyway (a HEAD of it): no sooner than 2 s later."""
    digest = large_image(source, 6 * MiB)
    path = {"POST": r"/blobs/uploads/", "PATCH": r"/blobs/uploads/", "PUT": re.escape(digest.replace(":", "%3A"))}
    fault = Fault("status", method=method, path=path[method], status=429, code="TOOMANYREQUESTS", retry_after="2")
    target_proxy.add(fault)
    transfer = CHUNKED if chunked else {}
    assert sync(tmp_path, source, target_proxy, images=BIG_IMAGE, transfer=transfer, retry=POLICY) == 0
    assert fault.applied == 1
    refused = next(e for e in target_proxy.log if e.status == 429)
    again = first_after(target_proxy, refused, "HEAD", r"/blobs/sha256:")  # the retried step's first request
    assert again.at - refused.at >= WAIT, (refused, again)
    assert blob_exists(target, "mirrored/layer", digest)


def test_a_manifest_put_answered_429_is_tried_again_after_the_wait_asked_for(
    tmp_path: Path, source: LocalRegistry, target: LocalRegistry, target_proxy: FaultProxy
) -> None:
    """A manifest PUT has its bytes in hand: the transport sends it again, after the wait."""
    seed_release(source)
    fault = Fault("status", method="PUT", path=r"/manifests/", status=503, retry_after="2")
    target_proxy.add(fault)
    assert sync(tmp_path, source, target_proxy, retry=POLICY) == 0
    assert fault.applied == 1
    refused = next(e for e in target_proxy.log if e.status == 503)
    again = first_after(target_proxy, refused, "PUT", re.escape(refused.path) + "$")
    assert again.at - refused.at >= WAIT, (refused, again)
    assert_mirrored(target, source)


@pytest.mark.parametrize("retry_after", ["3600", "date"], ids=["seconds", "http-date"])
def test_a_wait_past_the_policys_budget_fails_at_once_saying_so(
    tmp_path: Path,
    source: LocalRegistry,
    target: LocalRegistry,
    target_proxy: FaultProxy,
    capsys: pytest.CaptureFixture[str],
    retry_after: str,
) -> None:
    """Asked to wait an hour, with 30 s of budget: no step is tried again, and the line says why."""
    large_image(source, MiB)
    if retry_after == "date":
        retry_after = email.utils.formatdate(time.time() + 3600, usegmt=True)
    fault = Fault("status", method="POST", path=r"/blobs/uploads/", status=429, retry_after=retry_after, count=100)
    target_proxy.add(fault)
    started = time.monotonic()
    assert sync(tmp_path, source, target_proxy, images=BIG_IMAGE, retry=POLICY) == 1
    assert time.monotonic() - started < 20
    err = capsys.readouterr().err
    assert re.search(r"429 UNAVAILABLE: injected fault \(asked to wait 3[56]\d\d(\.\d)? s\)", err), err
    assert "not tried again: past the retry policy's time budget (max_elapsed 30 s)" in err, err
    assert "Traceback" not in err
    assert fault.applied <= 2  # one try per blob: its config and its layer
    first = next(e for e in target_proxy.log if e.status == 429)
    assert not [e for e in target_proxy.log if e.at > first.at and e.method == "HEAD" and "/blobs/" in e.path]


# -- the error and the loop, without a registry ---------------------------------------------------------------


async def refusal(status: int, retry_after: str) -> RegistryError:
    request = httpx.Request("POST", "https://registry.test/v2/ns/r/blobs/uploads/")
    response = httpx.Response(status, headers={"Retry-After": retry_after}, content=b"{}", request=request)
    with pytest.raises(RegistryError) as raised:
        await raise_for_response(response, "start upload", "registry.test/ns/r")
    return raised.value


async def test_the_error_carries_the_wait_of_a_passing_refusal_only() -> None:
    assert (await refusal(429, "7")).retry_after == 7.0
    assert (await refusal(503, "0")).retry_after == 0.0
    assert "asked to wait 7 s" in str(await refusal(503, "7"))
    assert (await refusal(404, "7")).retry_after is None  # no passing failure: nothing to wait for
    assert (await refusal(429, "soon")).retry_after is None


async def test_retry_step_waits_the_wait_asked_for_beyond_its_own_backoff() -> None:
    waits: list[float] = []

    async def sleep(seconds: float) -> None:
        waits.append(seconds)

    async def step(attempt: int) -> str:
        if attempt == 1:
            raise RegistryError("start upload", "registry.test/ns/r", 429, retry_after=2.0)
        return "done"

    policy = RetryPolicy(attempts=3, base_delay=0.01, max_delay=0.01, max_elapsed=30)
    assert await retry_step(policy, step, lambda exc: True, "a step", sleep) == "done"
    assert waits == [2.0]

    async def refused(attempt: int) -> str:
        raise RegistryError("start upload", "registry.test/ns/r", 429, retry_after=3600.0)

    with pytest.raises(RegistryError, match=r"asked to wait 3600 s\); not tried again: past the retry policy"):
        await retry_step(policy, refused, lambda exc: True, "a step", sleep)
    assert waits == [2.0]
