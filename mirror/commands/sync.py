"""`mirror sync`: load the settings, run the engine under SIGTERM and Ctrl-C handlers, print the report, pick the exit
code. Imported only when the command runs, so `mirror --help` stays fast."""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import logging
import signal
import sys
from pathlib import Path

from mirror.chart.proof import Proof
from mirror.engine.shutdown import SIGINT, SIGTERM, Shutdown
from mirror.engine.sync import SyncOptions, discover_and_sync, sync
from mirror.errors import MirrorError
from mirror.progress import progress_for
from mirror.report import ReleaseResult
from mirror.settings import MirrorSettings, load_settings
from mirror.untrusted import clip

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_INTERRUPTED, EXIT_TERMINATED = 0, 1, 2, 130, 143
MAX_LINE = 1000


def run(args: argparse.Namespace) -> int:
    _configure_logging(args.verbose)
    try:
        return _run(args)
    except KeyboardInterrupt:  # a third Ctrl-C, one before the run's handlers were in place, or one after the run
        print("mirror: interrupted; no target tag was moved by an unfinished copy", file=sys.stderr)
        return EXIT_INTERRUPTED


def _run(args: argparse.Namespace) -> int:
    shutdown = Shutdown()
    settings: MirrorSettings | None = None
    try:
        settings = load_settings(args.config)
        options = SyncOptions(tuple(args.target), args.dry_run, args.deep, args.force)
        results = asyncio.run(_sync(settings, args.versions, options, shutdown, args.discover))
    except MirrorError as exc:  # nothing was written; bad input exits 2 with nothing sent
        say(exc)
        # bad input (exit 2) is the terminal's to hear, not on-call's; a dry run posts nothing
        asked = (args.discover or args.notify) and not args.dry_run and exc.exit_code != EXIT_USAGE
        if settings is not None and settings.notify.channels and asked:
            tell_on_call_stopped(settings, args.versions, exc)
        return _stopped(shutdown, 1) if shutdown.signalled else exc.exit_code
    if args.json:
        payload = results[0].to_json() if len(results) == 1 and not args.discover else [r.to_json() for r in results]
        print(json.dumps(payload, indent=2))
    else:
        print_summary(results)
    if args.print_files:
        print_files(results)
    failures = [line for r in results for line in r.failures()]
    for line in failures:
        say(line)
    if settings.notify.channels and (args.discover or args.notify):
        tell_on_call(settings, results)
    if shutdown.signalled:
        return _stopped(shutdown, len(failures))
    return EXIT_FAILED if failures else EXIT_OK


def _stopped(shutdown: Shutdown, lines: int) -> int:
    by = "Ctrl-C (SIGINT)" if shutdown.reason == SIGINT else "SIGTERM"
    print(f"mirror: stopped by {by}; no tag moved for what did not finish ({lines} line(s) above)", file=sys.stderr)
    return EXIT_INTERRUPTED if shutdown.reason == SIGINT else EXIT_TERMINATED


async def _sync(
    settings: MirrorSettings, versions: list[str], options: SyncOptions, shutdown: Shutdown, discover: bool = False
) -> list[ReleaseResult]:
    """Run the sync with SIGTERM and a first Ctrl-C meaning: start nothing new, give in-flight uploads a grace
    period, then report what was done."""
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, shutdown.request, settings.shutdown_grace, SIGTERM)
    # a run started with SIGINT ignored (`mirror sync ... &` from a script) keeps ignoring it, as Python would
    hears_ctrl_c = signal.getsignal(signal.SIGINT) is not signal.SIG_IGN
    if hears_ctrl_c:
        loop.add_signal_handler(signal.SIGINT, _on_ctrl_c, loop, shutdown, settings.shutdown_grace)
    try:
        if discover:
            return await discover_and_sync(settings, options, progress_for(sys.stderr), shutdown)
        return await sync(settings, versions, options, progress_for(sys.stderr), shutdown)
    finally:
        loop.remove_signal_handler(signal.SIGTERM)
        if hears_ctrl_c:
            loop.remove_signal_handler(signal.SIGINT)


def _on_ctrl_c(loop: asyncio.AbstractEventLoop, shutdown: Shutdown, grace: float) -> None:
    """The first Ctrl-C stops the run as SIGTERM does; the next abandons what is in flight now (each upload
    session cancelled at the target, the report printed); a third is Python's own KeyboardInterrupt."""
    if not shutdown.stopping:
        shutdown.request(grace, SIGINT, hint="; Ctrl-C again abandons them now")
        return
    shutdown.abandon()
    loop.remove_signal_handler(signal.SIGINT)


