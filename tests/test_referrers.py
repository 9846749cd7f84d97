"""Signatures, attestations and SBOMs carried with the image, byte for byte, against real registries: a signed
test image made here with both of cosign's layouts (an OCI 1.1 referrer with `subject`, listed in the
`sha256-<hex>` fallback index as cosign v3 writes it where a registry has no referrers API, and the older
`sha256-<hex>.sig` tag) plus an attestation (`.att`) and an SBOM (`.sbom`)."""

from __future__ import annotations

import asyncio
import json
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from mirror.demo.localregistry import LocalRegistry
from mirror.demo.sample import SampleBuilder, push_multiarch
from mirror.engine.clients import Clients
from mirror.engine.referrers import fallback_tag
from mirror.engine.sync import SyncOptions, sync
from mirror.oci import OCI_EMPTY, OCI_INDEX, OCI_MANIFEST
from mirror.progress import Progress
from mirror.reference import api_host
from mirror.registry import RegistryClient, RegistryError
from mirror.report import ReleaseResult
from mirror.settings import MirrorSettings, load_settings
from tests.faultproxy import Fault, fault_proxy
from tests.referrersfront import ReferrersFront, stored_referrers
from tests.support import manifest_bytes, manifest_digest, requests_since, sync_json, with_client, write_config, writes
from tests.test_sync import VERSION, seed_release

BUNDLE = "application/vnd.dev.sigstore.bundle.v0.3+json"
IMAGE_CONFIG = "application/vnd.oci.image.config.v1+json"


@dataclass
class Signed:
    subject: str  # the signed index digest
    bundle: str  # the referrer (OCI 1.1, with subject)
    legacy: dict[str, str]  # tag -> digest, for .sig / .att / .sbom


async def sign(client: RegistryClient, repository: str, subject: dict[str, Any]) -> Signed:
    builder = SampleBuilder(client, repository, seed=99)
    empty = await builder.blob(b"{}", OCI_EMPTY)
    payload = json.dumps({"mediaType": BUNDLE, "verificationMaterial": {}, "messageSignature": {}}).encode()
    bundle = await builder.manifest(
        {
            "schemaVersion": 2,
            "mediaType": OCI_MANIFEST,
            "artifactType": BUNDLE,
            "config": empty,
            "layers": [await builder.blob(payload, BUNDLE)],
            "subject": subject,
            "annotations": {"dev.sigstore.bundle.predicateType": "https://sigstore.dev/cosign/sign/v1"},
        }
    )
    prefix = fallback_tag(subject["digest"])
    await builder.manifest(  # cosign v3's fallback index for a registry without the referrers API
        {
            "schemaVersion": 2,
            "mediaType": OCI_INDEX,
            "manifests": [{**bundle, "artifactType": BUNDLE, "annotations": {"created-by": "test"}}],
        },
        prefix,
    )
    legacy = {}
    for suffix, layer_type, body in (
        (".sig", "application/vnd.dev.cosign.simplesigning.v1+json", b'{"critical":{"identity":{}}}'),
        (".att", "application/vnd.dsse.envelope.v1+json", b'{"payloadType":"application/vnd.in-toto+json"}'),
        (".sbom", "text/spdx+json", b'{"spdxVersion":"SPDX-2.3"}'),
    ):
        config = await builder.blob(json.dumps({"architecture": "", "os": "", "rootfs": {}}).encode(), IMAGE_CONFIG)
        layer = await builder.blob(body, layer_type)
        layer["annotations"] = {"dev.cosignproject.cosign/signature": "MEUCIQ..."} if suffix == ".sig" else {}
        doc = {"schemaVersion": 2, "mediaType": OCI_MANIFEST, "config": config, "layers": [layer]}
        legacy[prefix + suffix] = (await builder.manifest(doc, prefix + suffix))["digest"]
    return Signed(subject["digest"], bundle["digest"], legacy)


def signed_release(source: LocalRegistry, attestations: bool = True) -> Signed:
    """The test release, its hami index signed. Without BuildKit's attestation entries, ACR's personal
    edition takes the index byte for byte, so what refers to it can be carried there too."""
    if attestations:
        hami, _ = seed_release(source)
    else:
        hami = with_client(source, lambda c: push_multiarch(c, "projecthami/hami", VERSION, attestations=False, seed=1))
        with_client(source, lambda c: push_multiarch(c, "liangjw/kube-webhook-certgen", "v1.1.1", docker=True, seed=2))
    subject = {"mediaType": OCI_INDEX, "digest": hami.digest, "size": len(hami.manifests[hami.digest])}
    return with_client(source, lambda c: sign(c, "projecthami/hami", subject))


