from __future__ import annotations

import pytest

from mirror.reference import Reference, ReferenceError, Repository, parse
from mirror.release import VersionError, chart_version, normalise_version, version_key
from mirror.settings.signatures import SignatureRule, SignatureSettings


@pytest.mark.parametrize(
    ("text", "registry", "name", "identifier"),
    [
        ("nginx", "registry-1.docker.io", "library/nginx", "latest"),
        ("docker.io/nginx:1.27", "registry-1.docker.io", "library/nginx", "1.27"),
        ("index.docker.io/projecthami/hami:v2.10.0", "registry-1.docker.io", "projecthami/hami", "v2.10.0"),
        ("projecthami/hami:v2.10.0", "registry-1.docker.io", "projecthami/hami", "v2.10.0"),
        ("localhost:5000/a/b/c:t", "localhost:5000", "a/b/c", "t"),
        ("127.0.0.1:5000/a", "127.0.0.1:5000", "a", "latest"),
        (
            "registry.cn-hangzhou.aliyuncs.com/ns/hami@sha256:" + "a" * 64,
            "registry.cn-hangzhou.aliyuncs.com",
            "ns/hami",
            "sha256:" + "a" * 64,
        ),
    ],
)
def test_parse_normalises_docker_hub(text: str, registry: str, name: str, identifier: str) -> None:
    ref = parse(text)
    assert (ref.repository.registry, ref.repository.name, ref.identifier) == (registry, name, identifier)


@pytest.mark.parametrize("text", ["UPPER/case", "a//b", "-lead/x", "x/y:bad tag", "x@sha256:short"])
def test_parse_refuses_invalid(text: str) -> None:
    with pytest.raises(ReferenceError):
        parse(text)


def test_repository_and_reference_strings() -> None:
    repo = Repository.of("docker.io", "busybox")
    assert str(repo) == "registry-1.docker.io/library/busybox"
    assert str(Reference(repo, "1.36")) == "registry-1.docker.io/library/busybox:1.36"
    assert Repository.of("127.0.0.1:5000", "busybox").name == "busybox"  # library/ is Docker Hub's alone


@pytest.mark.parametrize(
    ("given", "normal"), [("v2.10.0", "v2.10.0"), ("2.10.0", "v2.10.0"), ("v2.5.0-rc.1", "v2.5.0-rc.1")]
)
def test_versions_are_normalised(given: str, normal: str) -> None:
    assert normalise_version(given) == normal
    assert chart_version(given) == normal[1:]


@pytest.mark.parametrize("bad", ["latest", "v2.10", "2.10.0.1", "v02.1.0", "v2.10.0;rm", "", "vv2.1.0", "v2.1.0-"])
def test_bad_versions_are_refused(bad: str) -> None:
    with pytest.raises(VersionError, match="invalid version"):
        normalise_version(bad)


def test_version_order() -> None:
    versions = ["v2.9.0", "v2.10.0", "v2.10.0-rc.1", "v2.4.1"]
    assert sorted(versions, key=version_key) == ["v2.4.1", "v2.9.0", "v2.10.0-rc.1", "v2.10.0"]


@pytest.mark.parametrize(
    ("pattern", "registry", "repository", "names"),
    [
        ("docker.io/projecthami/hami", "registry-1.docker.io", "projecthami/hami", True),
        ("index.docker.io/projecthami/*", "registry-1.docker.io", "projecthami/hami", True),
        ("registry-1.docker.io/projecthami/hami", "registry-1.docker.io", "projecthami/hami", True),
        ("projecthami/*", "registry-1.docker.io", "projecthami/hami", True),
        ("nginx", "registry-1.docker.io", "library/nginx", True),
        ("docker.io/nginx", "registry-1.docker.io", "library/nginx", True),
        ("docker.io/library/nginx", "registry-1.docker.io", "library/nginx", True),
        ("docker.io/*", "registry-1.docker.io", "projecthami/hami", True),
        ("nvcr.io/nvidia/*", "nvcr.io", "nvidia/k8s/dcgm-exporter", True),
        ("nvidia/k8s/*", "nvcr.io", "nvidia/k8s/dcgm-exporter", True),
        ("docker.io/nvidia/*", "nvcr.io", "nvidia/k8s/dcgm-exporter", False),
        ("quay.io/projecthami/hami", "registry-1.docker.io", "projecthami/hami", False),
        ("docker.io/other/*", "registry-1.docker.io", "projecthami/hami", False),
        ("nginx", "quay.io", "library/nginx", False),  # library/ is Docker Hub's alone
    ],
)
def test_a_signature_rule_names_a_repository_as_people_write_it(
    pattern: str, registry: str, repository: str, names: bool
) -> None:
    rule = SignatureRule(repositories=[pattern], identity="someone", issuer="https://issuer")
    assert rule.applies_to(registry, repository) is names
    assert SignatureSettings(require=[rule]).unmatched([(registry, repository)]) == ([] if names else [pattern])
