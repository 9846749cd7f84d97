"""Registry I/O over the OCI distribution API: the wire, and nothing about what to copy where."""

from mirror.registry.client import BlobBody, RegistryClient, UploadSession
from mirror.registry.errors import RegistryError, RegistryUnreachable

__all__ = ["BlobBody", "RegistryClient", "RegistryError", "RegistryUnreachable", "UploadSession"]
