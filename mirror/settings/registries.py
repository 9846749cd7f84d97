"""Where images come from and go to: each registry's transport and login, the source, and the targets (with
ACR's namespace rules per edition)."""

# No `from __future__ import annotations` in a module of models: pydantic would compile each field's annotation
# from its string at import, a tenth of the config's import time.
import importlib.util
import os
import re
from pathlib import Path
from typing import Annotated, Literal, Self

from pydantic import AfterValidator, Field, SecretStr, field_validator, model_validator

from mirror import acr
from mirror.placeholders import LOGIN_PLACEHOLDER, is_placeholder
from mirror.settings.fields import (
    EnvName,
    Host,
    KubeObjectName,
    NotBlank,
    PlainName,
    Platform,
    Section,
    matching,
    not_blank,
    one_source,
    shown,
)
from mirror.settings.inputs import secret_text

# Each pattern is used whole (fullmatch): `$` would also match before a final newline
_PATH_COMPONENT = re.compile(r"[a-z0-9]+(?:(?:\.|_|__|-+)[a-z0-9]+)*")  # the OCI distribution spec's
# ACR's own namespace rules: Personal Edition 2-30 of [a-z0-9_-]; Enterprise 2-120 of [a-z0-9._-]; both
# start and end with a letter or a digit
_ACR_PERSONAL_NAMESPACE = re.compile(r"[a-z0-9][a-z0-9_-]{0,28}[a-z0-9]")
_ACR_ENTERPRISE_NAMESPACE = re.compile(r"[a-z0-9][a-z0-9._-]{0,118}[a-z0-9]")

ALIYUN_CREDENTIALS = ("default", "oidc_role_arn", "access_key", "ecs_ram_role")
InstanceId = Annotated[
    str, AfterValidator(matching(re.compile(r"cri-[a-z0-9]+"), "an ACR Enterprise instance id (cri-...)"))
]
RegionId = Annotated[str, AfterValidator(matching(re.compile(r"[a-z]{2}-[a-z0-9-]+"), "a region id like cn-hangzhou"))]


class AliyunLoginSettings(Section):
    """A temporary ACR login from a RAM identity (ACR's GetAuthorizationToken) instead of a stored password:
    RRSA on ACK, an AccessKey pair in CI, an ECS instance's RAM role."""

    # default: the official alibabacloud-credentials chain (AccessKey variables, RRSA's variables, the CLI's
    # profile, then the ECS RAM role); or one of them alone
    credentials: Literal["default", "oidc_role_arn", "access_key", "ecs_ram_role"] = "default"
    instance_id: InstanceId | None = None  # Enterprise's cri-...; default: named by the registry's token challenge
    region: RegionId | None = None  # default: from the registry host
    endpoint: Host | None = None  # the ACR OpenAPI host; default: cr.<region>.aliyuncs.com
    # create a namespace the run needs (Enterprise), and repositories where it does not create them on push,
    # instead of explaining how
    provision: bool = False
    timeout: float = Field(default=30.0, gt=0, le=600)  # each OpenAPI and STS call

    @model_validator(mode="after")
    def _sdk_installed(self) -> Self:
        if importlib.util.find_spec("alibabacloud_cr20181201") is None:
            raise ValueError("needs the Alibaba Cloud SDKs: pip install 'mirror[aliyun]'")
        return self


