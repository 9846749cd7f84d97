"""An ACR Enterprise namespace a run needs: found, created (`provision: true`), or explained in one line with the
console step and the API call that create it. A namespace that does not create repositories on push refuses a push
into a repository not there with a bare DENIED: each repository the run pushes to is looked up first, created with
`provision: true` (private, as CreateNamespace's default), else each missing one is named with how to make it,
before anything is copied. Nothing is created in a dry run."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from mirror.aliyun.login import ACR_REFUSALS, AcrLogin, LoginError
from mirror.errors import Kind

log = logging.getLogger("mirror")

# the code GetNamespace answers for a namespace the instance lacks (as Alibaba Cloud's terraform providers read it),
# matched whole: USER_NOT_EXIST (a RAM identity that never opened the ACR console) or INSTANCE_NOT_EXIST say otherwise
NAMESPACE_MISSING = frozenset({"NAMESPACE_NOT_EXIST"})
REPOSITORY_MISSING = frozenset({"REPO_NOT_EXIST"})  # GetRepository's answer for a repository not there
REPOSITORY_THERE = frozenset({"REPO_ALREADY_EXIST"})  # made meanwhile (another run): what was wanted
# made meanwhile: by an earlier try whose answer was lost (the login tries a passing failure again), or another run
NAMESPACE_THERE = frozenset({"NAMESPACE_ALREADY_EXIST"})
LOOKUPS_AT_ONCE = 4  # GetRepository calls in flight: each holds a worker thread, and the OpenAPI throttles bursts
REPOSITORY_SUMMARY = "Mirrored by mirror"  # CreateRepository requires a summary (1 to 80 characters)


class NamespaceMissing(LoginError):
    """The namespace is not on the instance and the config does not let mirror create it."""

    kind = Kind.REFUSED


@dataclass(frozen=True, slots=True)
class NamespaceState:
    note: str  # what was found or done, for the progress line
    creates_on_push: bool = True  # False: a push into a repository not there is refused


async def ensure_namespace(
    login: AcrLogin, instance: str, namespace: str, provision: bool, dry_run: bool
) -> NamespaceState:
    """What was found or done; raises NamespaceMissing when it is missing and may not be created, LoginError when
    the OpenAPI refuses (a missing RAM permission names its action)."""
    where = f"namespace {namespace} on {login.options.host} ({instance})"
    found = await _namespace(login, instance, namespace)
    if found is not None:
        return _found(where, found, "present")
    if dry_run:
        return NamespaceState(f"{where}: missing; would be created" if provision else f"{where}: missing")
    if not provision:
        raise NamespaceMissing(
            f"{where} does not exist: create it in the ACR console (Instances > {instance} > Repository > "
            f"Namespace > Create Namespace, with automatic repository creation on), or call CreateNamespace "
            f"(aliyun cr CreateNamespace --InstanceId {instance} --NamespaceName {namespace} --AutoCreateRepo true "
            f"--DefaultRepoType PRIVATE), or let mirror do it: registries.{login.options.host}.aliyun.provision: true"
        )
    if not await _create(login, instance, namespace):
        there = await _namespace(login, instance, namespace)  # as it was made: another run's may differ
        return _found(where, there, "created") if there is not None else NamespaceState(f"{where}: created")
    return NamespaceState(f"{where}: created (repositories created on push, private)")


def _found(where: str, found: Any, how: str) -> NamespaceState:
    """The state of a namespace GetNamespace answered for, `how` it came to be there."""
    if getattr(found, "auto_create_repo", None) is not False:
        return NamespaceState(f"{where}: {how}")
    return NamespaceState(f"{where}: {how}, repositories not created on push", creates_on_push=False)


_NO_AUTO_CREATE = "its automatic repository creation is off: the registry refuses a push into a repository not there"


def _turn_on(instance: str, namespace: str) -> str:
    return (
        f'turn on "automatically create repository" for the namespace in the ACR console (Instances > {instance} > '
        f"Repository > Namespace > {namespace} > Edit), or call UpdateNamespace (aliyun cr UpdateNamespace "
        f"--InstanceId {instance} --NamespaceName {namespace} --AutoCreateRepo true)"
    )


async def ensure_repositories(
    login: AcrLogin, instance: str, namespace: str, names: list[str], provision: bool, dry_run: bool
) -> list[str]:
    """For a namespace that does not create repositories on push: each repository of `names` (within the
    namespace) looked up, one call each at once; the missing ones created with `provision` (not in a dry run),
    else named in one warning with how to make them. What was done, for the progress lines."""
    where = f"namespace {namespace} on {login.options.host} ({instance})"
    limit = asyncio.Semaphore(LOOKUPS_AT_ONCE)

    async def present(name: str) -> bool:
        async with limit:
            return await _repository(login, instance, namespace, name)

    try:
        found = await asyncio.gather(*(present(name) for name in names))
    except LoginError as exc:  # the pushes say what the registry makes of each repository
        log.warning("%s: %s; the repositories it needs could not be looked up (%s)", where, _NO_AUTO_CREATE, exc)
        return []
    missing = [name for name, there in zip(names, found, strict=True) if not there]
    if not missing:
        return []
    if dry_run and provision:
        return [f"{where}: repository {name} missing; would be created" for name in missing]
    if not provision:
        log.warning(
            "%s: %s: %s %s; create %s (CreateRepository, or the console: Instances > %s > Repository > Create "
            "Repository), let mirror do it (registries.%s.aliyun.provision: true), or %s",
            where,
            _NO_AUTO_CREATE,
            "missing:" if len(missing) > 1 else "missing",
            ", ".join(missing),
            "them" if len(missing) > 1 else "it",
            instance,
            login.options.host,
            _turn_on(instance, namespace),
        )
        return []
    for name in missing:
        await _create_repository(login, instance, namespace, name)
    return [f"{where}: created repository {name} (private)" for name in missing]


async def _repository(login: AcrLogin, instance: str, namespace: str, name: str) -> bool:
    from alibabacloud_cr20181201 import models

    request = models.GetRepositoryRequest(instance_id=instance, repo_namespace_name=namespace, repo_name=name)
    action = f"GetRepository {namespace}/{name}"
    found = await _looked_up(
        login, instance, action, lambda: login.client().get_repository(request).body, REPOSITORY_MISSING
    )
    return found is not None


async def _create_repository(login: AcrLogin, instance: str, namespace: str, name: str) -> None:
    from alibabacloud_cr20181201 import models

    request = models.CreateRepositoryRequest(
        instance_id=instance,
        repo_namespace_name=namespace,
        repo_name=name,
        repo_type="PRIVATE",
        summary=REPOSITORY_SUMMARY,
    )
    body: Any = await login.call(lambda: login.client().create_repository(request).body)
    if getattr(body, "is_success", True) is False and body.code not in REPOSITORY_THERE:
        raise login.refused(f"CreateRepository {namespace}/{name}", instance, body.code)


async def _namespace(login: AcrLogin, instance: str, namespace: str) -> Any:
    """GetNamespace's answer, or None when the instance has no such namespace."""
    from alibabacloud_cr20181201 import models

    request = models.GetNamespaceRequest(instance_id=instance, namespace_name=namespace)
    action = f"GetNamespace {namespace}"
    return await _looked_up(
        login, instance, action, lambda: login.client().get_namespace(request).body, NAMESPACE_MISSING
    )


