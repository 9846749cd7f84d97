"""Faults between mirror and real registries: resets, 5xx, 429 with Retry-After, stalls, corrupt bytes,
Docker Hub's pull budget, and chunked uploads that resume. Faults are injected by count and size."""

from __future__ import annotations

import asyncio
import json
import logging
import re
import time
from pathlib import Path
from typing import Any

import pytest

from mirror.cli import main
from mirror.demo.localregistry import LocalRegistry
from mirror.demo.sample import MiB, push_single
from mirror.oci import Manifest
from mirror.registry import RegistryClient, RegistryError
from mirror.registry.budget import BudgetExhausted, PullBudget
from mirror.registry.options import ClientOptions, PullBudgetOptions
from mirror.registry.ratelimit import RateLimit
from mirror.registry.retry import RetryPolicy
from tests.faultproxy import Fault, FaultProxy
from tests.support import beyond_heads, blob_exists, manifest_digest, requests_since, with_client, write_config
from tests.test_sync import VERSION, seed_release

BLOB = r"/blobs/sha256:"
MANIFEST = r"/manifests/"
# seconds: short, so a stall times out soon, yet long enough that no request a loaded machine answers slowly
# times out too, let alone every try of one
READ_TIMEOUT = 5.0


def sync(tmp_path: Path, source: Any, target: Any, *args: str, **extra: Any) -> int:
    config = write_config(tmp_path / "mirror.yaml", source, [target], **extra)
    return main(["sync", VERSION, "--config", str(config), *args])


def assert_mirrored(target: LocalRegistry, source: LocalRegistry) -> None:
    for repository, src, tag in (
        ("mirrored/hami", "projecthami/hami", VERSION),
        ("mirrored/kube-webhook-certgen", "liangjw/kube-webhook-certgen", "v1.1.1"),
    ):
        assert manifest_digest(target, repository, tag) == manifest_digest(source, src, tag)


def faults_applied(proxy: FaultProxy, kind: str) -> int:
    return sum(fault.applied for fault in proxy.faults if fault.kind == kind)


@pytest.mark.parametrize(
    "fault",
    [
        Fault("status", method="GET", path=MANIFEST, status=503, count=2),
        Fault("status", method="HEAD", path=MANIFEST, status=502, count=3),
        Fault("status", method="GET", path=BLOB, status=500, count=2),
        Fault("reset_response", method="GET", path=BLOB, after_bytes=100_000, count=2),
        Fault("reset_response", method="GET", path=MANIFEST, after_bytes=10, count=1),
        Fault("stall", method="GET", path=BLOB, seconds=10.0, count=1),  # past READ_TIMEOUT: the read times out
        Fault("corrupt", method="GET", path=BLOB, after_bytes=1000, count=1),
    ],
    ids=["503-manifest", "502-head", "500-blob", "reset-blob", "reset-manifest", "stall-blob", "corrupt-blob"],
)
def test_transient_source_faults_are_survived(
    tmp_path: Path, source: LocalRegistry, target: LocalRegistry, source_proxy: FaultProxy, fault: Fault
) -> None:
    seed_release(source)
    source_proxy.add(fault)
    assert sync(tmp_path, source_proxy, target, "--deep", transfer={"read_timeout": READ_TIMEOUT}) == 0
    assert faults_applied(source_proxy, fault.kind) == fault.count
    assert_mirrored(target, source)


@pytest.mark.parametrize(
    "fault",
    [
        Fault("status", method="PUT", path=BLOB.replace("sha256:", "uploads/"), status=503, count=2),
        Fault("status", method="POST", path=r"/blobs/uploads/", status=503, count=2),
        Fault("status", method="PUT", path=MANIFEST, status=504, count=2),
        Fault("reset_request", method="PUT", path=r"/blobs/uploads/", after_bytes=200_000, count=2),
        Fault("reset_response", method="HEAD", path=BLOB, after_bytes=0, count=3),
    ],
    ids=["503-upload", "503-start-upload", "504-manifest-put", "reset-upload", "reset-head"],
)
def test_transient_target_faults_are_survived(
    tmp_path: Path, source: LocalRegistry, target: LocalRegistry, target_proxy: FaultProxy, fault: Fault
) -> None:
    seed_release(source)
    target_proxy.add(fault)
    assert sync(tmp_path, source, target_proxy) == 0
    assert faults_applied(target_proxy, fault.kind) == fault.count
    assert_mirrored(target, source)


