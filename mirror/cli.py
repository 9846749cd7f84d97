"""The command line: a thin face that builds settings, calls the engine and presents its report."""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import signal
import sys
from pathlib import Path

from mirror import __version__
from mirror.chart.archive import ChartError
from mirror.engine.discover import DiscoveryError
from mirror.engine.lock import LockTimeout
from mirror.engine.shutdown import Shutdown
from mirror.engine.sync import SyncOptions, discover_and_sync, sync
from mirror.progress import progress_for
from mirror.reference import ReferenceError
from mirror.release import VersionError
from mirror.report import ReleaseResult
from mirror.settings import ConfigError, MirrorSettings, load_settings

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_TERMINATED = 0, 1, 2, 143


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
        from mirror.service.app import serve  # the service's imports stay off the CLI's start-up

        return serve(args.config, args.host, args.port)
    if bool(args.versions) == args.discover:
        parser.error("give release versions or --discover, not both")
    _configure_logging(args.verbose)
    shutdown = Shutdown()
    try:
        settings = load_settings(args.config)
        options = SyncOptions(tuple(args.target), args.dry_run, args.deep, args.force)
        results = asyncio.run(_sync(settings, args.versions, options, shutdown, args.discover))
    except (ConfigError, VersionError, ReferenceError) as exc:
        print(f"mirror: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except (LockTimeout, DiscoveryError, ChartError) as exc:  # nothing was written
        print(f"mirror: {exc}", file=sys.stderr)
        return EXIT_FAILED
    except KeyboardInterrupt:
        print("mirror: interrupted; no target tag was moved by an unfinished copy", file=sys.stderr)
        return 130
    if args.json:
        payload = results[0].to_json() if len(results) == 1 and not args.discover else [r.to_json() for r in results]
        print(json.dumps(payload, indent=2))
    else:
        print_summary(results)
    failures = [line for r in results for line in r.failures()]
    for line in failures:
        print(f"mirror: {line}", file=sys.stderr)
    if shutdown.stopping:
        print(
            f"mirror: stopped by SIGTERM; {len(failures)} copy(ies) left unfinished, no tag moved for them",
            file=sys.stderr,
        )
        return EXIT_TERMINATED
    return EXIT_FAILED if failures else EXIT_OK


async def _sync(
    settings: MirrorSettings, versions: list[str], options: SyncOptions, shutdown: Shutdown, discover: bool = False
) -> list[ReleaseResult]:
    """Run the sync with SIGTERM meaning: start nothing new, give in-flight uploads a grace period."""
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, shutdown.request, settings.shutdown_grace)
    try:
        if discover:
            return await discover_and_sync(settings, options, progress_for(sys.stderr), shutdown)
        return await sync(settings, versions, options, progress_for(sys.stderr), shutdown)
    finally:
        loop.remove_signal_handler(signal.SIGTERM)


def print_summary(results: list[ReleaseResult]) -> None:
    for release in results:
        print(f"release {release.version}{' (dry run)' if release.dry_run else ''}")
        for image in release.images:
            print(f"  {image.name}  {image.source}  {image.source_digest or '-'}")
            for target in image.targets:
                state = "verified" if target.verified else (target.plan if target.action == "planned" else "FAILED")
                print(f"    -> {target.target}: {target.action}, {state}")
                if target.rewrite:
                    rewrite = target.rewrite
                    print(f"       index rewritten: {rewrite['source_digest']} -> {rewrite['target_digest']}")
                    for dropped in target.rewrite.get("dropped", []):
                        print(f"       left out {dropped['digest']} ({dropped['platform']}): {dropped['reason']}")
        if release.source_rate_limit:
            print(f"  source pull budget: {release.source_rate_limit}")
        for values in release.values:
            print(f"  values for {values.target}: {values.path}")
            for warning in values.warnings:
                print(f"    WARNING: {warning}")
            if values.chart_note:
                print(f"    chart: {values.chart_note}")
            if values.proof is not None:
                verdict = "every image mirrored or allowed" if values.proof["ok"] else "IMAGES LEFT ON THE SOURCE"
                print(f"    proof ({values.proof['renderer']}): {verdict}")
                for image in values.proof["images"]:
                    print(f"      {image['image']}: {image['verdict']} ({image['from']})")
            if values.rbac_path:
                print(f"    kubectl apply -f {values.rbac_path}")
            if values.kubectl_command:
                print(f"    anonymous pulls fail here: create the pull secret first: {values.kubectl_command}")
            print(f"    {values.helm_command}")


def _configure_logging(verbose: bool) -> None:
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if not verbose:
        logging.getLogger("httpx").setLevel(logging.WARNING)
        logging.getLogger("httpcore").setLevel(logging.WARNING)


if __name__ == "__main__":
    raise SystemExit(main())