def hami_target(report: dict[str, Any]) -> dict[str, Any]:
    return dict(next(i for i in report["images"] if i["name"] == "hami")["targets"][0])


def test_a_signed_image_arrives_with_everything_that_refers_to_it(
    tmp_path: Path, source: LocalRegistry, target: LocalRegistry, capsys: pytest.CaptureFixture[str]
) -> None:
    signed = signed_release(source)
    code, report, err = sync_json(write_config(tmp_path / "mirror.yaml", source, [target]), capsys, VERSION)
    assert code == 0, err
    carried = hami_target(report)["referrers"]
    assert carried["left_out"] == []
    assert sorted((c["kind"], c["via"]) for c in carried["carried"]) == sorted(
        [
            ("signature", "referrers"),
            ("signature", fallback_tag(signed.subject) + ".sig"),
            ("attestation", fallback_tag(signed.subject) + ".att"),
            ("sbom", fallback_tag(signed.subject) + ".sbom"),
        ]
    )
    # byte for byte: the referrer, the older tags, and the fallback index (this target has no referrers API)
    for digest in (signed.bundle, *signed.legacy.values()):
        assert manifest_bytes(target, "mirrored/hami", digest) == manifest_bytes(source, "projecthami/hami", digest)
    for tag, digest in signed.legacy.items():
        assert manifest_digest(target, "mirrored/hami", tag) == digest
    index_tag = fallback_tag(signed.subject)
    assert manifest_bytes(target, "mirrored/hami", index_tag) == manifest_bytes(source, "projecthami/hami", index_tag)
    assert manifest_digest(target, "mirrored/hami", VERSION) == signed.subject  # what the signatures name

    # a re-run: everything is there, nothing is copied again, and the source gets HEADs only: it was found to
    # lack the referrers API (kept under state_dir for a day), and the fallback index is known by its digest
    mark, target_mark = len(source.access_log()), len(target.access_log())
    code, report, err = sync_json(write_config(tmp_path / "mirror.yaml", source, [target]), capsys, VERSION)
    assert code == 0, err
    assert [(e.method, e.path) for e in requests_since(source, mark) if e.method != "HEAD"] == []
    assert not writes(requests_since(target, target_mark))

    # with an empty state_dir (a CronJob on an emptyDir), the source's lack of the referrers API is learnt again
    # from a listing, and the fallback index (a counted pull at Docker Hub) is read by its digest from the
    # target's copy of it. The first 404 answers for the registry: an image asks for its own listing only if
    # its question left before that answer came, so which images ask depends on the order the answers came in
    mark, target_mark = len(source.access_log()), len(target.access_log())
    fresh = write_config(tmp_path / "mirror.yaml", source, [target], state_dir=str(tmp_path / "fresh"))
    code, report, err = sync_json(fresh, capsys, VERSION)
    assert code == 0, err
    others = [(e.method, e.path) for e in requests_since(source, mark) if e.method != "HEAD"]
    listings = [path for _, path in others if re.fullmatch(r"/v2/[a-z/-]+/referrers/sha256:[0-9a-f]{64}", path)]
    assert others == [("GET", path) for path in listings]  # listings only: no manifest GET
    assert listings and len(set(listings)) == len(listings)
    index_digest = manifest_digest(source, "projecthami/hami", index_tag)
    assert f"/v2/mirrored/hami/manifests/{index_digest}" in [
        e.path for e in requests_since(target, target_mark) if e.method == "GET"
    ]
    assert not writes(requests_since(target, target_mark))


def test_what_acr_refuses_is_left_out_and_reported(
    tmp_path: Path, source: LocalRegistry, acr_like: LocalRegistry, capsys: pytest.CaptureFixture[str]
) -> None:
    signed = signed_release(source, attestations=False)
    code, report, err = sync_json(write_config(tmp_path / "mirror.yaml", source, [acr_like]), capsys, VERSION)
    assert code == 0, err
    assert hami_target(report)["digest"] == signed.subject  # the index itself went through unchanged
    carried = hami_target(report)["referrers"]
    (left_out,) = carried["left_out"]
    assert left_out["digest"] == signed.bundle and "unknown manifest class" in left_out["reason"]
    assert {c["via"] for c in carried["carried"]} == set(signed.legacy)  # image-config artifacts go through
    assert manifest_digest(acr_like, "mirrored/hami", fallback_tag(signed.subject)) is None