async def _looked_up(
    login: AcrLogin, instance: str, action: str, call: Callable[[], Any], missing: frozenset[str]
) -> Any:
    """A Get call's answer, or None where it says the thing is not there (a code of `missing`, raised or in the
    answer); a refusal said with its code (`ACR_REFUSALS`' hints)."""
    try:
        body: Any = await login.call(call)
    except LoginError as exc:
        if exc.code in missing:
            return None
        if exc.code in ACR_REFUSALS:
            raise login.refused(action, instance, exc.code) from None
        raise
    if getattr(body, "is_success", True) is False:
        if body.code in missing:
            return None
        raise login.refused(action, instance, body.code)
    return body


async def _create(login: AcrLogin, instance: str, namespace: str) -> bool:
    """True when this call made the namespace; False when ACR says it is already there."""
    from alibabacloud_cr20181201 import models

    request = models.CreateNamespaceRequest(
        instance_id=instance, namespace_name=namespace, auto_create_repo=True, default_repo_type="PRIVATE"
    )
    try:
        body: Any = await login.call(lambda: login.client().create_namespace(request).body)
    except LoginError as exc:
        if exc.code in NAMESPACE_THERE:
            return False
        raise
    if getattr(body, "is_success", True) is False:
        if body.code in NAMESPACE_THERE:
            return False
        raise login.refused(f"CreateNamespace {namespace}", instance, body.code)
    return True
