"""A three-node tapedeck cluster against one node, on this machine, in one run.

Starts three release binaries as one cluster on loopback (fresh data dirs), and one single node,
then runs tapedeck-bench's scenarios against each: the single node, a follower of the cluster,
and its leader. Around every bench run it reads each node's CPU time, disk writes and peak RSS
from /proc, so that CPU and disk per acknowledged token are given for every node, not only for
the one the clients talk to. Last, it times a wiped follower's catch-up: the follower is
SIGKILLed, its data dir emptied, and it is started again under its id; the time until it has
applied the leader's whole log, divided by the leader's log size, is its catch-up per GiB.

TAPEDECK_BIN=path runs another build than target/release/tapedeck.
Usage: python3 cluster_bench.py [--duration S] [--scenarios a,b] [--bench-args "..."]
                                [--node-args "..."]
                                [--catch-up-only | --no-catch-up | --failover]
--node-args go to every node of the cluster (`--cluster-snapshot-every 100`, say, for a wiped
node to catch up from a snapshot rather than from the whole log).
Prints one JSON line per bench run (the bench's report, and each node's CPU seconds, bytes
written and peak RSS before and after it), then one for the catch-up.
"""

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# TAPEDECK_BIN runs another build (the one before a change, say) through the same bench.
TAPEDECK = os.environ.get("TAPEDECK_BIN") or os.path.join(ROOT, "target", "release", "tapedeck")
BENCH = os.path.join(ROOT, "target", "release", "tapedeck-bench")
TICK = os.sysconf("SC_CLK_TCK")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def proc_sample(pid):
    """CPU seconds, bytes written to disk, and peak RSS (MiB) of `pid` so far."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    cpu = (int(fields[11]) + int(fields[12])) / TICK
    written = 0
    with open(f"/proc/{pid}/io") as f:
        for line in f:
            if line.startswith("write_bytes:"):
                written = int(line.split()[1])
    hwm = 0
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                hwm = int(line.split()[1]) / 1024
    return cpu, written, hwm


def wait_port(addr, timeout=20):
    host, port = addr.rsplit(":", 1)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with socket.create_connection((host, int(port)), timeout=0.5):
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"nothing listens on {addr}")


class Node:
    def __init__(self, work, node_id=None, peers=None, cluster_addr=None, extra=()):
        self.id = node_id
        self.extra = list(extra)
        self.dir = os.path.join(work, f"n{node_id or 0}")
        self.grpc = f"127.0.0.1:{free_port()}"
        self.peers = peers
        self.cluster_addr = cluster_addr
        self.proc = None

    def start(self):
        os.makedirs(self.dir, exist_ok=True)
        args = [TAPEDECK, "serve", "--data-dir", self.dir, "--listen", self.grpc,
                "--http-listen", "off"]
        if self.id is not None:
            args += ["--node-id", str(self.id), "--cluster-listen", self.cluster_addr,
                     "--cluster-peers", self.peers] + self.extra
        self.log = open(self.dir + ".log", "ab")
        self.proc = subprocess.Popen(args, stdout=self.log, stderr=self.log)
        wait_port(self.grpc)

    def kill(self):
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()

    def status(self):
        out = subprocess.run([TAPEDECK, "cluster", "status", "--server", self.grpc, "--json"],
                             capture_output=True, text=True, timeout=10)
        return json.loads(out.stdout) if out.returncode == 0 else None


def leader_of(nodes):
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        for node in nodes:
            status = node.status()
            if status and status.get("role") == "leader":
                return node
        time.sleep(0.1)
    raise RuntimeError("no leader")


def run_bench(node, scenario, duration, extra, watched):
    before = {n.id: proc_sample(n.proc.pid) for n in watched}
    args = [BENCH, "--scenarios", scenario, "--targets", "tapedeck", "--duration", str(duration),
            "--addr", node.grpc, "--server-pid", str(node.proc.pid), "--json"] + extra
    out = subprocess.run(args, capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError(f"bench failed: {out.stderr[-2000:]}")
    after = {n.id: proc_sample(n.proc.pid) for n in watched}
    return json.loads(out.stdout), before, after


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--duration", type=int, default=15)
    parser.add_argument("--scenarios", default="a,b")
    parser.add_argument("--bench-args", default="")
    parser.add_argument("--node-args", default="")
    parser.add_argument("--catch-up-only", action="store_true")
    parser.add_argument("--no-catch-up", action="store_true")
    parser.add_argument("--failover", action="store_true",
                        help="only run failover.py (needs PYTHONPATH with the gRPC stubs)")
    opts = parser.parse_args()
    extra = opts.bench_args.split()
    work = tempfile.mkdtemp(prefix="cluster-bench-")
    ports = [free_port() for _ in range(3)]
    peers = ",".join(f"{i + 1}=127.0.0.1:{p}" for i, p in enumerate(ports))
    nodes = [Node(work, i + 1, peers, f"127.0.0.1:{ports[i]}", opts.node_args.split())
             for i in range(3)]
    single = Node(work)
    try:
        for node in nodes:
            node.start()
        leader = leader_of(nodes)
        follower = next(n for n in nodes if n is not leader)
        if opts.failover:
            others = [n for n in nodes if n is not leader]
            script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "failover.py")
            subprocess.run([sys.executable, script, others[0].grpc, others[1].grpc,
                            str(leader.proc.pid)], check=True)
            return
        if not opts.catch_up_only:
            single.start()
            for scenario in opts.scenarios.split(","):
                for label, node, watched in [("1 node", single, [single]),
                                             ("3 nodes, clients on a follower", follower, nodes),
                                             ("3 nodes, clients on the leader", leader, nodes)]:
                    report, before, after = run_bench(node, scenario, opts.duration, extra, watched)
                    print(json.dumps({"scenario": scenario, "where": label, "report": report,
                                      "before": before, "after": after}), flush=True)
        if not opts.no_catch_up:
            catch_up = time_catch_up(nodes, leader)
            print(json.dumps({"catch_up": catch_up}), flush=True)
    finally:
        for node in nodes + [single]:
            if node.proc and node.proc.poll() is None:
                node.kill()
        shutil.rmtree(work, ignore_errors=True)


def dir_bytes(path):
    total = 0
    for root, _, files in os.walk(path):
        for name in files:
            try:
                total += os.path.getsize(os.path.join(root, name))
            except OSError:
                pass
    return total


def time_catch_up(nodes, leader):
    """Loads the cluster to at least 1 GiB of log if it has less, then wipes a follower and
    times its catch-up."""
    log_bytes = dir_bytes(os.path.join(leader.dir, "raft"))
    if log_bytes < 1 << 30:
        # 64 KiB tokens, closed loop, until the log holds a GiB.
        subprocess.run([BENCH, "--scenarios", "custom", "--targets", "tapedeck", "--producers",
                        "16", "--rate", "0", "--token-bytes", "65536", "--tokens-per-recording",
                        "64", "--duration", "60", "--addr", leader.grpc, "--server-pid",
                        str(leader.proc.pid)], capture_output=True, text=True)
        log_bytes = dir_bytes(os.path.join(leader.dir, "raft"))
    target = leader.status()["last_log_index"]
    wiped = next(n for n in nodes if n is not leader)
    wiped.kill()
    shutil.rmtree(wiped.dir)
    started = time.monotonic()
    wiped.start()
    applied = 0
    while time.monotonic() - started < 600:
        status = wiped.status()
        applied = status["applied_index"] if status else 0
        if applied >= target:
            break
        time.sleep(0.1)
    took = time.monotonic() - started
    snapshot = os.path.join(leader.dir, "raft", "snapshot")
    with open(wiped.dir + ".log", "rb") as f:
        installed = b"installed a snapshot" in f.read()
    return {"log_bytes": log_bytes, "entries": target, "applied": applied, "seconds": took,
            "seconds_per_gib": took / (log_bytes / (1 << 30)) if applied >= target else None,
            "leader_snapshot_bytes": os.path.getsize(snapshot) if os.path.exists(snapshot) else 0,
            "leader_db_bytes": os.path.getsize(os.path.join(leader.dir, "tapedeck.redb")),
            "installed_a_snapshot": installed,
            "db_bytes_after": dir_bytes(wiped.dir)}


if __name__ == "__main__":
    main()
