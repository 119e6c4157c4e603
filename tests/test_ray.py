"""batch --ray: the same Parquet batch through Ray Data, on a real local Ray instance and on a real
two-node cluster on this machine (head and worker on 127.0.0.1, one CPU each). No mocks. The output
must equal the run without Ray bit for bit, row for row, and ML-Agents' ONNX within 1e-5.

A marked group (`-m ray`), deselected by default (pytest.ini): it needs requirements-ray.txt, and
each Ray start takes tens of seconds on a small machine. CI: pip install -r requirements-ray.txt &&
python -m pytest -q -m ray."""

import ipaddress
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from conftest import BUNDLED, BUNDLED_ONNX, EXAMPLES, child_env, cli, fixed, ort_deterministic
from ray_cluster import cluster_env, family, free_port, gone

pytestmark = pytest.mark.ray
ray = pytest.importorskip("ray", reason="the ray group needs: pip install -r requirements-ray.txt")
import pyarrow as pa  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402


def huggy_dataset(folder: Path, rows=6000, files=3) -> np.ndarray:
    folder.mkdir()
    obs = (np.random.RandomState(11).randn(rows, 59) * 2).astype(np.float32)
    bounds = np.linspace(0, rows, files + 1).astype(int)
    for n, (a, b) in enumerate(zip(bounds, bounds[1:])):
        pq.write_table(
            pa.table({"id": np.arange(a, b), "obs": fixed(obs[a:b])}), folder / f"part-{n}.parquet", row_group_size=700
        )
    return obs


def batch(*args, timeout=600, env=None):
    result = cli("--mode", "batch", *args, "--json", timeout=timeout, env=env)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert len(lines) == 1, result.stdout  # --json: one object on stdout, whatever Ray prints
    return json.loads(lines[0])


def test_local_ray_output_is_the_output_without_ray(tmp_path):
    obs = huggy_dataset(tmp_path / "data")
    plain, on_ray = tmp_path / "plain.parquet", tmp_path / "ray.parquet"
    common = ["--obs-file", tmp_path / "data", "--keep-columns", "id", "--chunk", "1000", "--model-dir", BUNDLED]
    batch(*common, "--output", plain)
    out = batch(*common, "--output", on_ray, "--ray", "local", "--ray-actors", "2")
    assert out["rows"] == 6000 and out["ray_nodes"] == 1
    a, b = pq.read_table(plain), pq.read_table(on_ray)
    assert a.column_names == b.column_names == ["continuous_actions", "id"]
    assert a.equals(b)  # bit for bit, rows in input order
    actions = np.stack(b.column("continuous_actions").to_numpy(zero_copy_only=False))
    assert np.abs(actions - ort_deterministic(BUNDLED_ONNX, obs)).max() <= 1e-5
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data", "plain.parquet", "ray.parquet"]


def test_local_ray_lstm_masks_memory_and_a_bad_row(tmp_path):
    """Discrete actions and memory through Ray equal the run without it; a row holding NaN inside a
    Ray worker ends in one line, exit 2, the existing output untouched."""
    rng = np.random.RandomState(5)
    rows = 900
    obs, memory = rng.randn(rows, 10).astype(np.float32), (rng.randn(rows, 32) * 0.5).astype(np.float32)
    masks = np.ones((rows, 4), np.float32)
    masks[::3, 1] = 0
    path = tmp_path / "lstm.parquet"
    pq.write_table(pa.table({"obs_0": fixed(obs), "action_masks": fixed(masks), "memory": fixed(memory)}), path)
    common = ["--obs-file", path, "--chunk", "250", "--model-dir", EXAMPLES / "lstm"]
    batch(*common, "--output", tmp_path / "plain.parquet")
    batch(*common, "--output", tmp_path / "ray.parquet", "--ray", "local", "--ray-actors", "1")
    assert pq.read_table(tmp_path / "plain.parquet").equals(pq.read_table(tmp_path / "ray.parquet"))
    obs[777, 3] = np.nan
    pq.write_table(pa.table({"obs_0": fixed(obs), "action_masks": fixed(masks), "memory": fixed(memory)}), path)
    before = (tmp_path / "ray.parquet").read_bytes()
    result = cli("--mode", "batch", *common, "--output", tmp_path / "ray.parquet", "--ray", "local", timeout=600)
    assert result.returncode == 2 and len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert "nan" in result.stderr and result.stderr.startswith("error: --ray: ")
    assert (tmp_path / "ray.parquet").read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["lstm.parquet", "plain.parquet", "ray.parquet"]