def tell_on_call(settings: MirrorSettings, results: list[ReleaseResult]) -> None:
    """The run's news to the notify channels, after its report: a receiver that is down or slow costs at most
    `notify.deadline` seconds and never changes the exit code. What is owed an announcement is kept in the job
    store where there is a database (shared with the service), else under `state_dir` (`mirror.notify.ledger`)."""
    from mirror.database import driver_reason
    from mirror.notify.announce import announce
    from mirror.notify.ledger import FileLedger

    if settings.database_url is None:
        asyncio.run(announce(settings.notify, FileLedger(settings.state_dir), results))
        return
    from mirror.service.store import JobStore

    try:
        store = JobStore(settings.database_url)
    except Exception as exc:  # the database is away: told as without a ledger
        logging.getLogger("mirror").warning("on-call ledger not opened (%s)", driver_reason(exc))
        asyncio.run(announce(settings.notify, None, results))
        return
    try:
        asyncio.run(announce(settings.notify, store, results))
    finally:
        store.close()


def tell_on_call_stopped(settings: MirrorSettings, versions: list[str], error: MirrorError) -> None:
    """A run that stopped before any release's result (discovery failed, a login refused, the output not
    writable) as one failure message: a CronJob's failing runs would otherwise say nothing to the channel."""
    from mirror.notify.events import stopped
    from mirror.notify.send import notify

    asyncio.run(notify(settings.notify, [stopped(versions, "run", "mirror sync", str(error))]))


def print_files(results: list[ReleaseResult]) -> None:
    """Each values file and RBAC file the run wrote, whole, between markers naming it: a CronJob's pod and its
    files are gone when the run ends, its log is what stays (`kubectl logs`). A chart the target refused, written
    beside its values for `helm install` to take, is printed too, base64 (`<name>.tgz.base64`)."""
    for release in results:
        for values in release.values:
            files = [(values.path, values.text)]
            if values.rbac_path is not None:
                files.append((values.rbac_path, values.rbac_path.read_text(encoding="utf-8")))
            if values.chart.endswith(".tgz"):
                archive = Path(values.chart)
                files.append((Path(f"{archive}.base64"), base64.encodebytes(archive.read_bytes()).decode()))
            for path, text in files:
                body = text if text.endswith("\n") else text + "\n"
                print(f"==> {path} <==\n{body}<== {path} ==>")


def print_summary(results: list[ReleaseResult]) -> None:
    for release in results:
        print(f"release {release.version}{' (dry run)' if release.dry_run else ''}")
        for image in release.images:
            print(f"  {image.name}  {image.source}  {image.source_digest or '-'}")
            if image.signature and not image.signature.refused:
                print(f"    signature: signed by {image.signature.signer} ({image.signature.via})")
            if image.error and not image.targets:
                print(f"    NOT COPIED: {image.error}")
            for target in image.targets:
                state = "verified" if target.verified else (target.plan if target.action == "planned" else "FAILED")
                print(f"    -> {target.target}: {target.action}, {state}")
                if target.error and not target.verified:
                    print(f"       {clip(target.error, MAX_LINE)}")
                for left in target.referrers.left_out if target.referrers else ():
                    what = " ".join(left.get(key, "") for key in ("kind", "digest")).strip()
                    print(f"       {what} ({left.get('via', '-')}) left out: {left.get('reason', '')}")
                if target.rewrite:
                    rewrite = target.rewrite
                    print(f"       index rewritten: {rewrite.source_digest} -> {rewrite.target_digest}")
                    for dropped in rewrite.dropped or ():
                        print(f"       left out {dropped.digest} ({dropped.platform}): {dropped.reason}")
        for withheld in release.withheld:
            print(f"  {withheld}")
        if release.source_rate_limit:
            print(f"  source pull budget: {release.source_rate_limit}")
        for values in release.values:
            print(f"  {values.chart_name} {values.chart_version} values for {values.target}: {values.path}")
            for warning in values.warnings:
                print(f"    WARNING: {clip(warning, MAX_LINE)}")
            if values.chart_note:
                print(f"    chart: {clip(values.chart_note, MAX_LINE)}")
            if values.proof is not None:
                print_proof(values.proof)
            if values.rbac_path:
                print(f"    kubectl apply -f {values.rbac_path}")
            if values.kubectl_command:
                print(f"    anonymous pulls fail here: create the pull secret first: {values.kubectl_command}")
            print(f"    {values.helm_command}")


def print_proof(proof: Proof) -> None:
    """The render proof, image by image: references and template names come from the chart, so each is clipped
    (control characters escaped) as `say` clips a problem."""
    verdict = "every image mirrored or allowed" if proof.ok else "IMAGES LEFT ON THE SOURCE"
    print(f"    proof ({proof.renderer}): {verdict}")
    for checked in proof.images:
        note = f"; {checked.note}" if checked.note else ""
        print(f"      {clip(checked.reference)}: {checked.verdict} ({clip(checked.source)}{note})")


def say(problem: object) -> None:
    """A problem on stderr, each of its lines bounded (a name or a value from outside in it is cut short)."""
    lines = [clip(line, MAX_LINE) for line in str(problem).splitlines()] or [""]
    print("mirror: " + "\n".join(lines), file=sys.stderr)


def _configure_logging(verbose: bool) -> None:
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if not verbose:
        logging.getLogger("httpx").setLevel(logging.WARNING)
        logging.getLogger("httpcore").setLevel(logging.WARNING)
        return
    from mirror.verbose import show_requests

    show_requests()
