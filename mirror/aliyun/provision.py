"""An ACR Enterprise namespace a run needs: found, created (`provision: true`), or explained in one line with the
console step and the API call that create it; a namespace found that does not create repositories on push is
warned of (a push into a repository not created beforehand is refused with a bare DENIED; repositories made by
hand still take theirs). Nothing is created in a dry run."""

from __future__ import annotations

import logging
from typing import Any

from mirror.aliyun.login import ACR_REFUSALS, AcrLogin, LoginError
from mirror.errors import Kind

log = logging.getLogger("mirror")

# the code GetNamespace answers for a namespace the instance lacks (as Alibaba Cloud's terraform providers read it),
# matched whole: USER_NOT_EXIST (a RAM identity that never opened the ACR console) or INSTANCE_NOT_EXIST say otherwise
NAMESPACE_MISSING = frozenset({"NAMESPACE_NOT_EXIST"})


class NamespaceMissing(LoginError):
    """The namespace is not on the instance and the config does not let mirror create it."""

    kind = Kind.REFUSED


async def ensure_namespace(login: AcrLogin, instance: str, namespace: str, provision: bool, dry_run: bool) -> str:
    """What was found or done, for the progress line; raises NamespaceMissing when it is missing and may not
    be created, LoginError when the OpenAPI refuses (a missing RAM permission names its action)."""
    where = f"namespace {namespace} on {login.options.host} ({instance})"
    found = await _namespace(login, instance, namespace)
    if found is not None:
        if getattr(found, "auto_create_repo", None) is not False:
            return f"{where}: present"
        log.warning(
            "%s: %s: unless each repository was created by hand, %s",
            where,
            _NO_AUTO_CREATE,
            _turn_on(instance, namespace),
        )
        return f"{where}: present, repositories not created on push"
    if dry_run:
        return f"{where}: missing; would be created" if provision else f"{where}: missing"
    if not provision:
        raise NamespaceMissing(
            f"{where} does not exist: create it in the ACR console (Instances > {instance} > Repository > "
            f"Namespace > Create Namespace, with automatic repository creation on), or call CreateNamespace "
            f"(aliyun cr CreateNamespace --InstanceId {instance} --NamespaceName {namespace} --AutoCreateRepo true "
            f"--DefaultRepoType PRIVATE), or let mirror do it: registries.{login.options.host}.aliyun.provision: true"
        )
    await _create(login, instance, namespace)
    return f"{where}: created (repositories created on push, private)"


_NO_AUTO_CREATE = "its automatic repository creation is off: the registry refuses a push into a repository not there"


def _turn_on(instance: str, namespace: str) -> str:
    return (
        f'turn on "automatically create repository" for the namespace in the ACR console (Instances > {instance} > '
        f"Repository > Namespace > {namespace} > Edit), or call UpdateNamespace (aliyun cr UpdateNamespace "
        f"--InstanceId {instance} --NamespaceName {namespace} --AutoCreateRepo true)"
    )


async def _namespace(login: AcrLogin, instance: str, namespace: str) -> Any:
    """GetNamespace's answer, or None when the instance has no such namespace."""
    from alibabacloud_cr20181201 import models

    request = models.GetNamespaceRequest(instance_id=instance, namespace_name=namespace)
    try:
        body: Any = await login.call(lambda: login.client().get_namespace(request).body)
    except LoginError as exc:
        if exc.code in NAMESPACE_MISSING:
            return None
        if exc.code in ACR_REFUSALS:
            raise login.refused(f"GetNamespace {namespace}", instance, exc.code) from None
        raise
    if getattr(body, "is_success", True) is False:
        if body.code in NAMESPACE_MISSING:
            return None
        raise login.refused(f"GetNamespace {namespace}", instance, body.code)
    return body


async def _create(login: AcrLogin, instance: str, namespace: str) -> None:
    from alibabacloud_cr20181201 import models

    request = models.CreateNamespaceRequest(
        instance_id=instance, namespace_name=namespace, auto_create_repo=True, default_repo_type="PRIVATE"
    )
    body: Any = await login.call(lambda: login.client().create_namespace(request).body)
    if getattr(body, "is_success", True) is False:
        raise login.refused(f"CreateNamespace {namespace}", instance, body.code)
