"""Index entries with a platform variant (`linux/arm64/v8`, as Docker's official images name arm64) kept by a
`platforms:` filter that names no variant, as containerd matches them; and foreign (non-distributable) layers,
which the source registry does not serve: named by the copied manifest, never copied or checked at the target."""

from __future__ import annotations

import json
import random
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from mirror import oci
from mirror.demo.localregistry import IDENTITY_HEADER, LocalRegistry, registry_binary, start_registry
from mirror.demo.sample import SampleBuilder, SampleImage
from mirror.engine.policy import select
from mirror.engine.tree import ManifestTree
from mirror.oci import Manifest, sha256_digest
from tests.support import blob_exists, manifest_bytes, manifest_digest, sync_json, with_client, write_config
from tests.test_sync import VERSION

DOCKER_LAYER = "application/vnd.docker.image.rootfs.diff.tar.gzip"
DOCKER_FOREIGN_LAYER = "application/vnd.docker.image.rootfs.foreign.diff.tar.gzip"
OCI_LAYER = "application/vnd.oci.image.layer.v1.tar+gzip"
FOREIGN_LAYER_TYPES = [
    DOCKER_FOREIGN_LAYER,
    "application/vnd.oci.image.layer.nondistributable.v1.tar",
    "application/vnd.oci.image.layer.nondistributable.v1.tar+gzip",
    "application/vnd.oci.image.layer.nondistributable.v1.tar+zstd",
]
WINDOWS_BASE_URL = "https://mcr.microsoft.com/v2/windows/servercore/blobs/"


# --- the matching rules ---------------------------------------------------------------------------------------


def image_child(seed: int) -> Manifest:
    config = {"mediaType": oci.OCI_CONFIG, "digest": sha256_digest(b"%d" % seed), "size": 1}
    return Manifest.parse(json.dumps({"schemaVersion": 2, "mediaType": oci.OCI_MANIFEST, "config": config}).encode())


def platform_json(platform: str) -> dict[str, str]:
    os_name, architecture, *variant = platform.split("/")
    return {"os": os_name, "architecture": architecture, **({"variant": variant[0]} if variant else {})}


def kept_platforms(platforms: list[str], offered: list[str]) -> list[str]:
    """The platforms among `offered` (one image each) that `select` keeps under the filter `platforms`."""
    children = [image_child(i) for i in range(len(offered))]
    entries = [
        {"mediaType": oci.OCI_MANIFEST, "digest": child.digest, "size": len(child.raw), "platform": platform_json(p)}
        for child, p in zip(children, offered, strict=True)
    ]
    root = Manifest.parse(json.dumps({"schemaVersion": 2, "mediaType": oci.OCI_INDEX, "manifests": entries}).encode())
    kept, _ = select(ManifestTree(root, tuple(children)), "auto", platforms)
    return [platform for child, platform in zip(children, offered, strict=True) if child in kept]


def test_a_filter_without_a_variant_keeps_every_variant_of_its_os_and_arch() -> None:
    offered = ["linux/amd64", "linux/arm64/v8", "linux/arm/v7", "linux/arm/v6", "windows/arm64", "linux/s390x"]
    assert kept_platforms(["linux/amd64", "linux/arm64"], offered) == ["linux/amd64", "linux/arm64/v8"]
    assert kept_platforms(["linux/arm"], offered) == ["linux/arm/v7", "linux/arm/v6"]
    assert kept_platforms(["linux/arm64"], ["linux/arm64", "linux/arm/v7"]) == ["linux/arm64"]


def test_a_filter_with_a_variant_keeps_it_and_an_entry_without_one_where_it_is_the_default() -> None:
    offered = ["linux/arm64", "linux/arm64/v8", "linux/arm64/v9", "linux/arm", "linux/arm/v7", "linux/arm/v6"]
    offered += ["linux/amd64"]
    wanted = ["linux/arm64/v8", "linux/arm/v7", "linux/amd64/v3"]  # an entry without a variant: arm64 is v8, arm is v7
    assert kept_platforms(wanted, offered) == ["linux/arm64", "linux/arm64/v8", "linux/arm", "linux/arm/v7"]
    assert kept_platforms(["linux/arm64/v9", "linux/arm/v6"], offered) == ["linux/arm64/v9", "linux/arm/v6"]