def test_retry_after_is_honoured(
    tmp_path: Path, source: LocalRegistry, target: LocalRegistry, source_proxy: FaultProxy
) -> None:
    seed_release(source)
    source_proxy.add(
        Fault("status", method="GET", path=MANIFEST, status=429, code="TOOMANYREQUESTS", retry_after="1", count=1)
    )
    assert sync(tmp_path, source_proxy, target) == 0
    refused = next(e for e in source_proxy.log if e.status == 429)
    again = next(e for e in source_proxy.log if e.at > refused.at and e.path == refused.path)
    assert again.at - refused.at >= 0.9  # the registry asked for a second; the policy's own delay is 0.05 s
    assert_mirrored(target, source)


def test_permanent_fault_fails_cleanly_and_in_bounded_time(
    tmp_path: Path,
    source: LocalRegistry,
    target: LocalRegistry,
    target_proxy: FaultProxy,
    capsys: pytest.CaptureFixture[str],
) -> None:
    seed_release(source)
    target_proxy.add(Fault("status", method="PUT", path=MANIFEST, status=503, count=1000))
    started = time.monotonic()
    assert sync(tmp_path, source, target_proxy, retry={"attempts": 3, "base_delay": 0.05, "max_delay": 0.1}) == 1
    assert time.monotonic() - started < 20
    err = capsys.readouterr().err
    assert "503 UNAVAILABLE: injected fault" in err and "Traceback" not in err
    assert faults_applied(target_proxy, "status") <= 2 * 3 * 5  # two images, three tries, a few manifests
    assert manifest_digest(target, "mirrored/hami", VERSION) is None


def upload_uuid(path: str) -> str:
    return path.split("/blobs/uploads/", 1)[1].split("?", 1)[0]


def raced_the_aborted_put(registry: LocalRegistry, uuid: str) -> bool:
    """distribution answers the DELETE 204 on the wire, but logs it as 500 when the handler of the PUT that
    mirror cut off is still writing the session's hash state as the session's folder is removed."""
    return any(
        "error encountered canceling upload" in line and uuid in line
        for line in registry.log_path.read_text(errors="replace").splitlines()
    )


def test_a_blob_corrupt_at_every_read_is_never_committed(
    tmp_path: Path,
    source: LocalRegistry,
    target: LocalRegistry,
    source_proxy: FaultProxy,
    capsys: pytest.CaptureFixture[str],
) -> None:
    hami, certgen = seed_release(source)
    victim = max(set(hami.blobs) - set(certgen.blobs), key=lambda d: hami.blobs[d])  # in one repository only
    source_proxy.add(Fault("corrupt", method="GET", path=victim.replace(":", r"\:"), count=1000))
    assert sync(tmp_path, source_proxy, target, retry={"attempts": 3, "base_delay": 0.01}) == 1
    err = capsys.readouterr().err
    assert f"blob {victim}: source sent" in err
    assert faults_applied(source_proxy, "corrupt") == 3
    assert not blob_exists(target, "mirrored/hami", victim)
    # each abandoned upload session was cancelled at the registry rather than left to expire
    cancelled = [e for e in target.access_log() if e.method == "DELETE" and "/blobs/uploads/" in e.path]
    sessions = {upload_uuid(e.path) for e in cancelled}
    assert len(cancelled) == len(sessions) == 3, cancelled
    assert all(e.status == 204 or raced_the_aborted_put(target, upload_uuid(e.path)) for e in cancelled), cancelled
    assert manifest_digest(target, "mirrored/hami", VERSION) is None


