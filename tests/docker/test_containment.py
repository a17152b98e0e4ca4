"""Containment, checked from inside real sandboxes: non-root everywhere, no Docker socket and no host path, no way
from one sandbox to another (network ``none``: not over TCP on loopback, not over abstract unix sockets, not by
signal or ``/proc``), and what an ``internal`` network (one per tenant) does and does not reach."""

from __future__ import annotations

import asyncio
import os
import secrets
from pathlib import Path

import pytest

from sandbox.models import Exec, NetworkPolicy, SandboxSpec
from sandbox.service import Principal
from tests.conftest import TEST_LABEL, SandboxFactory
from tests.docker.conftest import Plane

pytestmark = pytest.mark.docker

_CONNECT = """
import socket, sys
family, address = sys.argv[1], sys.argv[2]
if family == "unix":
    s = socket.socket(socket.AF_UNIX)
    target = "\\0" + address
else:
    s = socket.socket()
    host, port = address.rsplit(":", 1)
    target = (host, int(port))
s.settimeout(3)
try:
    s.connect(target)
    print("connected")
except OSError as e:
    print("refused:", type(e).__name__, e)
"""

_LISTEN = """
import socket, sys, time
tcp = socket.socket()
tcp.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
tcp.bind(("0.0.0.0", int(sys.argv[1])))
tcp.listen()
abstract = socket.socket(socket.AF_UNIX)
abstract.bind("\\0" + sys.argv[2])
abstract.listen()
open("/tmp/listening", "w").close()
time.sleep(60)
"""

_ALLOWED_BINDS = {"/run/sandbox", "/etc/resolv.conf", "/etc/hostname", "/etc/hosts", "/usr/sbin/docker-init"}
"""Bind mounts a sandbox may have: its agent socket directory, the three files the engine writes per container, and
the engine's init (``init: true``), read-only."""


def _host_addresses(*, all_bridges: bool = False) -> list[str]:
    """The host's own IPv4 addresses but loopback and (unless ``all_bridges``) the engine's bridges but the default
    one."""
    with open("/proc/net/fib_trie") as f:
        words = f.read().split()
    local = {words[i - 1] for i, w in enumerate(words) if w == "/32" and words[i + 1 : i + 3] == ["host", "LOCAL"]}
    return sorted(a for a in local if all_bridges or a == "172.17.0.1" or not a.startswith(("127.", "172.")))


async def _listen(sb: object, port: int, name: str) -> None:
    agent = sb.agent  # type: ignore[attr-defined]
    await agent.exec(f"python3 -c '{_LISTEN}' {port} {name} >/tmp/listen.log 2>&1 &", keep_background=True)
    for _ in range(50):
        if (await agent.exec("test -e /tmp/listening")).exit_code == 0:
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"the listener in {sb} did not start: {(await agent.exec('cat /tmp/listen.log')).stdout}")


async def _connect(sb: object, family: str, address: str) -> str:
    result = await sb.agent.exec(["python3", "-c", _CONNECT, family, address])  # type: ignore[attr-defined]
    return str(result.stdout.strip())


async def test_every_process_is_unprivileged_and_cannot_gain_root(make_sandbox: SandboxFactory) -> None:
    sb = await make_sandbox("desktop")
    ids = await sb.agent.exec("id -u; id -g; ps -eo uid=,comm= | sort -u")
    lines = ids.stdout.split("\n")
    assert lines[0] != "0" and lines[1] != "0", ids.stdout
    owners = {line.split()[0] for line in lines[2:] if line.strip()}
    assert owners and "0" not in owners, f"a process runs as root in the sandbox: {ids.stdout}"
    # Set-uid programs do not help under no-new-privileges; su and sudo (if present at all) cannot make root.
    escalate = await sb.agent.exec(
        "for p in $(find / -xdev -perm -4000 -type f 2>/dev/null); do $p -c 'id -u' </dev/null 2>/dev/null; done;"
        " su -c 'id -u' root </dev/null 2>/dev/null; sudo -n id -u 2>/dev/null; true",
        timeout=30,
    )
    assert "0" not in escalate.stdout.split(), escalate.stdout
    writable = await sb.agent.exec("touch /etc/owned /usr/owned /root/owned 2>&1; ls /etc/owned /usr/owned 2>&1")
    assert "No such file" in writable.stdout and "Permission denied" in writable.stdout, writable.stdout