# --- a variant entry copied end to end ------------------------------------------------------------------------


async def push_variant_index(builder: SampleBuilder, tag: str) -> SampleImage:
    """An OCI index as Docker's official images are: linux/amd64 and linux/arm64/v8, each with its
    attestation manifest."""
    amd64 = await builder.image_manifest("linux/amd64", [builder.random_layer(1024)])
    arm64 = await builder.image_manifest("linux/arm64", [builder.random_layer(1024)])
    arm64["platform"]["variant"] = "v8"
    entries = [amd64, arm64, await builder.attestation(amd64["digest"]), await builder.attestation(arm64["digest"])]
    index = {"schemaVersion": 2, "mediaType": oci.OCI_INDEX, "manifests": entries}
    return await builder.finish(tag, await builder.manifest(index, tag))


def test_a_filter_without_variants_keeps_the_arm64_v8_entry(
    tmp_path: Path, source: LocalRegistry, target: LocalRegistry, capsys: pytest.CaptureFixture[str]
) -> None:
    image = with_client(source, lambda c: push_variant_index(SampleBuilder(c, "library/nginx", seed=3), "1.27"))
    config = write_config(
        tmp_path / "mirror.yaml",
        source,
        [target],
        images=[{"name": "nginx", "source": "library/nginx", "tag": "1.27"}],
        target_options={"platforms": ["linux/amd64", "linux/arm64"]},
    )

    code, report, err = sync_json(config, capsys, VERSION)

    assert code == 0, err
    (result,) = report["images"][0]["targets"]
    assert "rewrite" not in result  # nothing left out: the index went across as it is
    assert manifest_digest(target, "mirrored/nginx", "1.27") == image.digest
    index = json.loads(manifest_bytes(target, "mirrored/nginx", "1.27"))
    platforms = [platform_json_string(entry["platform"]) for entry in index["manifests"]]
    assert platforms[:2] == ["linux/amd64", "linux/arm64/v8"]
    for entry in index["manifests"]:
        assert manifest_bytes(target, "mirrored/nginx", entry["digest"]) == image.manifests[entry["digest"]]
    assert all(blob_exists(target, "mirrored/nginx", digest) for digest in image.blobs)


def platform_json_string(platform: dict[str, str]) -> str:
    return "/".join(filter(None, (platform["os"], platform["architecture"], platform.get("variant"))))


# --- foreign layers -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("media_type", FOREIGN_LAYER_TYPES)
def test_foreign_layers_are_not_blobs_to_copy(media_type: str) -> None:
    config = {"mediaType": oci.OCI_CONFIG, "digest": sha256_digest(b"config"), "size": 6}
    local = {"mediaType": OCI_LAYER, "digest": sha256_digest(b"local"), "size": 5}
    foreign = {"mediaType": media_type, "digest": sha256_digest(b"foreign"), "size": 7, "urls": [WINDOWS_BASE_URL]}
    doc = {"schemaVersion": 2, "mediaType": oci.OCI_MANIFEST, "config": config, "layers": [foreign, local]}
    manifest = Manifest.parse(json.dumps(doc).encode())

    assert [blob.digest for blob in manifest.blobs] == [config["digest"], local["digest"]]
    assert [blob.digest for blob in ManifestTree(manifest, ()).blobs()] == [config["digest"], local["digest"]]
    assert len(manifest.layers) == 2  # still named by the manifest, whose bytes are what is pushed


FOREIGN_URLS_ALLOWED = {"manifests": {"urls": {"allow": ["^https://mcr\\.microsoft\\.com/"]}}}


@contextmanager
def registry_taking_foreign_layers(workdir: Path) -> Iterator[LocalRegistry]:
    """A docker-registry that takes manifests naming foreign layers: distribution refuses a layer URL its
    `validation.manifests.urls.allow` does not admit, and `start_registry` has no option for that section, so
    the registry it starts is stopped and served again, on the same port, with the section added."""
    started = start_registry(workdir)
    started.stop()
    config_path = workdir / "config.yml"
    config = yaml.safe_load(config_path.read_text(encoding="utf-8"))
    config["validation"] = FOREIGN_URLS_ALLOWED
    config_path.write_text(yaml.safe_dump(config), encoding="utf-8")
    with started.log_path.open("ab") as log:
        process = subprocess.Popen([registry_binary(), "serve", str(config_path)], stdout=log, stderr=log)
    registry = LocalRegistry(workdir, started.port, process, started.address, identity=started.identity)
    try:
        wait_until_serving(registry)
        yield registry
    finally:
        registry.stop()


