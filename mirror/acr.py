"""Alibaba Cloud Container Registry as mirror knows it: which public host has which VPC host, the edition of a
host, and how its manifest policy refuses a manifest class."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from mirror.registry.errors import RegistryError

# (public form, VPC form) for each edition; see the README's endpoint table.
_VPC_FORMS: tuple[tuple[re.Pattern[str], str], ...] = (
    (
        re.compile(r"^registry-intl\.(?P<region>[a-z0-9-]+)\.aliyuncs\.com$"),
        "registry-intl-vpc.{region}.aliyuncs.com",
    ),
    (re.compile(r"^registry\.(?P<region>[a-z0-9-]+)\.aliyuncs\.com$"), "registry-vpc.{region}.aliyuncs.com"),
    (
        re.compile(r"^crpi-(?P<id>[a-z0-9]+)\.(?P<region>[a-z0-9-]+)\.personal\.cr\.aliyuncs\.com$"),
        "crpi-{id}-vpc.{region}.personal.cr.aliyuncs.com",
    ),
    (
        re.compile(r"^(?P<instance>[a-z0-9-]+?)-registry\.(?P<region>[a-z0-9-]+)\.cr\.aliyuncs\.com$"),
        "{instance}-registry-vpc.{region}.cr.aliyuncs.com",
    ),
)
_ALREADY_VPC = re.compile(r"(^registry(-intl)?-vpc\.|^crpi-[a-z0-9]+-vpc\.|-registry-vpc\.)")


def vpc_host_for(registry: str) -> str:
    """The VPC endpoint nodes should pull from. A host that is already a VPC endpoint, or not an ACR
    endpoint at all (a test registry, another vendor), is returned unchanged."""
    host = registry.lower()
    if _ALREADY_VPC.search(host):
        return host
    for pattern, vpc_form in _VPC_FORMS:
        match = pattern.match(host)
        if match:
            return vpc_form.format(**match.groupdict())
    return registry


PERSONAL_CLASSIC = "personal"  # registry.<region>.aliyuncs.com, registry-intl.<region>.aliyuncs.com
PERSONAL_NEW = "personal-crpi"  # crpi-<id>.<region>.personal.cr.aliyuncs.com: no anonymous pulls at all
ENTERPRISE = "enterprise"  # <instance>-registry.<region>.cr.aliyuncs.com

_EDITIONS: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"^crpi-[a-z0-9]+(-vpc)?\.[a-z0-9-]+\.personal\.cr\.aliyuncs\.com$"), PERSONAL_NEW),
    (re.compile(r"^[a-z0-9-]+-registry(-vpc)?\.[a-z0-9-]+\.cr\.aliyuncs\.com$"), ENTERPRISE),
    (re.compile(r"^registry(-intl)?(-vpc)?\.[a-z0-9-]+\.aliyuncs\.com$"), PERSONAL_CLASSIC),
)


def edition_of(registry: str) -> str | None:
    """The ACR edition a host belongs to, or None for a registry that is not ACR."""
    host = registry.lower()
    for pattern, edition in _EDITIONS:
        if pattern.match(host):
            return edition
    return None


def is_personal(registry: str) -> bool:
    return edition_of(registry) in (PERSONAL_CLASSIC, PERSONAL_NEW)


def allows_anonymous_pull(registry: str) -> bool | None:
    """False where the edition never allows anonymous pulls; None where only a probe can tell."""
    return False if edition_of(registry) == PERSONAL_NEW else None


_REGION_IN_HOST = re.compile(r"\.(?P<region>[a-z]{2}-[a-z0-9-]+?)\.(personal\.cr\.|cr\.)?aliyuncs\.com$")
_INSTANCE_IN_SERVICE = re.compile(r"(?:^|:)(?P<instance>cri-[a-z0-9]+)$")


def region_of(registry: str) -> str | None:
    """`cn-hangzhou` from any ACR endpoint form, or None for a host that is not ACR."""
    match = _REGION_IN_HOST.search(registry.lower())
    return match["region"] if match and edition_of(registry) else None


def instance_of(service: str | None) -> str | None:
    """An Enterprise instance's id from its token challenge: `registry.aliyuncs.com:<region>:china:cri-<id>`."""
    match = _INSTANCE_IN_SERVICE.search(service or "")
    return match["instance"] if match else None


PERSONAL_NAMESPACES = 3  # what a Personal Edition instance allows


def missing_namespace_hint(registry: str, error: Exception) -> str:
    """On a Personal Edition instance a push into a namespace that does not exist is refused: say where the
    namespace is made, and the quota, since mirror cannot create one there."""
    code = str(getattr(error, "code", "") or "")
    if not is_personal(registry) or code not in ("DENIED", "NAME_UNKNOWN", "NAME_INVALID"):
        return ""
    return (
        f" (if the namespace does not exist: create it in the ACR console, Personal Edition > Namespaces; "
        f"an instance holds at most {PERSONAL_NAMESPACES} namespaces)"
    )


# The Personal Edition takes image manifests and indexes only. Its refusal, as distribution's
# `policy.repository.classes` words it: a config type it has no class for, or a class it does not allow.
_CLASS_REFUSAL = re.compile(r"unknown manifest class for \S|registry does not allow \S+ manifest", re.IGNORECASE)


def refuses_manifest_class(error: RegistryError) -> bool:
    """The registry will not take this kind of manifest (a BuildKit attestation, a signature, a Helm chart):
    403 `DENIED` `unknown manifest class for application/vnd.oci.empty.v1+json`. Any other answer (a denied
    push, an invalid manifest, a digest mismatch, a server error) is a failure, not a class refusal."""
    return error.status == 403 and error.code == "DENIED" and _CLASS_REFUSAL.search(error.message) is not None