def test_local_ray_keeps_the_input_order_of_large_files(tmp_path):
    """Ray Data's read_parquet packs a file's row groups into read tasks of at most 128 MiB, and
    handed out a large file's later ones first: past 128 MiB the output came back rotated, actions
    beside the wrong rows (issue 26). The bins are made small here (RAY_DATA_PARQUET_BIN_PACKING_BYTES)
    rather than the file large: a file of many row groups, and one of a single row group of many
    chunks. Every row's actions are those of the run without Ray, with --keep-columns and without."""
    rows = 12000
    obs = (np.random.RandomState(3).randn(rows, 59) * 2).astype(np.float32)
    env = child_env(RAY_DATA_PARQUET_BIN_PACKING_BYTES=str(1 << 18))
    reference = ort_deterministic(BUNDLED_ONNX, obs)
    for keep in (["--keep-columns", "id"], []):
        data = tmp_path / f"data{len(keep)}"
        data.mkdir()
        for name, part, groups in (("a", slice(0, 8000), 400), ("b", slice(8000, rows), None)):
            ids = {"id": np.arange(rows)[part]} if keep else {}
            pq.write_table(pa.table({**ids, "obs": fixed(obs[part])}), data / f"{name}.parquet", row_group_size=groups)
        common = ["--obs-file", data, *keep, "--chunk", "500", "--model-dir", BUNDLED]
        batch(*common, "--output", tmp_path / "plain.parquet", env=env)
        batch(*common, "--output", tmp_path / "ray.parquet", "--ray", "local", "--ray-actors", "2", env=env)
        plain, on_ray = pq.read_table(tmp_path / "plain.parquet"), pq.read_table(tmp_path / "ray.parquet")
        assert on_ray.column_names == ["continuous_actions", *(["id"] if keep else [])]
        if keep:
            assert on_ray.column("id").to_pylist() == list(range(rows))
        actions = np.stack(on_ray.column("continuous_actions").to_numpy(zero_copy_only=False))
        assert np.array_equal(actions, np.stack(plain.column("continuous_actions").to_numpy(zero_copy_only=False)))
        assert np.abs(actions - reference).max() <= 1e-5


def test_local_ray_into_a_folder(tmp_path):
    """An --output without suffix: Ray Data's workers write a folder of Parquet files (renamed into
    place at the end); together they hold every row, equal to the run without Ray."""
    huggy_dataset(tmp_path / "data", rows=3000, files=2)
    common = ["--obs-file", tmp_path / "data", "--keep-columns", "id", "--chunk", "500", "--model-dir", BUNDLED]
    batch(*common, "--output", tmp_path / "plain.parquet")
    out = batch(*common, "--output", tmp_path / "results", "--ray", "local")
    assert out["output"] == str(tmp_path / "results") and out["rows"] == 3000
    files = sorted((tmp_path / "results").glob("*.parquet"))
    assert files and sorted(p.name for p in tmp_path.iterdir()) == ["data", "plain.parquet", "results"]
    written = pa.concat_tables([pq.read_table(f) for f in files]).sort_by("id")
    assert written.equals(pq.read_table(tmp_path / "plain.parquet"))
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("keep")
    result = cli("--mode", "batch", *common, "--output", tmp_path / "full", "--ray", "local")
    assert result.returncode == 2 and "exists and is not an empty folder" in result.stderr
    assert (tmp_path / "full" / "x").read_text() == "keep"


def test_ray_refusals(tmp_path):
    np.save(tmp_path / "obs.npy", np.zeros((4, 59), np.float32))
    result = cli("--mode", "batch", "--obs-file", tmp_path / "obs.npy", "--ray", "local", "--model-dir", BUNDLED)
    assert result.returncode == 2 and "--ray: reads Parquet datasets" in result.stderr
    pq.write_table(pa.table({"obs": fixed(np.zeros((4, 59)))}), tmp_path / "obs.parquet")
    port = free_port()  # nothing listens there
    result = cli(
        "--mode",
        "batch",
        "--obs-file",
        tmp_path / "obs.parquet",
        "--ray",
        f"127.0.0.1:{port}",
        "--model-dir",
        BUNDLED,
        timeout=300,
    )
    assert result.returncode == 2 and len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert f"--ray 127.0.0.1:{port}: no Ray cluster there" in result.stderr


