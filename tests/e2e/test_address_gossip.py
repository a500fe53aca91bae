"""Address gossip (issue 45 §1): five machines on five subnets behind one router, so no multicast
between them and mDNS off anyway, each joined through the founder's invite alone. Gossip must
turn that star into a mesh, so the palace outlives its founder.

Guards: daemons learn each other's addresses from signed gossip (not only from the inviter),
dial them and keep the direct links; an event written on one reaches another within a second
once the founder is gone. Also guards the harness itself: the subnets carry unicast but no
multicast (without that, mDNS could hide a gossip failure).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

from tests.fleet import Fleet, append, connected, ctl_json, peer_id, wait_until
from tests.helpers import Daemon, RawClient
from tests.netns import RoutedSubnets, needs_namespaces, routed_subnets

NAMES = ("alpha", "beta", "gamma", "delta", "epsilon")
PORT = 7437
#: every daemon here: no mDNS (gossip must do without it), reachable on its subnet's address
NETWORK_ARGS = ["--no-mdns", "--listen", f"0.0.0.0:{PORT}"]
# Why 30 s: gossip and a dial each take a moment, not tens of seconds; a miss should fail soon
# and say which links are missing, not sit out the suite's longer waits.
MESH_WAIT_S = 30.0
# Why 1 s: the bound for an event between two surviving members with the founder gone.
PROPAGATION_S = 1.0


def _start_palace(fleet: Fleet, net: RoutedSubnets, daemons: list[Daemon]) -> None:
    """alpha founds the palace on subnet 1; each other daemon, on a subnet of its own, joins with an
    invite that names alpha's address and nothing else. Each is added to ``daemons`` once started."""
    alpha = fleet.start("alpha", prefix=net.exec_prefix(0), network_args=NETWORK_ARGS)
    daemons.append(alpha)
    ctl_json(alpha.home, "init", "--palace-name", "fleet-test", "--daemon-name", "alpha")
    fleet.founder = alpha
    for index, name in enumerate(NAMES[1:], start=1):
        code = ctl_json(alpha.home, "invite", "--address", f"{net.addresses[0]}:{PORT}")["code"]
        daemon = fleet.start(name, prefix=net.exec_prefix(index), network_args=NETWORK_ARGS)
        daemons.append(daemon)
        ctl_json(daemon.home, "join", code, "--name", name)


def _stop_all(daemons: list[Daemon]) -> None:
    """Stop them while their namespaces still exist (the fixture would, but only after those are gone)."""
    for daemon in daemons:
        if daemon.running:
            daemon.stop()


def _missing_links(daemons: list[Daemon], ids: dict[str, str]) -> dict[str, list[str]]:
    """For each daemon, the others it holds no link to (by name); empty when all are linked."""
    names = {pid: name for name, pid in ids.items()}
    missing = {}
    for daemon in daemons:
        linked = set(connected(daemon.home))
        lacks = [names[ids[d.home.name]] for d in daemons if d is not daemon and ids[d.home.name] not in linked]
        if lacks:
            missing[daemon.home.name] = lacks
    return missing


def _wait_for_mesh(daemons: list[Daemon], ids: dict[str, str], timeout: float = MESH_WAIT_S) -> None:
    deadline = time.monotonic() + timeout
    while missing := _missing_links(daemons, ids):
        if time.monotonic() > deadline:
            detail = "; ".join(f"{name} lacks {', '.join(lacks)}" for name, lacks in missing.items())
            links = {d.home.name: sorted(next(n for n, p in ids.items() if p == pid) for pid in connected(d.home))
                     for d in daemons}
            raise AssertionError(f"after {timeout:.0f} s, not every daemon holds a link to every other: {detail} "
                                 f"(links now: {links})")
        time.sleep(0.2)