def test_keep_fails_where_a_referrer_is_refused(
    tmp_path: Path, source: LocalRegistry, acr_like: LocalRegistry, capsys: pytest.CaptureFixture[str]
) -> None:
    signed_release(source, attestations=False)
    config = write_config(tmp_path / "mirror.yaml", source, [acr_like], target_options={"attestations": "keep"})
    code, _, err = sync_json(config, capsys, VERSION)
    assert code == 1 and "unknown manifest class" in err and "attestations: keep" in err


def test_referrers_can_be_turned_off_per_target(
    tmp_path: Path, source: LocalRegistry, target: LocalRegistry, capsys: pytest.CaptureFixture[str]
) -> None:
    signed = signed_release(source)
    config = write_config(tmp_path / "mirror.yaml", source, [target], target_options={"referrers": False})
    code, report, err = sync_json(config, capsys, VERSION)
    assert code == 0, err
    assert "referrers" not in hami_target(report)
    assert manifest_digest(target, "mirrored/hami", fallback_tag(signed.subject) + ".sig") is None


def test_signatures_of_a_rewritten_index_are_not_carried_and_the_report_says_why(
    tmp_path: Path, source: LocalRegistry, acr_like: LocalRegistry, capsys: pytest.CaptureFixture[str]
) -> None:
    signed = signed_release(source)  # BuildKit attestations in the index: ACR refuses them, auto rewrites
    code, report, err = sync_json(write_config(tmp_path / "mirror.yaml", source, [acr_like]), capsys, VERSION)
    assert code == 0, err
    target = hami_target(report)
    assert target["digest"] != signed.subject
    (left_out,) = target["referrers"]["left_out"]
    assert left_out["digest"] == signed.subject and "rewritten" in left_out["reason"]


def test_what_refers_to_each_child_of_the_index_is_carried_too(
    tmp_path: Path, source: LocalRegistry, target: LocalRegistry, capsys: pytest.CaptureFixture[str]
) -> None:
    """`cosign sign --recursive` signs each platform manifest as well: those signatures come along."""
    hami, _ = seed_release(source)
    child = json.loads(hami.manifests[hami.digest])["manifests"][0]
    signed = with_client(source, lambda c: sign(c, "projecthami/hami", child))
    code, report, err = sync_json(write_config(tmp_path / "mirror.yaml", source, [target]), capsys, VERSION)
    assert code == 0, err
    carried = hami_target(report)["referrers"]["carried"]
    assert {c["subject"] for c in carried} == {child["digest"]}
    assert sorted(c["via"] for c in carried) == sorted(["referrers", *signed.legacy])
    for digest in (signed.bundle, *signed.legacy.values()):
        assert manifest_bytes(target, "mirrored/hami", digest) == manifest_bytes(source, "projecthami/hami", digest)
    index_tag = fallback_tag(child["digest"])
    assert manifest_bytes(target, "mirrored/hami", index_tag) == manifest_bytes(source, "projecthami/hami", index_tag)

    # the source has no referrers API: after the index's own listing 404s, its children are not asked again
    listings = [e.path for e in source.access_log() if e.path.startswith("/v2/projecthami/hami/referrers/")]
    assert listings == [f"/v2/projecthami/hami/referrers/{hami.digest}"]


def sync_through(settings: MirrorSettings, fronts: list[ReferrersFront]) -> ReleaseResult:
    """`mirror sync` of the test release, the given registries reached through their fronts."""

    async def go() -> list[ReleaseResult]:
        clients = Clients(settings)
        for front in fronts:
            clients._open[api_host(front.registry.host)] = front.client()
        try:
            return await sync(settings, [VERSION], SyncOptions(), Progress(), clients=clients)
        finally:
            await clients.aclose()
            for front in fronts:
                await front.aclose()

    (result,) = asyncio.run(go())
    return result


