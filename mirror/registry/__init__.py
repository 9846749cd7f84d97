"""Registry I/O over the OCI distribution API: the wire, and nothing about what to copy where."""

from mirror.registry.client import RegistryClient, UploadSession
from mirror.registry.errors import RegistryError, RegistryUnreachable

__all__ = ["RegistryClient", "RegistryError", "RegistryUnreachable", "UploadSession"]
