"""What mirror knows of HAMi's chart (2.7 and later) without reading it: the values keys of its own images,
and which of them a default install runs. Used when no `chart:` is configured."""

from __future__ import annotations

from mirror.chart.images import DEFAULT_REGISTRY, ImageBlock

# repository at Docker Hub -> the values keys that point at it
VALUES_KEYS: dict[str, tuple[str, ...]] = {
    "projecthami/hami": ("scheduler.extender.image", "devicePlugin.image", "devicePlugin.monitor.image"),
    "liangjw/kube-webhook-certgen": ("scheduler.patch.imageNew",),  # Kubernetes >= 1.22
    "jettech/kube-webhook-certgen": ("scheduler.patch.image",),  # Kubernetes < 1.22
    "projecthami/mock-device-plugin": ("mockDevicePlugin.image",),  # mockDevicePlugin.enabled
}
RELEASE_REPOSITORY = "projecthami/hami"


def default_install_blocks(release_tag: str) -> list[ImageBlock]:
    """The Docker Hub images a default install of the release runs on Kubernetes >= 1.22."""
    own = [
        ImageBlock.at(key, DEFAULT_REGISTRY, RELEASE_REPOSITORY, release_tag) for key in VALUES_KEYS[RELEASE_REPOSITORY]
    ]
    return [
        *own,
        ImageBlock.at("scheduler.patch.imageNew", DEFAULT_REGISTRY, "liangjw/kube-webhook-certgen", "v1.1.1"),
    ]