def test_a_source_with_the_referrers_api_is_listed_through_it_and_the_target_gets_the_fallback_index(
    tmp_path: Path, source: LocalRegistry, target: LocalRegistry
) -> None:
    """The source answers the referrers API (tests/referrersfront.py) and has no fallback tag, as Docker Hub
    would; the real target lacks the API, so mirror writes the fallback index there."""
    hami, _ = seed_release(source)
    subject = {"mediaType": OCI_INDEX, "digest": hami.digest, "size": len(hami.manifests[hami.digest])}
    signed = with_client(source, lambda c: sign(c, "projecthami/hami", subject))
    front = ReferrersFront(source, hidden_tags=[fallback_tag(hami.digest)])
    result = sync_through(load_settings(write_config(tmp_path / "mirror.yaml", source, [target])), [front])

    hami_result = next(i for i in result.images if i.name == "hami")
    carried = hami_result.targets[0].referrers.to_json() if hami_result.targets[0].referrers else {}
    assert hami_result.targets[0].verified and carried["left_out"] == []
    assert sorted(c["via"] for c in carried["carried"]) == sorted(["referrers", *signed.legacy])
    # the API was asked for the index and for each platform's image, not for its attestation manifests
    entries = json.loads(hami.manifests[hami.digest])["manifests"]
    images = [m["digest"] for m in entries if m["platform"]["os"] != "unknown"]
    assert len(images) == 2 and len(entries) == 4
    hami_asked = [p.rsplit("/", 1)[-1] for p in front.asked if p.startswith("/v2/projecthami/hami/")]
    assert sorted(hami_asked) == sorted([hami.digest, *images])
    # the target's fallback index, written by mirror, lists the referrer as the source's API did
    written = json.loads(manifest_bytes(target, "mirrored/hami", fallback_tag(hami.digest)))
    assert written["mediaType"] == OCI_INDEX
    assert written["manifests"] == stored_referrers(source, "projecthami/hami", hami.digest)
    assert [(m["digest"], m["artifactType"]) for m in written["manifests"]] == [(signed.bundle, BUNDLE)]
    bundle_bytes = manifest_bytes(target, "mirrored/hami", signed.bundle)
    assert bundle_bytes == manifest_bytes(source, "projecthami/hami", signed.bundle)


def test_a_target_with_the_referrers_api_lists_what_was_carried_and_gets_no_fallback_index(
    tmp_path: Path, source: LocalRegistry, target: LocalRegistry
) -> None:
    """The target answers the referrers API from what it stores: mirror pushes the referrer with its subject
    and maintains no fallback tag; a re-run writes nothing."""
    signed = signed_release(source)
    settings = load_settings(write_config(tmp_path / "mirror.yaml", source, [target]))
    result = sync_through(settings, [ReferrersFront(target)])

    hami_result = next(i for i in result.images if i.name == "hami")
    carried = hami_result.targets[0].referrers.to_json() if hami_result.targets[0].referrers else {}
    assert hami_result.targets[0].verified and carried["left_out"] == []
    assert sorted(c["via"] for c in carried["carried"]) == sorted(["referrers", *signed.legacy])
    assert manifest_digest(target, "mirrored/hami", fallback_tag(signed.subject)) is None
    (listed,) = stored_referrers(target, "mirrored/hami", signed.subject)
    assert (listed["digest"], listed["artifactType"]) == (signed.bundle, BUNDLE)
    for digest in (signed.bundle, *signed.legacy.values()):
        assert manifest_bytes(target, "mirrored/hami", digest) == manifest_bytes(source, "projecthami/hami", digest)

    mark = len(target.access_log())
    again = ReferrersFront(target)
    sync_through(settings, [again])
    assert writes(requests_since(target, mark)) == []
    assert f"/v2/mirrored/hami/referrers/{signed.subject}" in again.asked


def test_every_page_of_a_source_referrers_listing_is_carried(
    tmp_path: Path, source: LocalRegistry, target: LocalRegistry
) -> None:
    """The spec lets a registry page the listing (`Link: <...>; rel="next"`): a signature, an attestation and an
    SBOM, one per page, all go across and all are listed in the target's fallback index."""
    hami, _ = seed_release(source)
    subject = {"mediaType": OCI_INDEX, "digest": hami.digest, "size": len(hami.manifests[hami.digest])}
    signed = with_client(source, lambda c: sign(c, "projecthami/hami", subject))

    async def more(client: RegistryClient) -> list[str]:
        builder = SampleBuilder(client, "projecthami/hami", seed=5)
        pushed = []
        for kind in ("application/vnd.in-toto+json", "application/spdx+json"):
            doc = {
                "schemaVersion": 2,
                "mediaType": OCI_MANIFEST,
                "artifactType": kind,
                "config": await builder.blob(b"{}", OCI_EMPTY),
                "layers": [await builder.blob(kind.encode(), kind)],
                "subject": subject,
            }
            pushed.append((await builder.manifest(doc))["digest"])
        return pushed

    others = with_client(source, more)
    front = ReferrersFront(source, hidden_tags=[fallback_tag(hami.digest)], page_size=1)
    result = sync_through(load_settings(write_config(tmp_path / "mirror.yaml", source, [target])), [front])

    hami_result = next(i for i in result.images if i.name == "hami").targets[0]
    assert hami_result.verified and hami_result.referrers is not None
    listed = sorted([signed.bundle, *others])
    carried = hami_result.referrers.carried
    assert sorted(c["digest"] for c in carried if c["via"] == "referrers") == listed
    assert {c["kind"] for c in carried if c["via"] == "referrers"} == {"signature", "attestation", "sbom"}
    written = json.loads(manifest_bytes(target, "mirrored/hami", fallback_tag(hami.digest)))
    assert sorted(m["digest"] for m in written["manifests"]) == listed
    pages = [p for p in front.asked if p == f"/v2/projecthami/hami/referrers/{hami.digest}"]
    assert len(pages) == 3  # the path of each page; the query says which


