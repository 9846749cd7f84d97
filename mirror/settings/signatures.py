"""Images that must be signed, and by whom: checked at the source, before anything is copied."""

# No `from __future__ import annotations` in a module of models: pydantic would compile each field's annotation
# from its string at import, a tenth of the config's import time.
import fnmatch
import importlib.util
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Self

from pydantic import Field, field_validator, model_validator

from mirror.reference import spellings
from mirror.settings.fields import Section, shown


class SignatureRule(Section):
    """Images that must be signed, and by whom: checked at the source, before anything is copied."""

    # source repositories, globs allowed: projecthami/*, docker.io/projecthami/hami, nginx (Docker Hub's library/nginx)
    repositories: list[str] = Field(min_length=1)
    identity: str | None = None  # the certificate's identity, exactly (cosign --certificate-identity)
    identity_regexp: str | None = None  # or a pattern searched in it (--certificate-identity-regexp)
    issuer: str | None = None  # the OIDC issuer, exactly (--certificate-oidc-issuer)
    issuer_regexp: str | None = None

    @field_validator("identity_regexp", "issuer_regexp")
    @classmethod
    def _pattern(cls, value: str | None) -> str | None:
        if value is not None:
            try:
                re.compile(value)
            except re.error as exc:
                raise ValueError(f"{shown(value)} is not a regular expression: {exc}") from None
        return value

    @model_validator(mode="after")
    def _one_of_each(self) -> Self:
        for name in ("identity", "issuer"):
            exact, pattern = getattr(self, name), getattr(self, f"{name}_regexp")
            if (exact is None) == (pattern is None):
                raise ValueError(f"give exactly one of {name} and {name}_regexp")
        return self

    def applies_to(self, registry: str, repository: str) -> bool:
        """A pattern matches any spelling of the repository (`reference.spellings`): the engine's names are
        normalised (registry-1.docker.io, library/nginx), the config's are the ones people write."""
        written = spellings(registry, repository)
        return any(names_one_of(pattern, written) for pattern in self.repositories)


def names_one_of(pattern: str, written: tuple[str, ...]) -> bool:
    return any(fnmatch.fnmatchcase(name, pattern) for name in written)


class SignatureSettings(Section):
    # Sigstore's trusted root (a trusted_root.json); default: the public-good instance, refreshed over TUF
    trusted_root: Path | None = None
    require: list[SignatureRule] = []
    max_bytes: int = Field(default=1024 * 1024, ge=1024, le=64 * 1024 * 1024)  # per bundle, payload, Rekor answer

    @field_validator("trusted_root")
    @classmethod
    def _readable(cls, value: Path | None) -> Path | None:
        if value is not None and not value.is_file():
            raise ValueError(f"{value}: no such file")
        return value

    @model_validator(mode="after")
    def _verifier_installed(self) -> Self:
        if self.require and importlib.util.find_spec("sigstore") is None:
            raise ValueError("require: needs sigstore-python: pip install 'mirror[signatures]'")
        return self

    def rule_for(self, registry: str, repository: str) -> SignatureRule | None:
        """The first rule naming the repository: rules are read in order, as written."""
        return next((r for r in self.require if r.applies_to(registry, repository)), None)

    def unmatched(self, repositories: Iterable[tuple[str, str]]) -> list[str]:
        """The patterns that name none of these (registry, repository) pairs: a rule that checks nothing."""
        written = [spellings(registry, repository) for registry, repository in repositories]
        return [
            pattern
            for rule in self.require
            for pattern in rule.repositories
            if not any(names_one_of(pattern, spelt) for spelt in written)
        ]
