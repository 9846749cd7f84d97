"""The command line: a thin face that parses arguments and hands them to the command. Each command's modules
(settings, HTTP, the engine, the service) are imported when it runs, not before `--help` answers."""

from __future__ import annotations

import argparse
import atexit
import contextlib
import gc
import os
import sys
import threading
from pathlib import Path
from typing import NoReturn

from mirror import __version__

DEFAULT_CONFIG = "config/mirror.yaml"
CONFIG_HELP = f"config file (default: $MIRROR_CONFIG, else {DEFAULT_CONFIG})"

# Help for people, kept within 80 columns: RawDescriptionHelpFormatter prints these as written.
MIRROR_DESCRIPTION = """\
Copy the container images of a HAMi release (and of the other charts in the
config) from their registries to yours (ACR), verify each copy, and write the
Helm values that install from the copies."""

CONFIG_NOTE = f"""\
config:
  --config FILE, else $MIRROR_CONFIG, else {DEFAULT_CONFIG}. A MIRROR_*
  environment variable overrides the setting it names, e.g.
  MIRROR_TRANSFER__BLOB_CONCURRENCY=8."""

SYNC_EXIT_CODES = """\
exit codes:
  0    every image verified at every target (with --dry-run: planned)
  1    something failed: one line per failure on stderr
  2    bad arguments, config, version or target name: nothing was sent
  130  stopped by Ctrl-C: in-flight uploads finish (a second Ctrl-C abandons
       them), the report is printed; no target tag moved for an unfinished copy
  143  stopped by SIGTERM: no target tag moved for an unfinished copy"""

MIRROR_EPILOG = f"""\
examples:
  # copy one release to every target, then write its Helm values
  mirror sync v2.10.0
  # every release the config's discovery filter selects
  mirror sync --discover
  # print the plan for one target: what would be copied; nothing is written
  mirror sync v2.10.0 --dry-run --target cn-hangzhou
  # the service: webhooks, the schedule, the job API
  mirror serve --port 8080

{CONFIG_NOTE}

{SYNC_EXIT_CODES}

`mirror sync --help` and `mirror serve --help` tell each command's options."""

SYNC_DESCRIPTION = """\
Copy the images of one or more releases to every target in the config (or
those named by --target). Each image is resolved at its source, copied only
where a target lacks it, and verified there. Where every image of a chart
verified, the chart is published next to them, rendered to check that it
pulls mirrored images only, and its Helm values are written."""

SYNC_EPILOG = f"""\
examples:
  mirror sync v2.10.0              # one release (2.10.0 works too)
  mirror sync v2.9.0 v2.10.0       # several releases
  mirror sync --discover           # what the discovery filter selects
  mirror sync v2.10.0 --json       # the report as JSON on stdout
  # the plan for one target (copied, mounted, skipped; bytes), nothing written
  mirror sync v2.10.0 --dry-run --target cn-hangzhou

{CONFIG_NOTE}

{SYNC_EXIT_CODES}"""

CHECK_DESCRIPTION = """\
Read the config as `mirror sync` and `mirror serve` read it (the file, MIRROR_*
variables, secret files) and print what it means: where each target pushes and
where nodes pull from, how each logs in, what a release mirrors, the schedule's
next runs. Nothing is sent to any registry, chart repository or database: for a
config's review in CI, or before a CronJob's first run."""

CHECK_EPILOG = f"""\
examples:
  mirror check                     # the config: valid, and what it says
  mirror check v2.10.0             # and the images a release copies where
  mirror check --serve             # and what `mirror serve` refuses to start on
                                   # (not opening its state directory or job store)

{CONFIG_NOTE}

exit codes:
  0    the config is valid (with --serve: nor does serve refuse it before it
       opens its state directory and job store)
  2    a problem with the config, a version or a target name, named on stderr"""

SERVE_DESCRIPTION = """\
Run the service: discovery on the config's schedule, release webhooks from CI
and Docker Hub (POST /hooks/ci, POST /hooks/dockerhub/<token>), the job API
(GET /jobs, with the API token), and /healthz, /readyz, /metrics. Each
accepted delivery is queued, then synced as `mirror sync` would."""

