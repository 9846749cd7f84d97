"""mirror: copy container images registry to registry, verified, and write Helm values for the copy."""

import sys

__version__ = "0.1.0"

# httpx imports its command-line client (click, rich and pygments: about 80 ms of start-up) whenever those happen
# to be installed, and mirror never uses it. A None entry makes that optional import fail at once, as httpx
# expects when they are missing.
sys.modules.setdefault("httpx._main", None)  # type: ignore[arg-type]  # None: "not importable"