def test_a_referrers_listing_that_never_ends_is_refused() -> None:
    """Each page naming another: the listing stops at a bound and says so, rather than reading forever."""
    asked: list[str] = []

    def answer(request: httpx.Request) -> httpx.Response:
        asked.append(str(request.url))
        page = int(request.url.params.get("page", "0"))
        entry = {"mediaType": OCI_MANIFEST, "digest": "sha256:" + f"{page:064x}", "size": 2}
        doc = {"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": [entry]}
        headers = {"Content-Type": OCI_INDEX, "Link": f'<?page={page + 1}>; rel="next"'}
        return httpx.Response(200, headers=headers, content=json.dumps(doc).encode())

    async def go() -> None:
        http = httpx.AsyncClient(base_url="http://127.0.0.1:9", transport=httpx.MockTransport(answer))
        client = RegistryClient("127.0.0.1:9", http)
        try:
            with pytest.raises(RegistryError, match="more than 100 pages"):
                await client.list_referrers("projecthami/hami", "sha256:" + "e" * 64)
        finally:
            await client.aclose()

    asyncio.run(go())
    assert len(asked) == 100 and asked[-1].endswith("?page=99")


def sync_refusing_one_referrer(
    tmp_path: Path, source: LocalRegistry, target: LocalRegistry, bundle: str, slow_sig: str
) -> tuple[list[ReleaseResult], list[asyncio.Task[Any]], list[Any]]:
    """Sync with the target refusing the `bundle` referrer and holding the `.sig` PUTs matching `slow_sig` for
    3 s: the results, the tasks still running once `sync` returned, and the target's writes after it did."""
    with fault_proxy(target.port) as proxy:
        refused = Fault("status", method="PUT", path=f"/manifests/{bundle}$", status=400, count=100)
        slow = Fault("stall", method="PUT", path=f"/manifests/{slow_sig}$", seconds=3, count=100)
        proxy.add(refused)
        proxy.add(slow)
        settings = load_settings(write_config(tmp_path / "mirror.yaml", source, [proxy]))

        async def run() -> tuple[list[ReleaseResult], list[asyncio.Task[Any]], float]:
            results = await sync(settings, [VERSION], SyncOptions(), Progress())
            ended = time.monotonic()
            return results, [t for t in asyncio.all_tasks() if t is not asyncio.current_task()], ended

        results, left, ended = asyncio.run(run())
    assert refused.applied > 0 and slow.applied > 0
    return results, left, [e for e in proxy.log if e.at > ended and e.method in ("POST", "PUT", "PATCH", "DELETE")]


def test_a_referrer_that_fails_lets_the_others_finish_before_the_run_ends(
    tmp_path: Path, source: LocalRegistry, target: LocalRegistry
) -> None:
    """One artifact's copy failing fails the image's target, but the other artifacts' pushes were already under
    way: the run waits for them, where they went on writing after it had closed its clients and let go of the
    target's lock (a `mirror serve` job's writes leaked into the next job; the CLI's exit cut them mid-request)."""
    signed = signed_release(source)
    results, left, writes_after = sync_refusing_one_referrer(
        tmp_path, source, target, signed.bundle, r"sha256-[0-9a-f]+\.sig"
    )
    assert any("hami" in line for r in results for line in r.failures())
    assert left == []
    assert writes_after == []
    assert manifest_digest(target, "mirrored/hami", next(t for t in signed.legacy if t.endswith(".sig"))) is not None


def test_a_subject_whose_referrer_fails_lets_the_other_subjects_finish_before_the_run_ends(
    tmp_path: Path, source: LocalRegistry, target: LocalRegistry
) -> None:
    """The same across subjects: the index's signature still on its way when a platform's is refused."""
    signed = signed_release(source)
    child = json.loads(manifest_bytes(source, "projecthami/hami", VERSION))["manifests"][0]
    child_signed = with_client(source, lambda c: sign(c, "projecthami/hami", child))
    index_sig = re.escape(fallback_tag(signed.subject)) + r"\.sig"
    results, left, writes_after = sync_refusing_one_referrer(tmp_path, source, target, child_signed.bundle, index_sig)
    assert any("hami" in line for r in results for line in r.failures())
    assert left == []
    assert writes_after == []
    assert manifest_digest(target, "mirrored/hami", f"{fallback_tag(signed.subject)}.sig") is not None