def test_a_descriptor_over_the_size_limit_is_refused_before_any_upload(
    tmp_path: Path, source: LocalRegistry, target: LocalRegistry, capsys: pytest.CaptureFixture[str]
) -> None:
    hami, certgen = seed_release(source)
    oversized = {d for image in (hami, certgen) for d, size in image.blobs.items() if size > 1024}
    assert oversized  # the layers; configs are smaller and go up as usual
    marks = len(target.access_log()), len(source.access_log())
    assert sync(tmp_path, source, target, transfer={"max_blob_size": 1024}) == 1
    assert "over transfer.max_blob_size (1024)" in capsys.readouterr().err
    during = requests_since(target, marks[0]) + requests_since(source, marks[1])
    touched = [e.path for e in during if e.method != "HEAD"]
    assert not [path for path in touched if any(digest in path for digest in oversized)]  # no session, no read


def large_image(source: LocalRegistry, size: int) -> str:
    image = with_client(source, lambda c: push_single(c, "big/layer", "v1", layer_sizes=(size,), seed=5))
    return max(image.blobs, key=lambda d: image.blobs[d])


CHUNKED = {"chunked_upload_threshold": 4 * MiB, "upload_chunk_size": 2 * MiB}
BIG_IMAGE = [{"name": "layer", "source": "big/layer", "tag": "v1"}]


def layer_requests(proxy: FaultProxy, method: str, digest: str) -> list[Any]:
    """Requests of one upload: PATCHes and GETs carry no digest, so count those of every session with
    more than one request (the config blob's upload is a single PUT)."""
    if method == "PUT":
        return [e for e in proxy.log if e.method == "PUT" and digest.replace(":", "%3A") in e.path]
    return [e for e in proxy.log if e.method == method and "/blobs/uploads/" in e.path]


def test_chunked_upload_resumes_from_the_registrys_offset(
    tmp_path: Path, source: LocalRegistry, target: LocalRegistry, target_proxy: FaultProxy
) -> None:
    size = 12 * MiB
    digest = large_image(source, size)
    # The fourth chunk is lost on the way after 1 MiB: the registry still holds three chunks (6 MiB).
    target_proxy.add(Fault("drop_request", method="PATCH", path=r"/blobs/uploads/", skip=3, after_bytes=MiB))
    assert sync(tmp_path, source, target_proxy, images=BIG_IMAGE, transfer=CHUNKED) == 0
    assert faults_applied(target_proxy, "drop_request") == 1
    asked = [e for e in layer_requests(target_proxy, "GET", digest) if e.status == 204]
    assert len(asked) == 1  # "how much arrived?"
    assert len(layer_requests(target_proxy, "PATCH", digest)) == 7  # six chunks, the fourth twice
    # the client sent the blob plus the lost megabyte; a restart would have sent 6 MiB more
    assert target_proxy.received_bytes["PATCH"] == size + MiB
    assert target_proxy.request_bytes["PATCH"] == size
    assert len([e for e in target_proxy.log if e.method == "POST"]) == 2  # config blob + layer: one session each
    assert blob_exists(target, "mirrored/layer", digest)


@pytest.mark.parametrize("transfer", [CHUNKED, {}], ids=["chunked", "one PUT"])
def test_an_upload_that_landed_though_its_answer_was_lost_is_not_sent_again(
    tmp_path: Path, source: LocalRegistry, target: LocalRegistry, target_proxy: FaultProxy, transfer: dict[str, int]
) -> None:
    """The registry completed the upload and the answer to its last request was lost: the next attempt asks
    the registry for the blob before it sends a byte, where it started a new session and sent the whole blob
    again (the chunked upload's last PUT, retried, finds its session gone)."""
    size = 6 * MiB
    digest = large_image(source, size)
    finishing = re.escape(digest.replace(":", "%3A"))
    target_proxy.add(Fault("lose_answer", method="PUT", path=finishing, count=1))
    assert sync(tmp_path, source, target_proxy, images=BIG_IMAGE, transfer=transfer) == 0
    assert faults_applied(target_proxy, "lose_answer") == 1
    assert target_proxy.request_bytes["PATCH" if transfer else "PUT"] < size + MiB  # the layer went once
    assert blob_exists(target, "mirrored/layer", digest)