def test_two_node_loopback_cluster(tmp_path, two_node_cluster):
    obs = huggy_dataset(tmp_path / "data", rows=4000, files=4)
    common = ["--obs-file", tmp_path / "data", "--keep-columns", "id", "--chunk", "800", "--model-dir", BUNDLED]
    batch(*common, "--output", tmp_path / "plain.parquet")
    out = batch(
        *common,
        "--output",
        tmp_path / "cluster.parquet",
        "--ray",
        two_node_cluster,
        "--ray-actors",
        "2",
        env=cluster_env(),
    )
    assert out["ray_nodes"] == 2 and out["rows"] == 4000
    a, b = pq.read_table(tmp_path / "plain.parquet"), pq.read_table(tmp_path / "cluster.parquet")
    assert a.equals(b)
    actions = np.stack(b.column("continuous_actions").to_numpy(zero_copy_only=False))
    assert np.abs(actions - ort_deterministic(BUNDLED_ONNX, obs)).max() <= 1e-5


def listening(pids) -> set:
    """The addresses the TCP sockets of these processes listen on (and their unconnected UDP sockets are bound to)."""
    inodes = set()
    for pid in pids:
        try:
            inodes |= {
                os.readlink(fd)[8:-1]
                for fd in Path(f"/proc/{pid}/fd").iterdir()
                if os.readlink(fd).startswith("socket:[")
            }
        except OSError:
            continue
    found = set()
    for table, state in (("tcp", "0A"), ("tcp6", "0A"), ("udp", "07"), ("udp6", "07")):
        for line in Path(f"/proc/net/{table}").read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] == state and fields[9] in inodes:
                raw = bytes.fromhex(fields[1].split(":")[0])  # 32-bit words in host (little-endian) order
                found.add(ipaddress.ip_address(b"".join(raw[i : i + 4][::-1] for i in range(0, len(raw), 4))))
    return found


def is_actor(command: str) -> bool:
    return "MapWorker" in command and "PolicyActor" in command


def start_and_wait_for_actors(*args) -> tuple:
    """A --ray local batch started in the background, once its policy actors run: (process, its family)."""
    proc = subprocess.Popen(
        [sys.executable, str(Path(__file__).resolve().parents[1] / "inference.py"), "--mode", "batch", *map(str, args)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=child_env(),
    )
    deadline = time.time() + 300
    while not any(map(is_actor, (below := family(proc.pid)).values())):
        assert proc.poll() is None and time.time() < deadline, proc.communicate()
        time.sleep(0.2)
    return proc, below


def test_local_ray_listens_on_loopback_alone_and_stops_cleanly_on_sigterm(tmp_path):
    """The throwaway Ray instance listened on every interface (gcs_server, raylet, workers: an
    unauthenticated Ray reachable from the network during the run). And ray.init replaces the SIGTERM
    handler: the run ended 15 or in Ray's native stack dump. Now every socket of the run is on
    loopback, and SIGTERM ends it as in every other mode: 143, one line, Ray stopped, the existing
    output untouched, nothing left behind."""
    huggy_dataset(tmp_path / "data", rows=400_000, files=2)
    (tmp_path / "out.parquet").write_bytes(b"an older result")
    proc, ray_processes = start_and_wait_for_actors(
        "--obs-file",
        tmp_path / "data",
        "--keep-columns",
        "id",
        "--chunk",
        "2000",
        "--model-dir",
        BUNDLED,
        "--output",
        tmp_path / "out.parquet",
        "--ray",
        "local",
    )
    addresses = listening([proc.pid, *family(proc.pid)])
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=120)
    assert gone(ray_processes)
    assert proc.returncode == 128 + signal.SIGTERM and err == "interrupted by SIGTERM; stopped cleanly\n", err
    assert out == "" and (tmp_path / "out.parquet").read_bytes() == b"an older result"
    assert addresses and all(
        a.is_loopback or (a.version == 6 and a.ipv4_mapped and a.ipv4_mapped.is_loopback) for a in addresses
    ), addresses
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data", "out.parquet"]


def test_a_policy_actor_killed_mid_run_is_one_line(tmp_path):
    """A policy actor's process killed (OOM killer, an operator): exit 2 and one line. Ray printed its
    own raylet message beside ours, and ours ended in Ray's guess "The actor never ran - it was
    cancelled before it started running"."""
    huggy_dataset(tmp_path / "data", rows=400_000, files=2)
    proc, ray_processes = start_and_wait_for_actors(
        "--obs-file",
        tmp_path / "data",
        "--keep-columns",
        "id",
        "--chunk",
        "2000",
        "--model-dir",
        BUNDLED,
        "--output",
        tmp_path / "out.parquet",
        "--ray",
        "local",
    )
    os.kill(next(p for p, c in ray_processes.items() if is_actor(c)), signal.SIGKILL)
    out, err = proc.communicate(timeout=300)
    assert gone(ray_processes)
    assert proc.returncode == 2 and out == "", (out, err)
    assert err.startswith("error: --ray: a Ray worker process died") and len(err.splitlines()) == 1, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data"]
