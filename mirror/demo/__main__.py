"""The demo: two throwaway local registries, a sample multi-arch HAMi release in the first, a sample HAMi
chart in a local chart repository, a real `mirror sync` into the second with the production config (only
the hosts changed), and the values file printed.

    python -m mirror.demo [--keep]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

import yaml

from mirror.demo.localregistry import start_registry
from mirror.demo.sample import MiB, push_multiarch, push_single
from mirror.demo.samplechart import chart_repository, hami_chart
from mirror.engine.clients import open_client
from mirror.settings import MirrorSettings

VERSION = "v2.10.0"


def demo_config(source_host: str, target_host: str, output_dir: Path, charts: str) -> dict[str, object]:
    production = yaml.safe_load(Path(__file__).resolve().parents[2].joinpath("config/mirror.yaml").read_text())
    production["source"] = {"registry": source_host}
    production["targets"] = [{"name": "demo-hangzhou", "registry": target_host, "namespace": "demo"}]
    production["output_dir"] = str(output_dir)
    production["registries"] = {source_host: {"plain_http": True}, target_host: {"plain_http": True}}
    production["chart"] = {**production["chart"], "repository": charts}
    return dict(production)


async def seed_source(host: str, settings: MirrorSettings) -> None:
    """Every Docker Hub image the sample chart can run."""
    client = open_client(settings, host)
    try:
        hami = await push_multiarch(client, "projecthami/hami", VERSION, layer_sizes=(8 * MiB, 3 * MiB), seed=1)
        certgen = await push_multiarch(client, "liangjw/kube-webhook-certgen", "v1.1.1", docker=True, seed=2)
        old_certgen = await push_single(client, "jettech/kube-webhook-certgen", "v1.5.2", seed=3)
        mock = await push_single(client, "projecthami/mock-device-plugin", "1.0.1", seed=4)
    finally:
        await client.aclose()
    for image in (hami, certgen, old_certgen, mock):
        print(
            f"seeded {host}/{image.repository}:{image.tag} {image.digest} "
            f"({len(image.manifests)} manifests, {image.blob_bytes / 1e6:.1f} MB of blobs)"
        )


def run(cmd: list[str]) -> int:
    print("\n$ " + " ".join(cmd), flush=True)
    return subprocess.call(cmd)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--keep", action="store_true", help="keep the work directory")
    args = parser.parse_args()
    sys.stdout.reconfigure(line_buffering=True)  # type: ignore[union-attr]
    workdir = Path(tempfile.mkdtemp(prefix="mirror-demo-"))
    source = start_registry(workdir / "source")
    target = start_registry(workdir / "target")
    charts = contextlib.ExitStack()
    try:
        repository = charts.enter_context(chart_repository())
        repository.add("hami", VERSION.removeprefix("v"), hami_chart(source.host, VERSION.removeprefix("v")))
        print(f"source registry (stands in for Docker Hub): {source.host}")
        print(f"target registry (stands in for ACR):        {target.host}")
        print(f"chart repository (stands in for HAMi's):    {repository.url}")
        config = demo_config(source.host, target.host, workdir / "out", repository.url)
        config_path = workdir / "mirror.yaml"
        config_path.write_text(yaml.safe_dump(config, sort_keys=False))
        asyncio.run(seed_source(source.host, MirrorSettings(**config)))  # type: ignore[arg-type]
        mirror = [sys.executable, "-m", "mirror", "sync", VERSION, "--config", str(config_path)]
        os.environ.setdefault("ACR_PASSWORD", "demo-password")  # the config names it; the demo target needs none
        if run(mirror) != 0:
            return 1
        values = workdir / "out" / "demo-hangzhou" / "hami-ack-values.yaml"
        print(f"\n--- {values} (removed when the demo ends; --keep keeps it) ---\n{values.read_text()}")
        print("Run it again: the fast path sends the source only HEADs and one referrers listing per image.")
        before = len(source.access_log())
        code = run(mirror)
        after = source.access_log()[before:]
        kinds = Counter("referrers listing" if "/referrers/" in e.path else e.method for e in after)
        print(
            "source requests on the re-run: " + ", ".join(f"{kind} x{count}" for kind, count in sorted(kinds.items()))
        )
        return code
    finally:
        charts.close()
        source.stop()
        target.stop()
        if args.keep:
            print(f"work directory kept: {workdir}")
        else:
            subprocess.call(["rm", "-rf", str(workdir)])


if __name__ == "__main__":
    raise SystemExit(main())