SERVE_EPILOG = f"""\
examples:
  mirror serve --port 8080
  MIRROR_WEBHOOK__SECRET=... MIRROR_SERVICE__API_TOKEN=... \\
    mirror serve --config /etc/mirror/mirror.yaml

{CONFIG_NOTE}

exit codes:
  0    stopped (on SIGTERM the running job gets shutdown_grace seconds)
  2    bad arguments or config, a port it cannot listen on, a job store it
       cannot open: before the service listens"""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="mirror",
        description=MIRROR_DESCRIPTION,
        epilog=MIRROR_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        allow_abbrev=False,  # `--fo` must not quietly mean --force
    )
    parser.add_argument("--version", action="version", version=f"mirror {__version__}")
    parser.add_argument("--config", type=Path, metavar="FILE", help=argparse.SUPPRESS)  # as written after the command
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    summary = "copy the images of one or more releases to every target, then write their Helm values"
    sync_cmd = _command(commands, "sync", summary, SYNC_DESCRIPTION, SYNC_EPILOG)
    sync_cmd.add_argument("versions", nargs="*", metavar="VERSION", help="release version, e.g. v2.10.0")
    sync_cmd.add_argument(
        "--discover", action="store_true", help="mirror the source releases that the discovery filter selects"
    )
    sync_cmd.add_argument("--target", action="append", default=[], metavar="NAME", help="only this target (repeatable)")
    sync_cmd.add_argument(
        "--dry-run",
        action="store_true",
        help="print the plan; push nothing, write no values (state_dir keeps its caches)",
    )
    sync_cmd.add_argument("--deep", action="store_true", help="verify by re-reading every target blob's sha256")
    sync_cmd.add_argument("--force", action="store_true", help="overwrite a target tag that points elsewhere")
    printed = sync_cmd.add_mutually_exclusive_group()
    printed.add_argument("--json", action="store_true", help="print the report as JSON on stdout")
    printed.add_argument(
        "--print-files",
        action="store_true",
        help="after the summary, print each values and RBAC file whole between '==> PATH <==' and '<== PATH ==>'",
    )
    sync_cmd.add_argument(
        "--notify", action="store_true", help="tell the notify channels what landed or failed (--discover always does)"
    )
    sync_cmd.add_argument("-v", "--verbose", action="store_true", help="log HTTP requests too")
    sync_cmd.set_defaults(command_parser=sync_cmd)
    _check_command(commands)
    summary = "run the service: scheduled discovery, webhooks, the job API"
    serve_cmd = _command(commands, "serve", summary, SERVE_DESCRIPTION, SERVE_EPILOG)
    serve_cmd.add_argument("--host", default="0.0.0.0", help="address to listen on (default 0.0.0.0)")  # noqa: S104
    serve_cmd.add_argument("--port", type=int, default=8080, help="port (default 8080)")
    return parser


def _check_command(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    summary = "read the config as sync and serve would and say what it means; nothing is sent"
    check_cmd = _command(commands, "check", summary, CHECK_DESCRIPTION, CHECK_EPILOG)
    check_cmd.add_argument("versions", nargs="*", metavar="VERSION", help="show what these releases mirror")
    check_cmd.add_argument(
        "--target", action="append", default=[], metavar="NAME", help="only this target (repeatable)"
    )
    check_cmd.add_argument(
        "--serve", action="store_true", help="also what `mirror serve --port PORT` refuses, short of opening anything"
    )
    check_cmd.add_argument("--port", type=int, default=8080, help="with --serve: the port serve is given (8080)")


def _command(
    commands: argparse._SubParsersAction[argparse.ArgumentParser],
    name: str,
    summary: str,
    description: str,
    epilog: str,
) -> argparse.ArgumentParser:
    """A command with its help as written (examples, config, exit codes) and the `--config` every command takes."""
    command = commands.add_parser(
        name,
        help=summary,
        description=description,
        epilog=epilog,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        allow_abbrev=False,
    )
    # SUPPRESS: given before the command, it is not overwritten by this parser's default
    command.add_argument("--config", type=Path, metavar="FILE", help=CONFIG_HELP, default=argparse.SUPPRESS)
    return command


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command == "serve":
        from mirror.service.app import serve

        _collect_from_here()
        return serve(args.config, args.host, args.port)
    if args.command == "check":
        from mirror.commands.check import run as check

        return check(args)
    if not args.versions and not args.discover:
        args.command_parser.error("name a release version (e.g. v2.10.0), or --discover")
    if args.versions and args.discover:
        args.command_parser.error("give release versions or --discover, not both")
    from mirror.commands.sync import run

    _collect_from_here()
    return run(args)


def _collect_from_here() -> None:
    """Turn the garbage collector back on if `entry` paused it for the imports, first setting aside (freezing)
    what they made: modules and classes live to the end, and every full collection would walk them again."""
    if not gc.isenabled():
        gc.freeze()
        gc.enable()


def entry(argv: list[str] | None = None) -> NoReturn:
    """The `mirror` command: `main`, then out without tearing the interpreter down. Freeing every module's objects
    one by one took 60 to 90 ms of a 0.6 s no-op sync, and the kernel frees them at once. The exit handlers run
    and the streams are flushed first; where another thread still runs, Python's own exit waits for it.

    The garbage collector is paused while the command's modules load (120 collections, 15 to 20 ms, that find
    nothing to free) and back on, with the loaded objects frozen, before the command runs (a no-op sync's full
    collections went from 20 ms to 3 ms)."""
    gc.disable()
    code = main(argv)
    if threading.active_count() > 1:
        raise SystemExit(code)
    atexit._run_exitfuncs()  # logging's last flush among them
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):  # a closed pipe (`mirror sync | head`) wants no more
            stream.flush()
    os._exit(code)


if __name__ == "__main__":
    entry()