async def test_no_docker_socket_no_host_path_no_host_process(make_sandbox: SandboxFactory, tmp_path: Path) -> None:
    marker = f"host-marker-{secrets.token_hex(6)}"
    (tmp_path / marker).write_text("on the host only")
    sb = await make_sandbox("terminal")
    sockets = await sb.agent.exec(
        "find / \\( -path /proc -o -path /sys \\) -prune -o -type s -print 2>/dev/null", timeout=30
    )
    found = set(sockets.stdout.split())
    assert not {s for s in found if "docker" in s or "containerd" in s}, found
    # Its own agent's sockets only (the lane socket serves direct lanes' steps, docs/lanes.md).
    assert found <= {"/run/sandbox/agent.sock", "/run/sandbox/lane.sock"}, (
        f"unexpected sockets in a terminal sandbox: {found}"
    )
    anywhere = await sb.agent.exec(f"find / -path /proc -prune -o -name {marker} -print 2>/dev/null", timeout=30)
    assert anywhere.stdout.strip() == "", f"a host file is visible inside: {anywhere.stdout}"
    # Every bind mount (a mount whose source is a host path) is one of the few the sandbox needs.
    mounts = await sb.agent.exec("cat /proc/self/mountinfo")
    binds = set()
    for line in mounts.stdout.splitlines():
        fields = line.split()
        root, point, fstype = fields[3], fields[4], fields[fields.index("-") + 1]
        if root != "/" and fstype not in ("proc", "sysfs", "tmpfs", "devpts", "mqueue", "cgroup", "cgroup2"):
            binds.add(point)
            if point == "/usr/sbin/docker-init":
                assert "ro" in fields[5].split(","), f"the engine's init is mounted writable: {line}"
    assert binds <= _ALLOWED_BINDS, f"host paths mounted into the sandbox: {binds - _ALLOWED_BINDS}"
    # Its own pid namespace: this test's process (and any other host process) is not there to signal or read.
    me = await sb.agent.exec(f"cat /proc/{os.getpid()}/cmdline 2>&1; ps -e --no-headers | wc -l")
    assert "pytest" not in me.stdout and "python" not in me.stdout.split("\n")[0], me.stdout
    assert int(me.stdout.split()[-1]) < 20, f"too many processes visible: {me.stdout}"
    # And pid 1's root is the sandbox's own: no way to the host's through /proc/1/root.
    through_pid1 = await sb.agent.exec(f"ls /proc/1/root{tmp_path}/{marker} 2>&1")
    assert through_pid1.exit_code != 0, through_pid1.stdout


async def test_one_sandbox_cannot_reach_another(make_sandbox: SandboxFactory) -> None:
    port, name = 47000 + secrets.randbelow(1000), f"sbx-{secrets.token_hex(4)}"
    victim = await make_sandbox("terminal")
    other = await make_sandbox("terminal")
    await _listen(victim, port, name)
    # The listener answers inside its own sandbox ...
    assert await _connect(victim, "tcp", f"127.0.0.1:{port}") == "connected"
    assert await _connect(victim, "unix", name) == "connected"
    # ... and from the other one, neither its loopback port nor its abstract unix socket exists.
    assert (await _connect(other, "tcp", f"127.0.0.1:{port}")).startswith("refused")
    assert (await _connect(other, "unix", name)).startswith("refused")
    # Nor can the other see or signal its processes, or reach its agent's socket.
    seen = await other.agent.exec("ps -eo args= | grep -c listening; ls /run/sandbox")
    assert seen.stdout.split()[0] == "0" or "python3 -c" not in seen.stdout, seen.stdout
    assert seen.stdout.split()[1:] == ["agent.sock", "lane.sock"], seen.stdout  # its own agent's, not the victim's
    listener = await victim.agent.exec("ps -eo pid=,args= | awk '/import socket/ && !/awk/ {print $1}'")
    pid = listener.stdout.split()[0]
    killed = await other.agent.exec(f"kill -0 {pid} 2>&1 || echo no-such-process")
    alive = await victim.agent.exec(f"kill -0 {pid} && echo alive")
    assert alive.stdout.strip() == "alive"
    assert "no-such-process" in killed.stdout or "No such process" in killed.stdout, killed.stdout


