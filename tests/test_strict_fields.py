"""A value checked by a pattern is checked whole: a trailing newline (a YAML block scalar, `namespace: |`, or a
variable read from a file) is refused at load, not carried into the values as `repository: 'my-ns\\n/...'`."""

from __future__ import annotations

from pathlib import Path

import pytest

from mirror import reference
from mirror.settings import ConfigError, load_settings
from tests.test_settings import VALID, config_file, with_changes

ACR = "registry.cn-hangzhou.aliyuncs.com"
ACR_ENTERPRISE = "hami-registry.cn-hangzhou.cr.aliyuncs.com"


def target(**changes: object) -> list[dict[str, object]]:
    return [{"name": "hz", "registry": ACR, "namespace": "ns", **changes}]


def chart(**changes: object) -> dict[str, object]:
    return {"repository": "https://charts.example/hami", **changes}


def install(**changes: object) -> list[dict[str, object]]:
    return [{"repository": "https://charts.example/webui", "name": "hami-webui", **changes}]


def image(**changes: object) -> list[dict[str, object]]:
    return [{"name": "hami", "source": "projecthami/hami", **changes}]


# (the config, the key the refusal names); each value ends with the newline a block scalar leaves
NEWLINE_ENDED = [
    (with_changes(targets=target(namespace="my-ns\n")), "targets.0.namespace"),
    (with_changes(targets=target(registry=ACR_ENTERPRISE, namespace="team\n")), "targets.0.namespace"),
    (with_changes(targets=target(registry=ACR + "\n")), "targets.0.registry"),
    (with_changes(targets=target(name="hz\n")), "targets.0.name"),
    (with_changes(targets=target(pull_secret="acr-pull\n")), "targets.0.pull_secret"),
    (with_changes(images=image(source="projecthami/hami\n")), "images.0.source"),
    (with_changes(images=image(tag="v2.10.0\n")), "images.0.tag"),
    (with_changes(images=image(name="hami\n")), "images.0.name"),
    (with_changes(images=image(values_keys=["scheduler.image\n"])), "images.0.values_keys"),
    (with_changes(chart=chart(kube_version="1.32.0\n")), "chart.kube_version"),
    (with_changes(chart=chart(name="hami\n")), "chart.name"),
    (with_changes(chart=chart(release_repository="projecthami/hami\n")), "chart.release_repository"),
    (with_changes(chart=chart(repository="https://charts.example/hami\n")), "chart.repository"),
    (with_changes(chart=chart(), charts=install(version="1.3.0\n")), "charts.0.version"),
    (with_changes(chart=chart(), charts=install(namespace="gpu\n")), "charts.0.namespace"),
    (with_changes(chart=chart(), charts=install(release="webui\n")), "charts.0.release"),
    (with_changes(chart=chart(), charts=install(file_name="webui.yaml\n")), "charts.0.file_name"),
    (with_changes(values={"kube_namespace": "kube-system\n"}), "values.kube_namespace"),
    (with_changes(values={"release": "hami\n"}), "values.release"),
    (with_changes(registries={"r.example": {"username": "u", "password_env": "PW\n"}}), "password_env"),
    (with_changes(registries={"r.example\n": {}}), "registries"),
]


@pytest.mark.parametrize(("data", "key"), NEWLINE_ENDED, ids=[case[1] for case in NEWLINE_ENDED])
def test_a_value_ending_in_a_newline_is_refused_at_load(tmp_path: Path, data: dict[str, object], key: str) -> None:
    with pytest.raises(ConfigError) as refused:
        load_settings(config_file(tmp_path, data))
    assert key in str(refused.value) and "\\n'" in str(refused.value), refused.value  # the value quoted, \n shown


def test_a_block_scalar_namespace_is_refused(tmp_path: Path) -> None:
    text = f"images: [{{name: hami, source: projecthami/hami}}]\ntargets:\n  - name: hz\n    registry: {ACR}\n"
    with pytest.raises(ConfigError, match=r"targets\.0\.namespace: .*'my-ns\\n'"):
        load_settings(config_file(tmp_path, text + "    namespace: |\n      my-ns\n"))


def test_a_variable_ending_in_a_newline_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MIRROR_SOURCE__REGISTRY", "docker.io\n")  # a ConfigMap made with --from-file
    with pytest.raises(ConfigError, match=r"source\.registry \(set by the environment variable MIRROR_SOURCE__REG"):
        load_settings(config_file(tmp_path, VALID))


@pytest.mark.parametrize(
    "check",
    [
        lambda: reference.validate_repository("projecthami/hami\n"),
        lambda: reference.validate_host("docker.io\n"),
        lambda: reference.parse("nginx:1.27\n"),
        lambda: reference.parse("nginx@sha256:" + "a" * 64 + "\n"),
    ],
    ids=["repository", "host", "tag", "digest"],
)
def test_references_refuse_a_trailing_newline(check: object) -> None:
    with pytest.raises(reference.ReferenceError):
        check()  # type: ignore[operator]
    assert not reference.is_valid_tag("v1\n") and not reference.is_valid_digest("sha256:" + "a" * 64 + "\n")


def test_the_same_values_without_the_newline_still_load(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PW", "a-registry-password")
    data = with_changes(
        targets=target(registry=ACR_ENTERPRISE, namespace="team/gpu", pull_secret="acr-pull"),
        images=image(tag="v2.10.0", values_keys=["scheduler.image"]),
        chart=chart(kube_version="v1.32.0", release_repository="docker.io/projecthami/hami"),
        charts=install(version="1.3.0", namespace="gpu", release="webui", file_name="webui.yaml"),
        registries={"r.example": {"username": "u", "password_env": "PW"}},
    )
    settings = load_settings(config_file(tmp_path, data))
    assert settings.targets[0].namespace == "team/gpu" and settings.chart is not None
    assert settings.chart.kube_version == "1.32.0" and settings.charts[0].version == "1.3.0"