@pytest.mark.slow
@needs_namespaces
def test_five_daemons_on_five_subnets_mesh_through_gossip_and_outlive_the_founder(daemon_factory, short_tmp):
    with routed_subnets("g", len(NAMES)) as net:
        fleet = Fleet(daemon_factory, short_tmp)
        daemons: list[Daemon] = []
        try:
            _start_palace(fleet, net, daemons)
            alpha, beta, epsilon = daemons[0], daemons[1], daemons[4]
            ids = {d.home.name: peer_id(d.home) for d in daemons}
            # The harness works: every joiner is a member linked to the founder across the router, and
            # no daemon finds another by mDNS (it is off; the subnets carry no multicast anyway).
            wait_until(lambda: all(ids["alpha"] in connected(d.home) for d in daemons[1:]),
                       "every joiner to link to alpha across the router")
            assert {ctl_json(d.home, "peers")["mdns"] for d in daemons} == {"off"}

            # What gossip must produce: a link from every daemon to every other.
            _wait_for_mesh(daemons, ids)

            assert alpha.stop() == 0
            # Epsilon waits for the event before beta writes it: what is timed is the propagation.
            with RawClient(epsilon.socket_path) as waiter:
                waiter.hello()
                waiter.send_message({"id": 100, "op": "wait", "args": {
                    "types": ["note"], "from_agents": ["writer"], "timeout_ms": 20_000, "limit": 1}})
                writing = time.monotonic()
                sent = append(beta.home, "written on beta with alpha gone", from_agent="writer")
                appended = time.monotonic()
                reply = waiter.recv_message(timeout=25)
                arrived = time.monotonic()
            assert reply["ok"] is True, reply
            assert [e["id"] for e in reply["result"]["events"]] == [sent["id"]], reply
            # Timed from the start of the append (stricter than from its reply, which may come later).
            assert arrived - writing < PROPAGATION_S, (
                f"beta's event reached epsilon {arrived - writing:.3f} s after beta began writing it "
                f"({arrived - appended:.3f} s after the append returned)")

            # Epsilon knows beta's address from gossip: not from an invite, mDNS, or alpha's relay.
            row = next(p for p in ctl_json(epsilon.home, "peers")["peers"] if p["peer_id"] == ids["beta"])
            assert "gossip" in row["found_by"], row
            for daemon in daemons[1:]:
                assert daemon.stop() == 0, daemon.log()[-4000:]
        finally:
            _stop_all(daemons)


# A receiver on one machine, senders elsewhere: what crosses the router. Datagrams are their label.
_RECEIVE = """
import json, socket, sys
address, groups = sys.argv[1], sys.argv[2:]
sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
sock.bind(("", 5353))
for group in groups:
    sock.setsockopt(socket.IPPROTO_IP, socket.IP_ADD_MEMBERSHIP, socket.inet_aton(group) + socket.inet_aton(address))
print("ready", flush=True)
sys.stdin.readline()  # the senders are done
sock.settimeout(0.5)
heard = []
try:
    while True:
        heard.append(sock.recv(100).decode())
except TimeoutError:
    pass
print(json.dumps(sorted(set(heard))))
"""
_SEND = """
import socket, sys
source, target, label = sys.argv[1:]
sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
sock.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_TTL, 16)
sock.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_IF, socket.inet_aton(source))
sock.bind((source, 0))
for _ in range(3):
    sock.sendto(label.encode(), (target, 5353))
"""
MDNS_GROUP = "224.0.0.251"
#: an organisation-scoped group (not link-local like mDNS's): a router would forward it if any would
SCOPED_GROUP = "239.255.45.1"


@pytest.mark.slow
@needs_namespaces
def test_multicast_does_not_cross_the_subnets():
    """Guards the harness: machine 2 hears multicast sent on its own link (from the router's end)
    and unicast from machine 1, but no multicast from machine 1, mDNS's group or a routable one."""
    with routed_subnets("m", 2) as net:
        receiver = subprocess.Popen([*net.exec_prefix(1), sys.executable, "-c", _RECEIVE, net.addresses[1],
                                     MDNS_GROUP, SCOPED_GROUP],
                                    stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            assert receiver.stdout is not None and receiver.stdout.readline() == "ready\n", receiver.stderr
            sends = [(["ip", "netns", "exec", net.router], net.gateways[1], group, f"{group} on its link")
                     for group in (MDNS_GROUP, SCOPED_GROUP)]
            sends += [(net.exec_prefix(0), net.addresses[0], target, f"{target} from subnet 1")
                      for target in (MDNS_GROUP, SCOPED_GROUP, net.addresses[1])]
            for prefix, source, target, label in sends:
                subprocess.run([*prefix, sys.executable, "-c", _SEND, source, target, label], check=True, timeout=30)
            out, err = receiver.communicate("done\n", timeout=30)
        finally:
            if receiver.poll() is None:
                receiver.kill()
                receiver.communicate()
        assert receiver.returncode == 0, err
        assert json.loads(out) == sorted([f"{MDNS_GROUP} on its link", f"{SCOPED_GROUP} on its link",
                                          f"{net.addresses[1]} from subnet 1"])
