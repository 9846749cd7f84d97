"""The demo: throwaway local registries standing in for Docker Hub, nvcr.io, quay.io and registry.k8s.io, sample
multi-arch releases of HAMi and HAMi-WebUI (with its dcgm-exporter and kube-prometheus-stack subcharts) in them,
their charts in a local chart server, a real `mirror sync` into a target registry standing in for ACR with the
production config (its `charts:` block turned on, only the hosts changed), and the values printed.

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
from typing import Any

import yaml

from mirror.demo.localregistry import LocalRegistry, start_registry
from mirror.demo.sample import MiB, push_multiarch, push_single
from mirror.demo.samplechart import chart_server, hami_chart
from mirror.demo.samplewebui import seed_webui_images, webui_chart
from mirror.demo.shipped import shipped_config
from mirror.engine.clients import open_client
from mirror.registry import RegistryClient
from mirror.settings import MirrorSettings

VERSION = "v2.10.0"
WEBUI_VERSION = "1.3.0"
SOURCES = {"hub": "Docker Hub", "nvcr": "nvcr.io", "quay": "quay.io", "k8s": "registry.k8s.io"}


def demo_config(sources: dict[str, str], target_host: str, output_dir: Path, charts: str) -> dict[str, Any]:
    production = shipped_config("charts")
    production["source"] = {"registry": sources["hub"]}
    production["targets"] = [{"name": "demo-hangzhou", "registry": target_host, "namespace": "demo"}]
    production["output_dir"] = str(output_dir)
    production["state_dir"] = str(output_dir.parent / "state")  # the run's lock files, beside its output
    production["registries"] = {host: {"plain_http": True} for host in [*sources.values(), target_host]}
    production["chart"] = {**production["chart"], "repository": f"{charts}/HAMi"}
    production["charts"] = [{**chart, "repository": f"{charts}/HAMi-WebUI"} for chart in production["charts"]]
    return production


async def seed_sources(settings: MirrorSettings, sources: dict[str, str]) -> dict[str, str]:
    """Every image the sample HAMi chart can run, at the Docker Hub stand-in, and every image HAMi-WebUI and its
    subcharts can run, each at its own registry's stand-in; returns the WebUI images' digests."""
    clients: dict[str, RegistryClient] = {key: open_client(settings, host) for key, host in sources.items()}
    try:
        hub = clients["hub"]
        pushed = [
            await push_multiarch(hub, "projecthami/hami", VERSION, layer_sizes=(8 * MiB, 3 * MiB), seed=1),
            await push_multiarch(hub, "liangjw/kube-webhook-certgen", "v1.1.1", docker=True, seed=2),
            await push_single(hub, "jettech/kube-webhook-certgen", "v1.5.2", seed=3),
            await push_single(hub, "projecthami/mock-device-plugin", "1.0.1", seed=4),
        ]
        for image in pushed:
            print(f"seeded {hub.host}/{image.repository}:{image.tag} {image.digest} ({len(image.manifests)} manifests)")
        digests = await seed_webui_images(clients, (WEBUI_VERSION,))
        print(f"seeded {len(digests)} HAMi-WebUI, dcgm-exporter and kube-prometheus-stack images across 4 registries")
        return digests
    finally:
        await asyncio.gather(*(client.aclose() for client in clients.values()))


def run(cmd: list[str]) -> int:
    print("\n$ " + " ".join(cmd), flush=True)
    return subprocess.call(cmd)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--keep", action="store_true", help="keep the work directory")
    args = parser.parse_args()
    sys.stdout.reconfigure(line_buffering=True)  # type: ignore[union-attr]
    workdir = Path(tempfile.mkdtemp(prefix="mirror-demo-"))
    registries: dict[str, LocalRegistry] = {}
    servers = contextlib.ExitStack()
    try:
        for key in (*SOURCES, "target"):
            registries[key] = start_registry(workdir / key)
            servers.callback(registries[key].stop)
        target = registries.pop("target")
        charts = servers.enter_context(chart_server())
        sources = {key: registry.host for key, registry in registries.items()}
        for key, name in SOURCES.items():
            print(f"{name:<16} stands in at {sources[key]}")
        print(f"ACR              stands in at {target.host}")
        print(f"chart server (project-hami.github.io): {charts.origin} (/HAMi, /HAMi-WebUI)")
        config = demo_config(sources, target.host, workdir / "out", charts.origin)
        config_path = workdir / "mirror.yaml"
        config_path.write_text(yaml.safe_dump(config, sort_keys=False))
        digests = asyncio.run(seed_sources(MirrorSettings(**config), sources))
        charts.repository("/HAMi").add("hami", VERSION.removeprefix("v"), hami_chart(sources["hub"], "2.10.0"))
        webui = webui_chart(digests, WEBUI_VERSION, **sources)  # keyed hub, nvcr, quay, k8s as the chart takes them
        charts.repository("/HAMi-WebUI").add("hami-webui", WEBUI_VERSION, webui)
        mirror = [sys.executable, "-m", "mirror", "sync", VERSION, "--config", str(config_path)]
        os.environ.setdefault("ACR_PASSWORD", "demo-password")  # the config names it; the demo target needs none
        if run(mirror) != 0:
            return 1
        for name in ("hami-ack-values.yaml", "hami-webui-values.yaml"):
            values = workdir / "out" / "demo-hangzhou" / name
            print(f"\n--- {values} (removed when the demo ends; --keep keeps it) ---\n{values.read_text()}")
        print("Run it again: the sources get only HEADs (what refers to each image included), no manifest or blob GET.")
        marks = {key: len(registry.access_log()) for key, registry in registries.items()}
        code = run(mirror)
        after = [e for key, registry in registries.items() for e in registry.access_log()[marks[key] :]]
        kinds = Counter("referrers listing" if "/referrers/" in e.path else e.method for e in after)
        print(
            "source requests on the re-run: " + ", ".join(f"{kind} x{count}" for kind, count in sorted(kinds.items()))
        )
        return code
    finally:
        servers.close()
        if args.keep:
            print(f"work directory kept: {workdir}")
        else:
            subprocess.call(["rm", "-rf", str(workdir)])


if __name__ == "__main__":
    raise SystemExit(main())
