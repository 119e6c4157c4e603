"""A real Ray cluster on this machine for the Ray group's tests (tests/test_ray.py, tests/test_ray_serve.py): `ray
start` nodes in sessions of their own on 127.0.0.1, and the /proc walks that find the processes below a command. The
fixture two_node_cluster (conftest) is loopback_cluster()."""

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from conftest import child_env

RAY_BIN = Path(sys.executable).parent / "ray"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def ray_start(*args, log=None) -> subprocess.Popen:
    """`ray start ... --block` in its own session: ending that session ends the node (no `ray stop`,
    which would stop every Ray node of this user on the machine); its output goes to the file log."""
    ports = [
        "--node-manager-port",
        free_port(),
        "--object-manager-port",
        free_port(),
        "--dashboard-agent-listen-port",
        free_port(),
        "--dashboard-agent-grpc-port",
        free_port(),
        "--runtime-env-agent-port",
        free_port(),
        "--metrics-export-port",
        free_port(),
        "--min-worker-port",
        0,
        "--max-worker-port",
        0,
    ]
    return subprocess.Popen(
        [
            str(RAY_BIN),
            "start",
            "--block",
            "--node-ip-address",
            "127.0.0.1",
            "--num-cpus",
            "1",
            "--disable-usage-stats",
            *map(str, ports),
            *map(str, args),
        ],
        stdout=log or subprocess.DEVNULL,
        stderr=subprocess.STDOUT if log else subprocess.DEVNULL,
        start_new_session=True,
        env=cluster_env(),
    )


def cluster_env() -> dict:
    """A loopback test cluster without Ray's token authentication (on by default for `ray start`
    since Ray 2.5x; a real cluster keeps it and its drivers get the token: see README)."""
    return child_env(RAY_AUTH_MODE="disabled", RAY_ADDRESS="")


def end_session(proc: subprocess.Popen) -> None:
    for sig, wait in ((signal.SIGTERM, 15), (signal.SIGKILL, 10)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=wait)
        except subprocess.TimeoutExpired:
            continue
        time.sleep(1)  # the children of the session, after their parent
    with_pgid = subprocess.run(["ps", "-eo", "pgid="], capture_output=True, text=True).stdout.split()
    if str(proc.pid) in with_pgid:
        os.killpg(proc.pid, signal.SIGKILL)


def ray_status(address: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(RAY_BIN), "status", "--address", address], capture_output=True, text=True, env=cluster_env()
    )


def active_nodes(status: str) -> int:
    """The nodes `ray status` lists as Active (a node that died is listed under failures)."""
    active = status.partition("Active:")[2].partition("Pending:")[0]
    return active.count("node_")


@contextlib.contextmanager
def loopback_cluster():
    """A head and a worker node on 127.0.0.1, one CPU each, stopped afterwards within a minute.
    Each node has its own 180 s to come up on a busy machine, and a node whose `ray start` died
    (a port that free_port() handed out, taken by then) is started again, twice at most; the
    nodes' own output is in the assertion's message."""
    temp = tempfile.mkdtemp(prefix="ray", dir="/tmp")  # (short: Ray's socket paths must fit in 107 bytes)
    nodes: list = []
    logs: list = []

    def start(*args) -> subprocess.Popen:
        logs.append(open(os.path.join(temp, f"node{len(logs)}.log"), "wb"))
        nodes.append(ray_start(*args, log=logs[-1]))
        return nodes[-1]

    def told() -> str:
        return "\n".join(Path(f.name).read_text(errors="replace")[-3000:] for f in logs)

    try:
        for attempt in range(3):
            port = free_port()
            address = f"127.0.0.1:{port}"
            head = start("--head", "--port", port, "--include-dashboard", "false", "--temp-dir", temp)
            deadline = time.time() + 180
            while ray_status(address).returncode != 0 and head.poll() is None:
                assert time.time() < deadline, f"the head node did not start:\n{told()}"
                time.sleep(2)
            if head.poll() is None:
                break
        assert head.poll() is None, f"the head node did not start:\n{told()}"
        for attempt in range(3):
            worker = start("--address", address)
            deadline = time.time() + 180
            while active_nodes(status := ray_status(address).stdout) < 2:
                if worker.poll() is not None:
                    break
                assert time.time() < deadline, f"the worker node did not join:\n{status}\n{told()}"
                time.sleep(2)
            else:
                break
        assert worker.poll() is None, f"the worker node did not join:\n{told()}"
        yield address
    finally:
        for node in reversed(nodes):
            end_session(node)
        for f in logs:
            f.close()
        shutil.rmtree(temp, ignore_errors=True)


def command_line(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def family(pid: int) -> dict:
    """{pid: command line} of the processes below pid (Ray's gcs_server, raylet, workers), from /proc."""
    children: dict = {}
    for entry in Path("/proc").iterdir():
        try:
            children.setdefault(int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1]), []).append(
                int(entry.name)
            )
        except (OSError, ValueError, IndexError):
            continue
    found, todo = {}, [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found[child] = command_line(child)
            todo.append(child)
    return found


def gone(processes: dict, within: float = 60) -> bool:
    """Whether these processes (pid: command line) have all ended; the ones left are stopped."""
    deadline = time.time() + within
    while (left := [p for p, c in processes.items() if command_line(p) == c]) and time.time() < deadline:
        time.sleep(0.5)
    for pid in left:
        os.kill(pid, signal.SIGKILL)
    return not left
