"""Registry I/O over the OCI distribution API: the wire, and nothing about what to copy where."""

from mirror.registry.client import BlobBody, RegistryClient
from mirror.registry.errors import RegistryError, RegistryUnreachable
from mirror.registry.uploads import UploadSession

__all__ = ["BlobBody", "RegistryClient", "RegistryError", "RegistryUnreachable", "UploadSession"]
