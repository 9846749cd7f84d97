"""An ACR Enterprise namespace a run needs: found, created (`provision: true`), or explained in one line with the
console step and the API call that create it. Nothing is created in a dry run."""

from __future__ import annotations

from typing import Any

from mirror.aliyun.login import ACR_REFUSALS, AcrLogin, LoginError
from mirror.errors import Kind

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
    if await _exists(login, instance, namespace):
        return f"{where}: present"
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


async def _exists(login: AcrLogin, instance: str, namespace: str) -> bool:
    from alibabacloud_cr20181201 import models

    request = models.GetNamespaceRequest(instance_id=instance, namespace_name=namespace)
    try:
        body: Any = await login.call(lambda: login.client().get_namespace(request).body)
    except LoginError as exc:
        if exc.code in NAMESPACE_MISSING:
            return False
        if exc.code in ACR_REFUSALS:
            raise login.refused(f"GetNamespace {namespace}", instance, exc.code) from None
        raise
    if getattr(body, "is_success", True) is False:
        if body.code in NAMESPACE_MISSING:
            return False
        raise login.refused(f"GetNamespace {namespace}", instance, body.code)
    return True


async def _create(login: AcrLogin, instance: str, namespace: str) -> None:
    from alibabacloud_cr20181201 import models

    request = models.CreateNamespaceRequest(
        instance_id=instance, namespace_name=namespace, auto_create_repo=True, default_repo_type="PRIVATE"
    )
    body: Any = await login.call(lambda: login.client().create_namespace(request).body)
    if getattr(body, "is_success", True) is False:
        raise login.refused(f"CreateNamespace {namespace}", instance, body.code)
