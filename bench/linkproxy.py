"""A simulated long-distance link for the benchmark: a TCP proxy on loopback that delays each direction by a
one-way latency (pipelined: bytes keep flowing while earlier ones are in flight, order kept) and caps the
bytes per second of each connection. Runs as a child process; the tools under test connect to it instead of
the registry."""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import sys
from dataclasses import dataclass

READ_SIZE = 64 * 1024


@dataclass(frozen=True, slots=True)
class LinkShape:
    round_trip: float  # seconds
    bytes_per_second: float | None = None  # per connection and direction; None: not capped

    def describe(self) -> str:
        rate = f", {self.bytes_per_second * 8 / 1e6:.0f} Mbit/s per connection" if self.bytes_per_second else ""
        return f"{self.round_trip * 1000:.0f} ms round trip{rate}"


class LinkProxy:
    """The proxy as a child process (its own event loop, its own CPU time, ended by a signal)."""

    def __init__(self, upstream_port: int, shape: LinkShape) -> None:
        self.upstream_port = upstream_port
        self.shape = shape
        self.port = 0
        self._process: subprocess.Popen[str] | None = None

    @property
    def host(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> LinkProxy:
        rate = str(self.shape.bytes_per_second or 0)
        command = [sys.executable, __file__, str(self.upstream_port), str(self.shape.round_trip), rate]
        self._process = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
        assert self._process.stdout is not None
        self.port = int(self._process.stdout.readline())
        return self

    def stop(self) -> None:
        if self._process is not None and self._process.poll() is None:
            self._process.kill()  # it holds nothing worth a clean shutdown
            self._process.wait(10)


async def serve(upstream_port: int, shape: LinkShape) -> None:
    async def handle(client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
        try:
            upstream_reader, upstream_writer = await asyncio.open_connection("127.0.0.1", upstream_port)
        except OSError:
            client_writer.close()
            return
        await asyncio.gather(
            pipe(client_reader, upstream_writer, shape),
            pipe(upstream_reader, client_writer, shape),
            return_exceptions=True,
        )

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    print(server.sockets[0].getsockname()[1], flush=True)
    async with server:
        await server.serve_forever()


async def pipe(source: asyncio.StreamReader, sink: asyncio.StreamWriter, shape: LinkShape) -> None:
    """One direction of one connection: each chunk delivered a one-way delay after it was read (reading goes
    on meanwhile), no faster than the link's rate."""
    loop = asyncio.get_running_loop()
    delay = shape.round_trip / 2
    queue: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()

    async def feed() -> None:
        with contextlib.suppress(ConnectionError, OSError):
            while data := await source.read(READ_SIZE):
                queue.put_nowait((loop.time() + delay, data))
        queue.put_nowait((loop.time() + delay, b""))

    async def deliver() -> None:
        free_at = loop.time()  # when the capped link can take the next byte
        try:
            while True:
                due, data = await queue.get()
                if data and shape.bytes_per_second:
                    free_at = max(free_at, due) + len(data) / shape.bytes_per_second
                    due = free_at
                wait = due - loop.time()
                if wait > 0:
                    await asyncio.sleep(wait)
                if not data:
                    break
                sink.write(data)
                await sink.drain()
        except ConnectionError:
            pass
        finally:
            with contextlib.suppress(OSError):
                sink.close()

    await asyncio.gather(feed(), deliver())


if __name__ == "__main__":
    port, round_trip, rate = int(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3])
    asyncio.run(serve(port, LinkShape(round_trip, rate or None)))
