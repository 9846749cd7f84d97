"""The commands behind the CLI, each imported only when it runs."""