def test_cancelling_a_failed_upload_session_takes_at_most_its_own_timeout(
    tmp_path: Path, source: LocalRegistry, target: LocalRegistry, target_proxy: FaultProxy
) -> None:
    """Letting the registry drop a failed upload's session is best effort: a DELETE that is never answered
    was retried for the request's whole deadline (five tries of a 10 s read), holding the blob's transfer
    slots; it now gives up after CANCEL_TIMEOUT (10 s) in all."""
    digest = large_image(source, MiB)
    unanswered = Fault("stall", method="DELETE", seconds=60, count=1000)
    target_proxy.add(
        Fault("status", method="PUT", path=re.escape(digest.replace(":", "%3A")), status=500, count=1), unanswered
    )
    started = time.monotonic()
    assert sync(tmp_path, source, target_proxy, images=BIG_IMAGE) == 0
    assert time.monotonic() - started < 35  # 10 s for the DELETE, where the retries took 50 s and more
    assert unanswered.applied == 1  # asked once, not retried
    assert blob_exists(target, "mirrored/layer", digest)


def test_chunked_upload_starts_over_when_the_registry_drops_the_session(
    tmp_path: Path, source: LocalRegistry, target: LocalRegistry, target_proxy: FaultProxy
) -> None:
    # Half a chunk reaches the registry before the reset: distribution cancels such a session, so the
    # status GET finds nothing and a new session starts from the first byte.
    digest = large_image(source, 8 * MiB)
    target_proxy.add(Fault("reset_request", method="PATCH", path=r"/blobs/uploads/", skip=1, after_bytes=MiB))
    assert sync(tmp_path, source, target_proxy, images=BIG_IMAGE, transfer=CHUNKED) == 0
    assert [e.status for e in layer_requests(target_proxy, "GET", digest)] == [404]
    assert len([e for e in target_proxy.log if e.method == "POST"]) == 3  # config, layer, layer again
    assert blob_exists(target, "mirrored/layer", digest)


def test_registry_without_chunked_uploads_gets_one_put(
    tmp_path: Path, source: LocalRegistry, target: LocalRegistry, target_proxy: FaultProxy
) -> None:
    digest = large_image(source, 6 * MiB)
    target_proxy.add(Fault("status", method="PATCH", path=r"/blobs/uploads/", status=405, code="UNSUPPORTED"))
    assert sync(tmp_path, source, target_proxy, images=BIG_IMAGE, transfer=CHUNKED) == 0
    assert len(layer_requests(target_proxy, "PUT", digest)) == 1
    assert target_proxy.request_bytes["PUT"] >= 6 * MiB
    assert blob_exists(target, "mirrored/layer", digest)