async def test_the_internal_network_has_no_way_out_and_no_way_to_the_host(
    make_sandbox: SandboxFactory,
) -> None:
    """``network: internal`` is opt-in and shared by one tenant's sandboxes (here the backend's, called with no
    tenant: they reach each other, by design); it reaches no address outside, and the host's side of the bridge
    answers nothing."""
    port, name = 47000 + secrets.randbelow(1000), f"sbx-{secrets.token_hex(4)}"
    first = await make_sandbox("terminal", network="internal")
    second = await make_sandbox("terminal", network="internal")
    attrs = await asyncio.to_thread(lambda: first.container().attrs)
    (network,) = attrs["NetworkSettings"]["Networks"].values()
    gateway, peer = network["Gateway"], network["IPAddress"]
    await _listen(first, port, name)
    assert await _connect(second, "tcp", f"{peer}:{port}") == "connected"  # the shared network, as documented
    assert (await _connect(second, "unix", name)).startswith("refused")  # but no shared namespace
    # No packet leaves and no host answers (a refusal would be a host's TCP stack answering: reached).
    outside = [f"{a}:22" for a in _host_addresses()] + ["1.1.1.1:53", f"{gateway}:22"]
    attempts = await asyncio.gather(*(_connect(second, "tcp", address) for address in outside))
    for address, attempt in zip(outside, attempts, strict=True):
        assert attempt.startswith("refused") and "ConnectionRefused" not in attempt, (address, attempt)

    # A host service listening on every address (the control plane does, with tokens) must not be reachable either.
    # The gateway:22 attempt above shows no host stack answers there; if the host has that address, listen on it.
    if gateway in _host_addresses(all_bridges=True):
        accepted: list[object] = []

        async def on_connect(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            accepted.append(writer.get_extra_info("peername"))
            writer.close()

        listener = await asyncio.start_server(on_connect, gateway, 0)
        try:
            attempt = await _connect(second, "tcp", f"{gateway}:{listener.sockets[0].getsockname()[1]}")
        finally:
            listener.close()
            await listener.wait_closed()
        assert attempt.startswith("refused") and not accepted, (
            f"a sandbox on the internal network reached a host listener on {gateway}: {attempt}"
        )


async def test_internal_sandboxes_of_two_tenants_do_not_reach_each_other(plane: Plane) -> None:
    port, name = 47000 + secrets.randbelow(1000), f"sbx-{secrets.token_hex(4)}"
    alpha_p, beta_p = Principal("alpha"), Principal("beta")
    spec = SandboxSpec(kind="terminal", labels=TEST_LABEL, network=NetworkPolicy.INTERNAL)
    alpha = await plane.service.create(alpha_p, spec)
    beta = await plane.service.create(beta_p, spec)
    start = ["sh", "-c", 'python3 -c "$1" "$2" "$3" >/dev/null 2>&1 &', "sh", _LISTEN, str(port), name]
    await plane.service.exec(alpha_p, alpha.id, Exec(cmd=start, keep_background=True))
    listening = Exec(cmd="for i in $(seq 50); do test -e /tmp/listening && exit 0; sleep 0.1; done; exit 1")
    assert (await plane.service.exec(alpha_p, alpha.id, listening)).exit_code == 0
    connect = Exec(cmd=["python3", "-c", _CONNECT, "tcp", f"{await plane.address_of(alpha.id)}:{port}"])
    reached = await plane.service.exec(beta_p, beta.id, connect)
    assert not reached.stdout.startswith("connected"), "beta's sandbox reached alpha's over the internal network"


async def test_a_cpu_hog_gets_no_more_than_its_cpus(make_sandbox: SandboxFactory) -> None:
    sb = await make_sandbox("terminal", resources={"cpus": 0.5})
    measure = (
        "u=/sys/fs/cgroup/cpuacct/cpuacct.usage; [ -r $u ] || u=/sys/fs/cgroup/cpu.stat;"
        " read_ns() { if [ ${u##*/} = cpu.stat ]; then echo $(( $(awk '/^usage_usec/ {print $2}' $u) * 1000 ));"
        " else cat $u; fi; };"
        " for i in 1 2 3; do timeout 4 sh -c 'while :; do :; done' & done; sleep 0.5;"
        " a=$(read_ns); s=$(date +%s%N); sleep 3; b=$(read_ns); e=$(date +%s%N); wait;"
        " echo $(( (b - a) * 1000 / (e - s) ))"
    )
    result = await sb.agent.exec(measure, timeout=20)
    permille = int(result.stdout.split()[-1])  # CPU time per wall time, in thousandths of a core
    assert 100 < permille <= 600, f"three busy loops used {permille / 1000:.2f} cores under a limit of 0.5"
