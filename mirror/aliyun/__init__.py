"""Alibaba Cloud: RAM identities turned into ACR logins, and Enterprise namespaces. Imported only when a
registry is configured with `aliyun:` (the `aliyun` extra)."""
