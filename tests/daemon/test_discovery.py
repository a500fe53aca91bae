"""palaced.discovery: the TXT record parser (pure), and real mDNS between run_discovery instances.

Real mDNS multicasts, so those tests run only inside network namespaces they create, never in the
root namespace (STYLE §33): one private namespace with only loopback (``unshare -n``, the CI
fallback deps-notes §3 describes), and two namespaces joined by a veth pair (``ip netns``), the
realistic case. Creating namespaces needs root; without it, or without ``unshare``/``ip``, they
skip and say why. Each namespace runs ``tests/daemon/mdns_probe.py``, which prints JSON lines of
what every instance saw and dials each advertised address to prove it usable.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import trio

from palaced.discovery import Sighting, sighting_from_record
from tests.netns import needs_namespaces
from tests.netns import netns_pair as netns_pair_of

ROOT = Path(__file__).resolve().parents[2]
# Why 20 s: discovery takes ~2 s (registration probing is 1.6 s); a loaded CI machine gets margin.
WAIT_S = 20.0
# Why 10 s: after stdin closes, every instance unregisters (~0.25 s each) and the process exits.
EXIT_S = 10.0
NAME = "peer-name"
PALACE, OTHER_PALACE = "palace-P", "palace-Q"
A, B = "PEERAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA", "PEERBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBB"
# C and D form another palace: D is the control that proves C's record crossed the same link A and B use.
C, D = "PEERCCCCCCCCCCCCCCCCCCCCCCCCCCCCCCCCCCCCCCCCCCCCCCCCCC", "PEERDDDDDDDDDDDDDDDDDDDDDDDDDDDDDDDDDDDDDDDDDDDDDDDDDD"
VERSION = 3


def spec(peer: str, palace: str) -> dict[str, Any]:
    return {"peer": peer, "palace": palace, "version": VERSION, "name": f"box {peer[4]} (test)"}


# -- the parser -----------------------------------------------------------------------------------

def parse(properties: dict[bytes, bytes | None], addresses: list[str] = ["10.0.0.2"],  # noqa: B006
          port: int | None = 4001) -> Sighting | None:
    return sighting_from_record("x._palace._tcp.local.", properties, addresses, port, palace_id=PALACE, peer_id=A)


GOOD = {b"palace": PALACE.encode(), b"peer": B.encode(), b"v": b"3"}


def test_parser_accepts_a_peer_of_our_palace():
    assert parse({**GOOD, b"extra": b"ignored", b"flag": None}, ["10.0.0.2", "2001:db8::1"]) == Sighting(
        peer_id=B, palace_id=PALACE, version=3, addresses=("10.0.0.2:4001", "[2001:db8::1]:4001"),
        name="x._palace._tcp.local.")


def test_parser_ignores_other_palaces_and_ourselves():
    """Guards: a daemon never dials itself or a daemon of another palace on the same LAN."""
    assert parse({**GOOD, b"palace": OTHER_PALACE.encode()}) is None
    assert parse({**GOOD, b"peer": A.encode()}) is None


@pytest.mark.parametrize("properties", [
    {},
    {b"palace": PALACE.encode(), b"peer": B.encode()},              # no version
    {b"palace": PALACE.encode(), b"v": b"3"},                       # no peer
    {b"peer": B.encode(), b"v": b"3"},                              # no palace
    {**GOOD, b"peer": b""},
    {**GOOD, b"peer": None},                                        # key without a value
    {**GOOD, b"v": b"three"},
    {**GOOD, b"v": b"-1"},
    {**GOOD, b"v": b"3.0"},
    {**GOOD, b"v": "³".encode()},                                   # a digit to str.isdigit, not to int()
    {**GOOD, b"peer": b"\xff\xfe"},                                 # not UTF-8
    {**GOOD, b"\xff": b"x"},
], ids=repr)
def test_parser_ignores_malformed_records(properties):
    assert parse(properties) is None


def test_parser_needs_a_usable_address():
    assert parse(GOOD, []) is None
    assert parse(GOOD, ["not-an-ip"]) is None
    assert parse(GOOD, port=None) is None
    assert parse(GOOD, port=0) is None
    assert parse(GOOD, ["bogus", "10.0.0.2"]).addresses == ("10.0.0.2:4001",)


# -- real mDNS inside namespaces ------------------------------------------------------------------

class Probe:
    """One ``mdns_probe`` process, its JSON events so far, and its stderr log."""

    def __init__(self, label: str, process: trio.Process, log: Path) -> None:
        self.label, self.process, self.log = label, process, log
        self.events: list[dict[str, Any]] = []
        self._partial = b""

    def report(self) -> str:
        events = "\n".join(json.dumps(e) for e in self.events)
        log = self.log.read_text(errors="replace")[-6000:] if self.log.exists() else ""
        return f"--- {self.label} events:\n{events}\n--- {self.label} stderr (tail):\n{log}"

    async def _read(self) -> bool:
        """Read more of stdout; False at EOF."""
        assert self.process.stdout is not None
        data = await self.process.stdout.receive_some()
        *lines, self._partial = (self._partial + data).split(b"\n")
        self.events.extend(json.loads(line) for line in lines if line.strip())
        return bool(data)

    async def wait_for(self, what: str, predicate: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
        with trio.move_on_after(WAIT_S):
            while True:
                for event in self.events:
                    if predicate(event):
                        return event
                if not await self._read():
                    pytest.fail(f"{self.label} exited ({self.process.poll()}) before {what}\n{self.report()}")
        pytest.fail(f"{self.label}: no {what} within {WAIT_S} s\n{self.report()}")

    async def stop(self, peer: str) -> None:
        assert self.process.stdin is not None
        await self.process.stdin.send_all(f"stop {peer}\n".encode())

    async def finish(self) -> list[dict[str, Any]]:
        """Close stdin (every instance stops), read to EOF, and require a clean exit."""
        assert self.process.stdin is not None
        await self.process.stdin.aclose()
        with trio.move_on_after(EXIT_S):
            while await self._read():
                pass
            assert await self.process.wait() == 0, self.report()
            return self.events
        pytest.fail(f"{self.label} did not exit within {EXIT_S} s of stdin closing\n{self.report()}")


@asynccontextmanager
async def probe(label: str, prefix: list[str], specs: list[dict[str, Any]], log: Path) -> AsyncIterator[Probe]:
    """Run mdns_probe under ``prefix`` (which enters a namespace); kill it if it outlives the test."""
    async with await trio.Path(log).open("wb") as stderr:
        process = await trio.lowlevel.open_process(
            [*prefix, sys.executable, "-m", "tests.daemon.mdns_probe", json.dumps(specs)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr, cwd=ROOT)
    try:
        yield Probe(label, process, log)
    finally:
        with trio.CancelScope(shield=True):
            if process.poll() is None:
                process.kill()
            await process.wait()


async def expect_pair(one: Probe, two: Probe, first: str, second: str, palace: str, host_of: dict[str, str]) -> None:
    """first and second each see the other and reach it at the advertised address."""
    for watcher, watcher_id, other in ((one, first, second), (two, second, first)):
        other_port = (await (one if other == first else two).wait_for(
            f"{other[:5]} started", lambda e, o=other: e["event"] == "started" and e["by"] == o))["port"]
        seen = await watcher.wait_for(f"{watcher_id[:5]} seeing {other[:5]}",
                                      lambda e, w=watcher_id, o=other: e["event"] == "seen" and e["by"] == w
                                      and e["peer_id"] == o)
        assert (seen["palace_id"], seen["version"]) == (palace, VERSION)
        assert seen["addresses"] == [f"{host_of[other]}:{other_port}"]
        reached = await watcher.wait_for(f"{watcher_id[:5]} dialing {other[:5]}",
                                         lambda e, w=watcher_id, o=other: e["event"] in ("reached", "unreachable")
                                         and e["by"] == w and e["peer_id"] == o)
        assert reached["event"] == "reached" and reached["answer"] == other, reached


def check_no_strays(events: list[dict[str, Any]]) -> None:
    """Nobody reports itself, and the two palaces never report each other."""
    palace_of = {A: PALACE, B: PALACE, C: OTHER_PALACE, D: OTHER_PALACE}
    for event in events:
        if event["event"] in ("seen", "gone", "reached", "unreachable"):
            assert event["peer_id"] != event["by"], event
            assert palace_of[event["peer_id"]] == palace_of[event["by"]], event
        assert event["event"] != "unreachable", event


async def scenario(one: Probe, two: Probe, host_of: dict[str, str]) -> None:
    """A (in one) and B (in two) find each other; so do C and D of the other palace; B leaves."""
    await expect_pair(one, two, A, B, PALACE, host_of)
    await expect_pair(one, two, C, D, OTHER_PALACE, host_of)  # the control: C's and D's records did get out
    await two.stop(B)
    await two.wait_for("B stopped", lambda e: e["event"] == "stopped" and e["by"] == B)
    await one.wait_for("A hearing B leave", lambda e: e["event"] == "gone" and e["by"] == A and e["peer_id"] == B)
    for process in [one] if one is two else [one, two]:
        check_no_strays(await process.finish())


@pytest.mark.slow
@needs_namespaces
async def test_discovery_in_one_loopback_namespace(tmp_path):
    """Guards: discovery works where only ``lo`` is up (a namespace, a laptop offline), advertising
    127.0.0.1 rather than the address of an interface that is down; and it filters other palaces
    and itself."""
    setup = ("ip link set lo up && ip link add pal0 type veth peer name pal1"
             " && ip addr add 10.213.78.1/24 dev pal0")  # pal0 stays down
    lo_only = ["unshare", "-n", "sh", "-c", f'{setup} && exec "$@"', "sh"]
    specs = [spec(A, PALACE), spec(C, OTHER_PALACE), spec(B, PALACE), spec(D, OTHER_PALACE)]
    async with probe("lo-namespace", lo_only, specs, tmp_path / "lo.log") as both:
        await scenario(both, both, {A: "127.0.0.1", B: "127.0.0.1", C: "127.0.0.1", D: "127.0.0.1"})


@pytest.fixture
def netns_pair() -> Iterator[tuple[str, str]]:
    """Two fresh namespaces joined by a veth pair (10.213.77.1 <-> .2), deleted afterwards."""
    with netns_pair_of("d", "10.213.77") as pair:
        yield pair


@pytest.mark.slow
@needs_namespaces
async def test_discovery_across_two_namespaces_over_veth(netns_pair, tmp_path):
    """Guards the realistic case: daemons on two hosts of one link find each other, advertise
    their link address (not loopback) and can be dialled there; other palaces are ignored."""
    one, two = netns_pair
    hosts = {A: "10.213.77.1", C: "10.213.77.1", B: "10.213.77.2", D: "10.213.77.2"}
    async with (probe(one, ["ip", "netns", "exec", one], [spec(A, PALACE), spec(C, OTHER_PALACE)],
                      tmp_path / "one.log") as first,
                probe(two, ["ip", "netns", "exec", two], [spec(B, PALACE), spec(D, OTHER_PALACE)],
                      tmp_path / "two.log") as second):
        await scenario(first, second, hosts)


@pytest.mark.slow
@needs_namespaces
async def test_discovery_off_without_a_multicast_interface(tmp_path):
    """Guards: zeroconf failing to start (here: a namespace whose ``lo`` is down) logs one warning
    and leaves discovery off; run_discovery still reports started and stops cleanly."""
    async with probe("no-network", ["unshare", "-n"], [spec(A, PALACE)], tmp_path / "off.log") as off:
        await off.wait_for("A started", lambda e: e["event"] == "started" and e["by"] == A)
        assert [e["event"] for e in await off.finish()] == ["started", "stopped"]
    warnings = [line for line in (tmp_path / "off.log").read_text().splitlines() if "WARNING" in line]
    assert len(warnings) == 1 and "mDNS discovery is off" in warnings[0], warnings