def wait_until_serving(registry: LocalRegistry, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert registry.process.poll() is None, registry.log_path.read_text(errors="replace")[-2000:]
        try:
            if httpx.get(f"{registry.url}/v2/", timeout=1.0).headers.get(IDENTITY_HEADER) == registry.identity:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.05)
    raise AssertionError(f"docker-registry on {registry.host} did not come back within {timeout} s")


@pytest.fixture
def foreign_source(tmp_path: Path) -> Iterator[LocalRegistry]:
    with registry_taking_foreign_layers(tmp_path / "source") as registry:
        yield registry


@pytest.fixture
def foreign_target(tmp_path: Path) -> Iterator[LocalRegistry]:
    with registry_taking_foreign_layers(tmp_path / "target") as registry:
        yield registry


async def windows_image(builder: SampleBuilder, foreign: dict[str, Any]) -> dict[str, Any]:
    """A Windows image as Docker Hub serves one: its base layer foreign (bytes at Microsoft's registry, never
    pushed here), then a layer of its own."""
    config = {"architecture": "amd64", "os": "windows", "rootfs": {"type": "layers", "diff_ids": []}}
    doc = {
        "schemaVersion": 2,
        "mediaType": oci.DOCKER_MANIFEST,
        "config": await builder.blob(json.dumps(config).encode(), oci.DOCKER_CONFIG),
        "layers": [foreign, await builder.blob(builder.random_layer(2048), DOCKER_LAYER)],
    }
    descriptor = await builder.manifest(doc)
    descriptor["platform"] = {"architecture": "amd64", "os": "windows", "os.version": "10.0.17763.6054"}
    return descriptor


async def push_index_with_windows_entry(builder: SampleBuilder, tag: str, foreign: dict[str, Any]) -> SampleImage:
    """A Docker manifest list with a linux/amd64 image and a windows/amd64 image that has a foreign layer."""
    linux = await builder.image_manifest("linux/amd64", [builder.random_layer(2048)], docker=True)
    index = {
        "schemaVersion": 2,
        "mediaType": oci.DOCKER_MANIFEST_LIST,
        "manifests": [linux, await windows_image(builder, foreign)],
    }
    return await builder.finish(tag, await builder.manifest(index, tag))


def foreign_layer() -> dict[str, Any]:
    data = random.Random(11).randbytes(4096)  # never pushed anywhere: only its digest and size are named
    digest = sha256_digest(data)
    return {"mediaType": DOCKER_FOREIGN_LAYER, "digest": digest, "size": len(data), "urls": [WINDOWS_BASE_URL + digest]}


def test_an_index_with_a_windows_entry_is_copied_without_its_foreign_layer(
    tmp_path: Path,
    foreign_source: LocalRegistry,
    foreign_target: LocalRegistry,
    capsys: pytest.CaptureFixture[str],
) -> None:
    foreign = foreign_layer()
    image = with_client(
        foreign_source,
        lambda c: push_index_with_windows_entry(SampleBuilder(c, "library/python", seed=5), "3", foreign),
    )
    images = [{"name": "python", "source": "library/python", "tag": "3"}]
    config = write_config(tmp_path / "mirror.yaml", foreign_source, [foreign_target], images=images)

    for args in ((VERSION,), (VERSION,), (VERSION, "--deep")):  # the copy, a no-op, a deep verification
        code, report, err = sync_json(config, capsys, *args)
        assert code == 0, err
        assert report["images"][0]["targets"][0]["verified"] is True

    assert manifest_digest(foreign_target, "mirrored/python", "3") == image.digest
    for digest, raw in image.manifests.items():
        assert manifest_bytes(foreign_target, "mirrored/python", digest) == raw
    assert all(blob_exists(foreign_target, "mirrored/python", digest) for digest in image.blobs)
    assert [e for e in foreign_target.access_log() if foreign["digest"] in e.path] == []
    assert [e for e in foreign_source.access_log() if foreign["digest"] in e.path] == []
