from mirror.cli import entry

entry()
