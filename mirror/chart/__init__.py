"""The release's Helm chart: fetched from its repository, opened as untrusted input, read for the images it
can run, rendered to prove the values, and published to the target as an OCI chart."""
