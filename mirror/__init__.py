"""mirror: copy container images registry to registry, verified, and write Helm values for the copy."""

__version__ = "0.1.0"
