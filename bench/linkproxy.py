"""A simulated long-distance link for the benchmark: a TCP proxy on loopback that delays each direction by a
one-way latency (pipelined: bytes keep flowing while earlier ones are in flight, order kept) and caps the
bytes per second of each connection. Runs its own event loop in a thread; the tools under test connect to
it instead of the registry."""

from __future__ import annotations

import asyncio
import contextlib
import threading
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
    def __init__(self, upstream_port: int, shape: LinkShape) -> None:
        self.upstream_port = upstream_port
        self.shape = shape
        self.port = 0
        self.connections = 0
        self._loop = asyncio.new_event_loop()
        self._server: asyncio.Server | None = None
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    @property
    def host(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> LinkProxy:
        self._thread.start()
        self._ready.wait(10)
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._loop.call_soon_threadsafe(self._server.close)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._server = self._loop.run_until_complete(asyncio.start_server(self._handle, "127.0.0.1", 0))
        self.port = self._server.sockets[0].getsockname()[1]
        self._ready.set()
        self._loop.run_forever()

    async def _handle(self, client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            upstream_reader, upstream_writer = await asyncio.open_connection("127.0.0.1", self.upstream_port)
        except OSError:
            client_writer.close()
            return
        await asyncio.gather(
            self._pipe(client_reader, upstream_writer),
            self._pipe(upstream_reader, client_writer),
            return_exceptions=True,
        )

    async def _pipe(self, source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
        loop = asyncio.get_running_loop()
        delay = self.shape.round_trip / 2
        queue: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()

        async def feed() -> None:
            with contextlib.suppress(ConnectionError):
                while data := await source.read(READ_SIZE):
                    queue.put_nowait((loop.time() + delay, data))
            queue.put_nowait((loop.time() + delay, b""))

        async def deliver() -> None:
            free_at = loop.time()  # when the capped link can take the next byte
            try:
                while True:
                    due, data = await queue.get()
                    if data and self.shape.bytes_per_second:
                        free_at = max(free_at, due) + len(data) / self.shape.bytes_per_second
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