class RegistrySettings(Section):
    """Transport settings for one registry host[:port]."""

    plain_http: bool = False
    username: NotBlank | None = None
    password: SecretStr | None = None
    password_file: Path | None = None
    password_env: EnvName | None = None  # the name of an environment variable that holds the password
    # HTTP/1.1 asks one thing per connection at a time: a no-op verifies two three-platform images (30 HEADs)
    # in one round trip with 32, in two with 16 (across the border: 0.66 s to 0.54 s, cold and fan-out no slower)
    max_connections: int = Field(default=32, ge=1, le=256)
    # HTTP/2 over TLS: every request to the host multiplexed on one connection (no handshake per connection
    # opened); a host that does not offer h2 is spoken to in HTTP/1.1 as before
    http2: bool = False

    @field_validator("password")
    @classmethod
    def _password(cls, value: SecretStr | None) -> SecretStr | None:
        if value is not None:
            not_blank(value.get_secret_value())
            if is_placeholder(value.get_secret_value()):
                raise ValueError(LOGIN_PLACEHOLDER)
        return value

    @field_validator("username")
    @classmethod
    def _username(cls, value: str | None) -> str | None:
        if value is not None and is_placeholder(value):
            raise ValueError("is a placeholder: put the registry account's real name there")
        return value

    aliyun: AliyunLoginSettings | None = None  # an ACR host: log in with a RAM identity, no stored password

    @model_validator(mode="after")
    def _one_password(self) -> Self:
        one_source("password", password=self.password, password_file=self.password_file, password_env=self.password_env)
        given = self._password_key()
        if self.aliyun is not None and (self.username or given):
            raise ValueError("aliyun: logs in with a RAM identity; give no username or password with it")
        # the config's login is sent only as a pair: either half alone would be ignored, the run going on with a
        # docker config or anonymously
        if given and not self.username:
            raise ValueError(f"{given} is given without a username: give username too")
        if self.username and not given:
            raise ValueError(
                "username is given without a password: give password_env, password_file or password too (or leave "
                "both out to use a docker config or its credential helper)"
            )
        return self

    def _password_key(self) -> str | None:
        keys = {"password": self.password, "password_file": self.password_file, "password_env": self.password_env}
        return next((key for key, value in keys.items() if value is not None), None)

    def login_origin(self, host: str) -> str:
        """Where this entry's login is set, for a registry's refusal to name: the setting, and the variable or
        file the password is read from (never the password)."""
        where = f"registries.{host}"
        if self.password_env is not None:
            return f"{where}: username and password_env {self.password_env}"
        if self.password_file is not None:
            return f"{where}: username and password_file {self.password_file}"
        return f"{where}: username and password"

    def password_value(self) -> str | None:
        if self.password is not None:
            return secret_text(self.password.get_secret_value())
        if self.password_env is not None:
            value = os.environ.get(self.password_env)
            return None if value is None else secret_text(value)
        if self.password_file is not None:
            return secret_text(self.password_file.read_text(encoding="utf-8"))
        return None


class SourceSettings(Section):
    registry: Host = "docker.io"


class TargetSettings(Section):
    name: PlainName
    registry: Host
    namespace: str
    vpc_registry: Host | None = None
    # attestation and other non-image entries of an index: copy them (keep), leave them out (drop), or
    # copy them and leave out only those the target refuses for their manifest class (auto)
    attestations: Literal["keep", "drop", "auto"] = "auto"
    platforms: list[Platform] | None = None  # e.g. [linux/amd64]: write a filtered index
    referrers: bool = True  # carry signatures, attestations and SBOMs that refer to each copied image
    pull_secret: KubeObjectName | None = None  # always put this global.imagePullSecrets entry in the values
    pull_secret_name: KubeObjectName = "acr-pull"  # noqa: S105 - a Secret object name, used when anonymous pulls fail

    @field_validator("namespace")
    @classmethod
    def _namespace(cls, value: str) -> str:
        if len(value) > 255 or not all(_PATH_COMPONENT.fullmatch(part) for part in value.split("/")):
            raise ValueError(
                f"{shown(value)}: expected lower-case path components of letters and digits, with '.', '_' or '-' "
                "only between them"
            )
        return value

    @model_validator(mode="after")
    def _edition_rules(self) -> Self:
        personal = acr.is_personal(self.registry)
        if "/" in self.namespace and personal:
            raise ValueError(
                f"namespace {shown(self.namespace)}: ACR personal edition ({self.registry}) takes exactly "
                "<namespace>/<repository>, no deeper paths"
            )
        first = self.namespace.split("/")[0]  # Enterprise: the namespace; the rest is the repository's path
        if personal and not _ACR_PERSONAL_NAMESPACE.fullmatch(first):
            raise ValueError(
                f"namespace {shown(first)}: an ACR personal edition namespace is 2-30 lower-case letters, digits, '_' "
                "or '-', starting and ending with a letter or digit"
            )
        if acr.edition_of(self.registry) == acr.ENTERPRISE and not _ACR_ENTERPRISE_NAMESPACE.fullmatch(first):
            raise ValueError(
                f"namespace {shown(first)}: an ACR Enterprise namespace is 2-120 lower-case letters, digits, '.', '_' "
                "or '-', starting and ending with a letter or digit"
            )
        return self
