"""Suite-wide guards: no test reaches beyond this machine, and no async test may block its event loop."""

from __future__ import annotations

import asyncio
import inspect
import ipaddress
import socket
import time

import pytest

_real_connect = socket.socket.connect
_real_connect_ex = socket.socket.connect_ex

# A loop stalled longer than this fails the test: DB and model work belong off the loop.
MAX_LOOP_LAG = 1.0


def _allowed(sock: socket.socket, address) -> bool:
    if sock.family == socket.AF_UNIX:
        return True
    host = address[0] if isinstance(address, tuple) else address
    if host in ("localhost",):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _guarded_connect(self, address):
    if not _allowed(self, address):
        raise ConnectionRefusedError(f"tests may not reach {address!r}: only loopback is allowed")
    return _real_connect(self, address)


def _guarded_connect_ex(self, address):
    if not _allowed(self, address):
        raise ConnectionRefusedError(f"tests may not reach {address!r}: only loopback is allowed")
    return _real_connect_ex(self, address)


@pytest.fixture(autouse=True, scope="session")
def _no_network():
    mp = pytest.MonkeyPatch()
    mp.setattr(socket.socket, "connect", _guarded_connect)
    mp.setattr(socket.socket, "connect_ex", _guarded_connect_ex)
    yield
    mp.undo()


@pytest.fixture(autouse=True)
def _no_blocked_loop(request):
    if inspect.iscoroutinefunction(getattr(request.node, "function", None)):
        request.getfixturevalue("loop_watchdog")


@pytest.fixture
async def loop_watchdog():
    """Measures the event loop's worst lag during the test; fails the test above MAX_LOOP_LAG."""
    lags = []

    async def tick():
        while True:
            start = time.perf_counter()
            await asyncio.sleep(0.02)
            lags.append(time.perf_counter() - start - 0.02)

    ticker = asyncio.ensure_future(tick())
    yield lags
    ticker.cancel()
    worst = max(lags, default=0.0)
    assert worst < MAX_LOOP_LAG, f"the event loop was blocked for {worst:.2f} s"


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.delenv("HEARTH_HOME", raising=False)
    path = tmp_path / "home"
    path.mkdir()
    return path


@pytest.fixture
async def listener():
    """A TCP server on the host's loopback, outside any sandbox: (port, accepted), where `accepted` counts the
    connections that reached it (the sandbox escape and network tests)."""
    accepted = []

    async def on_connect(reader, writer):
        accepted.append(1)
        writer.write(b"hello from the host\n")
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(on_connect, "127.0.0.1", 0)
    yield server.sockets[0].getsockname()[1], accepted
    server.close()
    await server.wait_closed()