def test_a_registry_without_chunked_uploads_found_out_on_a_resume_gets_one_put_and_no_chunks_after(
    tmp_path: Path,
    source: LocalRegistry,
    target: LocalRegistry,
    target_proxy: FaultProxy,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The first PATCH met a passing 503, so the registry's refusal of chunks came only on the resume: it
    escaped the run as a traceback. It is a single PUT in a new session there too; and once a blob has been
    turned down, a blob that starts after it goes in one PUT without opening a session for chunks first: one at a
    time, at most the blob that met the 503 and one waiting its turn then send a chunk, where each of the three
    sent one (four PATCHes with the resume)."""
    sizes = (6 * MiB, 5 * MiB, 9 * MiB // 2)
    image = with_client(source, lambda c: push_single(c, "big/layer", "v1", layer_sizes=sizes, seed=5))
    layers = [digest for digest, size in image.blobs.items() if size >= CHUNKED["chunked_upload_threshold"]]
    target_proxy.add(
        Fault("status", method="PATCH", path=r"/blobs/uploads/", status=503, count=1),
        Fault("status", method="PATCH", path=r"/blobs/uploads/", status=405, code="UNSUPPORTED", count=1000),
    )
    one_at_a_time = {**CHUNKED, "blob_concurrency": 1}
    assert sync(tmp_path, source, target_proxy, images=BIG_IMAGE, transfer=one_at_a_time) == 0, capsys.readouterr()
    assert sorted(e.status for e in target_proxy.log if e.method == "PATCH") in ([405, 503], [405, 405, 503])
    assert len(layers) == 3 and all(len(layer_requests(target_proxy, "PUT", digest)) == 1 for digest in layers)
    assert all(blob_exists(target, "mirrored/layer", digest) for digest in layers)


@pytest.mark.parametrize("transfer", [{}, CHUNKED], ids=["one PUT", "chunked"])
def test_a_source_that_drops_a_blob_mid_body_is_named_not_the_target_it_streams_into(
    tmp_path: Path,
    source: LocalRegistry,
    target: LocalRegistry,
    source_proxy: FaultProxy,
    capsys: pytest.CaptureFixture[str],
    transfer: dict[str, int],
) -> None:
    """With one target a blob streams from the source's answer into the target's PUT (or PATCH): a reset at the
    source, met inside the target's request, was reported as `upload blob <target>: registry unreachable`,
    blaming the target for the source's fault. The line names the source's blob; it is tried as often as
    before."""
    digest = large_image(source, 8 * MiB)
    reset = Fault("reset_response", method="GET", path=re.escape(digest), after_bytes=MiB, count=1000)
    source_proxy.add(reset)
    twice = {"attempts": 2, "base_delay": 0.05, "max_delay": 0.1}
    assert sync(tmp_path, source_proxy, target, images=BIG_IMAGE, transfer=transfer, retry=twice) == 1
    err = capsys.readouterr().err
    assert f"fetch blob {source_proxy.host}/big/layer@{digest}: registry unreachable: " in err, err
    assert "upload blob" not in err and "upload chunk" not in err
    assert reset.applied == 2
    assert not blob_exists(target, "mirrored/layer", digest)


def test_a_resume_reads_only_the_rest_of_the_source_blob(
    tmp_path: Path, source: LocalRegistry, target: LocalRegistry, target_proxy: FaultProxy
) -> None:
    digest = large_image(source, 8 * MiB)
    target_proxy.add(Fault("drop_request", method="PATCH", path=r"/blobs/uploads/", skip=2, after_bytes=MiB))
    mark = len(source.access_log())
    assert sync(tmp_path, source, target_proxy, images=BIG_IMAGE, transfer=CHUNKED) == 0
    reads = [e for e in source.access_log()[mark:] if e.method == "GET" and digest in e.path]
    assert [e.status for e in reads] == [200, 206]  # the whole blob once, then the rest with Range
    assert blob_exists(target, "mirrored/layer", digest)


# -- Docker Hub's pull budget ---------------------------------------------------------------------------


def budget(remaining: int, count: int = 1) -> Fault:
    return Fault(
        "headers",
        path=MANIFEST,
        headers={"ratelimit-remaining": f"{remaining};w=21600", "ratelimit-limit": "100;w=21600"},
        count=count,
    )


def test_manifest_gets_pause_until_the_budget_allows(
    tmp_path: Path,
    source: LocalRegistry,
    target: LocalRegistry,
    source_proxy: FaultProxy,
    capsys: pytest.CaptureFixture[str],
) -> None:
    seed_release(source)
    source_proxy.add(budget(0, count=4), budget(60, count=1000))
    fast = {"floor": 1, "poll_interval": 0.1, "max_wait": 30}
    assert sync(tmp_path, source_proxy, target, "--json", pull_budget=fast) == 0
    heads_at_zero = [e for e in source_proxy.log if e.fault == "headers"][:4]
    first_get = next(e for e in source_proxy.log if e.method == "GET" and MANIFEST in e.path)
    assert all(e.method == "HEAD" for e in heads_at_zero) and first_get.at > heads_at_zero[-1].at
    report = json.loads(capsys.readouterr().out)
    assert report["source_rate_limit"] == {"remaining": 60, "limit": 100, "window_seconds": 21600}
    assert_mirrored(target, source)


def test_an_empty_budget_fails_after_the_maximum_wait(
    tmp_path: Path,
    source: LocalRegistry,
    target: LocalRegistry,
    source_proxy: FaultProxy,
    capsys: pytest.CaptureFixture[str],
) -> None:
    seed_release(source)
    source_proxy.add(budget(0, count=1000))
    assert sync(tmp_path, source_proxy, target, pull_budget={"floor": 0, "poll_interval": 0.1, "max_wait": 0.5}) == 1
    assert "pull budget" in capsys.readouterr().err
    assert not any(e.method == "GET" and MANIFEST in e.path for e in source_proxy.log)


def test_the_fast_path_works_with_an_empty_budget(
    tmp_path: Path, source: LocalRegistry, target: LocalRegistry, source_proxy: FaultProxy
) -> None:
    seed_release(source)
    assert sync(tmp_path, source_proxy, target) == 0
    source_proxy.add(budget(0, count=1000))
    mark = len(source_proxy.log)
    assert sync(tmp_path, source_proxy, target, pull_budget={"floor": 0, "poll_interval": 0.1, "max_wait": 0.5}) == 0
    assert beyond_heads(source_proxy.log[mark:]) == []


def budget_client(host: str, floor: int) -> RegistryClient:
    retry = RetryPolicy(attempts=1)  # a 429 reaches the budget at once
    budget = PullBudgetOptions(floor=floor, max_wait=60, poll_interval=0.1)
    return RegistryClient.open(host, ClientOptions(plain_http=True, anonymous=True, retry=retry, pull_budget=budget))


def test_a_429_from_a_registry_that_announces_no_budget_holds_no_later_pull(
    source: LocalRegistry, source_proxy: FaultProxy
) -> None:
    """Only Docker Hub announces a pull budget: elsewhere a 429 is an error like any other, and must not leave
    a spent budget that no answer will ever refill (every later manifest GET waited max_wait, then failed)."""
    sample = with_client(source, lambda client: push_single(client, "team/busy", "v1", layer_sizes=(1024,)))
    source_proxy.add(Fault("status", method="GET", path=MANIFEST, status=429, code="TOOMANYREQUESTS", count=1))

    async def twice() -> tuple[RegistryError, Manifest]:
        client = budget_client(source_proxy.host, floor=0)
        try:
            with pytest.raises(RegistryError) as refused:
                await client.get_manifest("team/busy", "v1")
            return refused.value, await asyncio.wait_for(client.get_manifest("team/busy", "v1"), 30)
        finally:
            await client.aclose()

    refused, manifest = asyncio.run(twice())
    assert refused.status == 429
    assert manifest.digest == sample.digest
    assert [e.method for e in source_proxy.log if MANIFEST in e.path] == ["GET", "GET"]  # no polling between


def test_the_budget_is_reread_with_heads_even_where_they_name_no_digest(
    source: LocalRegistry, source_proxy: FaultProxy
) -> None:
    """A HEAD without Docker-Content-Digest sends head_manifest to a GET; reading the budget that way waited on
    the budget's own lock, for ever."""
    sample = with_client(source, lambda client: push_single(client, "team/nodigest", "v1", layer_sizes=(1024,)))
    spent = {"ratelimit-remaining": "0;w=21600", "ratelimit-limit": "100;w=21600"}
    source_proxy.add(
        Fault("headers", method="GET", path=MANIFEST, headers=spent, count=1),
        Fault("headers", method="HEAD", path=MANIFEST, headers=spent, strip=("docker-content-digest",), count=2),
        budget(60, count=1000),
    )

    async def twice() -> Manifest:
        client = budget_client(source_proxy.host, floor=1)
        try:
            await client.get_manifest("team/nodigest", "v1")  # announces a spent budget
            return await asyncio.wait_for(client.get_manifest("team/nodigest", "v1"), 30)
        finally:
            await client.aclose()

    assert asyncio.run(twice()).digest == sample.digest
    manifest_requests = [e.method for e in source_proxy.log if MANIFEST in e.path]
    assert manifest_requests == ["GET", "HEAD", "HEAD", "HEAD", "GET"]


def test_pulls_waiting_on_a_spent_budget_share_one_wait() -> None:
    """Waiters queue behind the one polling; each counted its own max_wait from when it got the lock, so N of
    them failed after N times max_wait."""
    pull_budget = PullBudget(floor=0, max_wait=3.0, poll_interval=0.5)
    pull_budget.note(RateLimit(0, 100, 21600))

    async def nothing() -> None:
        return None

    async def four() -> list[BaseException | None]:
        waits = [pull_budget.wait_for_pull("team/spent:v1", nothing) for _ in range(4)]
        return await asyncio.gather(*waits, return_exceptions=True)

    started = time.monotonic()
    outcomes = asyncio.run(four())
    assert all(isinstance(outcome, BudgetExhausted) for outcome in outcomes)
    assert time.monotonic() - started < 7.5  # one max_wait (3 s), where one after the other took 12 s


def test_a_resume_rereads_a_source_that_ignores_range(
    tmp_path: Path, target: LocalRegistry, target_proxy: FaultProxy
) -> None:
    from mirror.demo.localregistry import start_registry
    from tests.support import cdn_server

    with cdn_server(tmp_path / "cdn-source" / "data") as cdn:  # serves whole files, never 206
        source = start_registry(tmp_path / "cdn-source", redirect_to=cdn.url)
        try:
            digest = large_image(source, 8 * MiB)
            target_proxy.add(Fault("drop_request", method="PATCH", path=r"/blobs/uploads/", skip=2, after_bytes=MiB))
            assert sync(tmp_path, source, target_proxy, images=BIG_IMAGE, transfer=CHUNKED) == 0
            assert target_proxy.request_bytes["PATCH"] == 8 * MiB  # still only the missing chunks were sent
            assert blob_exists(target, "mirrored/layer", digest)
        finally:
            source.stop()


def test_bodies_cut_short_give_their_connection_slots_back(source: LocalRegistry, source_proxy: FaultProxy) -> None:
    """Small bodies are read where retries are decided: a read that fails must close the answer, or the slot it
    holds among the host's connections is gone for the rest of the run. Two connections, two answers cut
    mid-body: the third try needs a slot the first two held."""
    sample = with_client(source, lambda client: push_single(client, "team/cut", "v1", layer_sizes=(1024,)))
    source_proxy.add(Fault("reset_response", method="GET", path=MANIFEST, after_bytes=10, count=2))
    options = ClientOptions(
        plain_http=True,
        anonymous=True,
        max_connections=2,
        deadline=60,  # the slots leaked: the third try waits for one until this passes
        retry=RetryPolicy(attempts=3, base_delay=0.01, max_delay=0.01),
    )

    async def fetch() -> Manifest:
        client = RegistryClient.open(source_proxy.host, options)
        try:
            return await client.get_manifest("team/cut", "v1")
        finally:
            await client.aclose()

    manifest = asyncio.run(fetch())
    assert manifest.digest == sample.digest
    assert faults_applied(source_proxy, "reset_response") == 2


def test_a_target_that_is_down_is_one_retry_line_not_one_per_request(
    tmp_path: Path, source: LocalRegistry, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every request to a host that refuses connections fails alike: the retries' lines are told once per host
    and reason in each 10 s, the rest counted in the next (it was one line per request: 120 for one run)."""
    from types import SimpleNamespace

    from mirror.demo.ports import free_port
    from mirror.registry import retry as retry_module
    from mirror.registry.retry import RetryLines

    caplog.set_level(logging.INFO, logger="mirror")
    seed_release(source)
    down = f"127.0.0.1:{free_port()}"  # nothing listens there
    retry = {"attempts": 3, "base_delay": 0.01, "max_delay": 0.01, "max_elapsed": 30}
    config = write_config(tmp_path / "mirror.yaml", source, [SimpleNamespace(host=down)], retry=retry)
    lines_told = RetryLines()  # this test's own: no earlier test's lines in this process hold any back
    monkeypatch.setattr(retry_module, "RETRY_LINES", lines_told)
    retries: list[str] = []
    held_back = lines_told.held_back

    def counted(host: str, reason: str) -> int | None:
        retries.append(host)
        return held_back(host, reason)

    monkeypatch.setattr(lines_told, "held_back", counted)
    started = time.monotonic()
    assert main(["sync", VERSION, "--config", str(config)]) == 1
    took = time.monotonic() - started
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith(f"retrying HEAD http://{down}/")]
    assert 1 <= len(lines) <= 1 + took // lines_told.window, lines
    assert len(retries) > 1 + took // lines_told.window  # a line each would have been more
