"""The command line: a thin face that parses arguments and hands them to the command. Each command's modules
(settings, HTTP, the engine, the service) are imported when it runs, not before `--help` answers."""

from __future__ import annotations

import argparse
from pathlib import Path

from mirror import __version__


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="mirror", description=__doc__)
    parser.add_argument("--version", action="version", version=f"mirror {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)
    sync_cmd = commands.add_parser("sync", help="copy the images of one or more releases to every target")
    sync_cmd.add_argument("versions", nargs="*", metavar="VERSION", help="release version, e.g. v2.10.0")
    sync_cmd.add_argument(
        "--discover", action="store_true", help="mirror the source releases that the discovery filter selects"
    )
    sync_cmd.add_argument("--config", type=Path, help="config file (default: $MIRROR_CONFIG or config/mirror.yaml)")
    sync_cmd.add_argument("--target", action="append", default=[], metavar="NAME", help="only this target (repeatable)")
    sync_cmd.add_argument("--dry-run", action="store_true", help="print the plan; write nothing")
    sync_cmd.add_argument("--deep", action="store_true", help="verify by re-reading every target blob's sha256")
    sync_cmd.add_argument("--force", action="store_true", help="overwrite a target tag that points elsewhere")
    sync_cmd.add_argument("--json", action="store_true", help="print the report as JSON on stdout")
    sync_cmd.add_argument("-v", "--verbose", action="store_true", help="log HTTP requests too")
    serve_cmd = commands.add_parser("serve", help="run the service: scheduled discovery, webhooks, job records")
    serve_cmd.add_argument("--config", type=Path, help="config file (default: $MIRROR_CONFIG or config/mirror.yaml)")
    serve_cmd.add_argument("--host", default="0.0.0.0", help="address to listen on (default 0.0.0.0)")  # noqa: S104
    serve_cmd.add_argument("--port", type=int, default=8080, help="port (default 8080)")
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command == "serve":
        from mirror.service.app import serve

        return serve(args.config, args.host, args.port)
    if bool(args.versions) == args.discover:
        parser.error("give release versions or --discover, not both")
    from mirror.commands.sync import run

    return run(args)


if __name__ == "__main__":
    raise SystemExit(main())
