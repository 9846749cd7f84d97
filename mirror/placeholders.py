"""Placeholders where a secret or a login goes: what the repository itself shows there (deploy/'s Secrets, the
README's examples), left in place or pasted unexpanded, is known to everyone who can read the repository. Read by
the settings at load and by the registry's credentials wherever a password or a docker config is read again."""

from __future__ import annotations

# Any value that is a phrase wrapped in <...> is one too.
SHIPPED_PLACEHOLDERS = frozenset(
    {
        "<a long random string shared with CI>",  # deploy/base/secret.yaml
        "<a long random string: the bearer token for GET /jobs>",
        "<your Alibaba Cloud account name>",
        "<your ACR registry password>",
        "<optional Docker Hub user>",
        "<optional Docker Hub token>",
        "<postgresql+psycopg://user:password@host:5432/database>",  # deploy/overlays/postgres/database-secret.yaml
        "<a long random string>",  # README.md's examples
        "<account>",
        "<password>",
        "...",
        "$(openssl rand -hex 32)",  # the command that makes one, quoted so that the shell did not run it
        "${{ secrets.MIRROR_WEBHOOK_SECRET }}",  # the CI example's expression, which only GitHub Actions expands
    }
)
PLACEHOLDER = (
    "is a placeholder, not a secret: put the real value there (a key or token of your own: openssl rand -hex 32)"
)
LOGIN_PLACEHOLDER = "is a placeholder, not a login: put the registry's real username and password there"


def is_placeholder(value: str) -> bool:
    """Whether a secret or login is one of the repository's placeholders (SHIPPED_PLACEHOLDERS) or reads like
    one: a phrase wrapped in <...> (`<your ACR registry password>`). A value in <...> without a space is not: a
    password manager may make one."""
    text = value.strip()
    phrase = text.startswith("<") and text.endswith(">") and any(c.isspace() for c in text)
    return phrase or text in SHIPPED_PLACEHOLDERS
