#!/usr/bin/env python3
"""serve --follow under load, and two behaviours of one run folder side by side (issue 44; a benchmark, not a test;
docs/serve.md "Several policies, and new versions while training runs"). Run it under `flock /tmp/bench.lock`:

    flock /tmp/bench.lock python tools/bench_follow.py [--case follow|two|all] [--json]
        [--clients 64] [--steady-s 10] [--checkpoints 3] [--interval-s 8] [--poll-s 2]
        [--rounds 3] [--window-ms 3000] [--protocol grpc|http] [--perf-analyzer PATH] [--before CHECKOUT]

follow  `python inference.py --mode serve --model-dir RUN --follow --follow-poll-s P --listen --http --grpc` on a
        copy of examples/vector (a run folder: Vector 50000 and 100000, 100000 serving). --clients clients in all
        (split 22/21/21 for 64) in three client processes, one per front: JSON lines over raw sockets, V2 REST over
        http.client (keep-alive), V2 gRPC through tritonclient's generated stub (ModelInfer); each client asks
        lock-step (its next request once its answer is in), each its own observation, and records (send time,
        latency, version, actions or the refusal). After --steady-s s of steady answers, --checkpoints checkpoints
        are written mlagents-learn's way, every --interval-s s: <Behavior>-<step>.pt (the tensors of Vector-50000.pt
        and Vector-100000.pt in turn, so that consecutive versions answer apart), checkpoint.pt, the ML-Agents ONNX
        of those tensors as <Behavior>-<step>.onnx, then the step listed in run_logs/training_status.json (the
        listing's time recorded right after; the next listing --interval-s plus up to --poll-s s later, so that
        listings fall anywhere between two of the follower's looks). Reported per front: the time from each
        listing to the first answer of the new version (target <= 2 s); p99 over the requests sent in the 2 s after
        each listing ("2s p99"), and from the listing to 1 s after the first new answer ("swap p99": the whole
        verification and swap), each beside the steady p99 (every request sent after --warmup-s outside the 2 s
        windows) (target <= 2x), and for scale the same p99 over as long a control window halfway between two
        listings, where nothing is swapped ("calm p99"); requests dropped (an exception, a connection lost) or
        refused (an error answer) (target 0); every answer checked against inference.load(<the checkpoint it
        names>).act() within 1e-5; and each checkpoint's verification timed in this process after the run (what a
        swap costs serve's cores).
        --before CHECKOUT (a git worktree of the code before): the same case on its serve, right after.
two     serve (--http --grpc) on a run folder of two behaviours (examples/vector's Vector and examples/hybrid's
        Hybrid, as tests/conftest.py's two_behaviour_run makes it). Triton's perf_analyzer (2.41, the tritonclient
        wheel's; --protocol, batch 1, concurrency 64, --async) on Vector alone, on Hybrid alone, and on both at once
        (two perf_analyzers started together), in turn for --rounds rounds (ABBA-like: the order turns each
        round); each perf_analyzer runs exactly 3 --window-ms windows (-s 10000 --max-trials 3: every window
        "stable"), so that two started together measure the same seconds. Reported: each model's observations/s
        alone (medians), their sum when both run, and sum / alone for each and over the mean of the two alone (two
        models of different costs: the mix's capacity lies between them) (target >= 0.85); serve's CPU seconds
        per second and per row, the perf_analyzers' CPU, rows per engine call (the V2 statistics). perf_analyzer's
        inputs: tools/perf_input_data.py.
        Needs perf_analyzer (beside this Python, else on PATH, or --perf-analyzer) and nvidia-cuda-runtime-cu12 for
        its libcudart (tools/bench_v2.perf_analyzer_env): run it with that venv's Python (e.g. tools/v2_tools.sh).

The load average before and after is printed: the machine is shared (2 cores), absolute times are noise; a swap's
verification (a strict load, onnx-compare, a probe batch) runs in the serving process, on its cores.
"""

from __future__ import annotations

import argparse
import http.client
import json
import multiprocessing
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Optional

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tools"))

__all__ = ["main", "follow_case", "two_case"]

TOL = 1e-5
OUTPUT = "deterministic_continuous_actions"
KINDS = ("lines", "rest", "grpc")


# ---- serve in a process of its own


class Serve:
    """`inference.py --mode serve ARGS` with stderr read on a thread: its addresses ([serve] listening/http/grpc on
    ADDRESS) and every line, with the monotonic time it came."""

    def __init__(self, *args, fronts=("listening", "http", "grpc"), checkout: Path = ROOT):
        cmd = [sys.executable, str(checkout / "inference.py"), "--mode", "serve", *map(str, args)]
        env = dict(os.environ, PYTHONPATH=str(checkout))  # (that checkout's package, not another one)
        self.proc = subprocess.Popen(
            cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env
        )
        self.lines: list = []
        self.said: dict = {}
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()
        deadline = time.monotonic() + 180
        while not set(fronts) <= set(self.said):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                tail = " | ".join(line for _, line in self.lines[-5:])
                raise SystemExit(f"bench_follow: serve did not start (exit {self.proc.poll()}): {tail}")
            time.sleep(0.05)

    def _read(self) -> None:
        for raw in self.proc.stderr:
            line = raw.decode(errors="replace").rstrip("\n")
            self.lines.append((time.monotonic(), line))
            if found := re.match(r"\[serve\] (listening|http|grpc) on (\S+)", line):
                self.said[found.group(1)] = found.group(2)

    def cpu_s(self) -> float:
        with open(f"/proc/{self.proc.pid}/stat") as f:
            fields = f.read().rpartition(")")[2].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.terminate()  # SIGTERM: serve's normal end
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.thread.join(10)
        return self.proc.returncode


# ---- the clients (one process per front, a thread per client)


def host_port(address: str) -> tuple:
    host, port = address.rsplit(":", 1)
    return host, int(port)


def lines_client(address: str, obs: np.ndarray, record, stop) -> None:
    sock = socket.create_connection(host_port(address), timeout=30)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    buffer = b""
    body = json.dumps({"model": "Vector", "obs": obs.tolist()})
    try:
        n = 0
        while not stop.is_set():
            n += 1
            sent = time.monotonic()
            sock.sendall(b'{"id":%d,' % n + body[1:].encode() + b"\n")
            while b"\n" not in buffer:
                chunk = sock.recv(65536)
                if not chunk:
                    raise ConnectionError("the server closed the connection")
                buffer += chunk
            line, buffer = buffer.split(b"\n", 1)
            answer = json.loads(line)
            if "error" in answer:
                record(sent, time.monotonic() - sent, answer.get("version"), None, answer["error"])
            else:
                record(sent, time.monotonic() - sent, answer["version"], answer["continuous_actions"], None)
    finally:
        sock.close()


def rest_client(address: str, obs: np.ndarray, record, stop) -> None:
    conn = http.client.HTTPConnection(*host_port(address), timeout=30)
    body = json.dumps(
        {
            "inputs": [{"name": "obs_0", "datatype": "FP32", "shape": [1, len(obs)], "data": obs.tolist()}],
            "outputs": [{"name": OUTPUT}],
        }
    ).encode()
    headers = {"Content-Type": "application/json"}
    try:
        while not stop.is_set():
            sent = time.monotonic()
            conn.request("POST", "/v2/models/Vector/infer", body, headers)
            response = conn.getresponse()
            answer = json.loads(response.read())
            took = time.monotonic() - sent
            if response.status != 200:
                record(sent, took, None, None, f"{response.status} {answer.get('error')}")
            else:
                out = next(o for o in answer["outputs"] if o["name"] == OUTPUT)
                record(sent, took, answer["model_version"], out["data"], None)
    finally:
        conn.close()


def grpc_client(address: str, obs: np.ndarray, record, stop) -> None:
    import grpc
    from tritonclient.grpc import service_pb2 as pb
    from tritonclient.grpc import service_pb2_grpc

    channel = grpc.insecure_channel(address, options=[("grpc.enable_http_proxy", 0)])
    stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
    request = pb.ModelInferRequest(model_name="Vector")
    request.inputs.add(name="obs_0", datatype="FP32", shape=[1, len(obs)])
    request.outputs.add(name=OUTPUT)
    request.raw_input_contents.append(np.ascontiguousarray(obs[None], "<f4").tobytes())
    try:
        while not stop.is_set():
            sent = time.monotonic()
            try:
                response = stub.ModelInfer(request, timeout=30)
            except grpc.RpcError as exc:
                record(sent, time.monotonic() - sent, None, None, f"{exc.code().name} {exc.details()}")
                continue
            took = time.monotonic() - sent
            n = [o.name for o in response.outputs].index(OUTPUT)
            actions = np.frombuffer(response.raw_output_contents[n], "<f4").tolist()
            record(sent, took, response.model_version, actions, None)
    finally:
        channel.close()


CLIENTS = {"lines": lines_client, "rest": rest_client, "grpc": grpc_client}


def client_process(kind: str, address: str, first: int, count: int, obs: np.ndarray, stop, out: str) -> None:
    """`count` clients of one front (clients first .. first+count-1, each its row of `obs`), until `stop`: their
    records saved to `out` (.npz): client, sent, latency, version (-1: none), actions; errors (client, sent, text);
    dropped (client, text: what ended a client early)."""
    rows: list = []
    errors: list = []
    dropped: list = []
    lock = threading.Lock()

    def run(client: int) -> None:
        def record(sent, took, version, actions, error) -> None:
            with lock:
                if error is not None:
                    errors.append((client, sent, str(error)[:300]))
                else:
                    rows.append((client, sent, took, int(version), actions))

        try:
            CLIENTS[kind](address, obs[client], record, stop)
        except Exception as exc:  # (a connection lost, a timeout: this client is done, and counted as dropped)
            with lock:
                dropped.append((client, f"{type(exc).__name__}: {exc}"[:300]))

    threads = [threading.Thread(target=run, args=(c,)) for c in range(first, first + count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    width = len(rows[0][4]) if rows else 0
    np.savez(
        out,
        client=np.array([r[0] for r in rows], np.int32),
        sent=np.array([r[1] for r in rows], np.float64),
        latency=np.array([r[2] for r in rows], np.float64),
        version=np.array([r[3] for r in rows], np.int64),
        actions=np.array([r[4] for r in rows], np.float64).reshape(len(rows), width),
        errors=np.array(json.dumps(errors)),
        dropped=np.array(json.dumps(dropped)),
    )


# ---- follow: checkpoints written mlagents-learn's way while the clients ask


def write_checkpoint(run: Path, step: int, source_pt: Path, source_onnx: Path) -> float:
    """Vector-<step>.pt (source_pt's tensors, its global step set), checkpoint.pt, Vector-<step>.onnx (source_onnx,
    the ML-Agents ONNX of those tensors), then the step listed in run_logs/training_status.json (as ML-Agents 1.1.0's
    TorchModelSaver.save_checkpoint and its training status record, Apache-2.0): the listing's monotonic time."""
    import torch

    folder = run / "Vector"
    obj = torch.load(source_pt, map_location="cpu", weights_only=True)
    obj["global_step"] = {"_GlobalSteps__global_step": torch.tensor([step])}
    torch.save(obj, folder / f"Vector-{step}.pt")
    torch.save(obj, folder / "checkpoint.pt")
    shutil.copyfile(source_onnx, folder / f"Vector-{step}.onnx")
    status_file = run / "run_logs" / "training_status.json"
    status = json.loads(status_file.read_text())
    base = f"results/{run.name}/Vector/Vector-{step}"
    status["Vector"]["checkpoints"].append(
        {
            "steps": step,
            "file_path": base + ".onnx",
            "reward": None,
            "creation_time": time.time(),
            "auxillary_file_paths": [base + ".pt"],
        }
    )
    fresh = status_file.with_name(".training_status.json.tmp")
    fresh.write_text(json.dumps(status, indent=4))
    os.replace(fresh, status_file)  # (the listing appears whole)
    return time.monotonic()


def split(total: int) -> list:
    """`total` clients over the three fronts: 64 -> [22, 21, 21]."""
    return [total // 3 + (1 if k < total % 3 else 0) for k in range(3)]


def p99(values) -> Optional[float]:
    return float(np.percentile(values, 99)) if len(values) else None


def follow_case(a: argparse.Namespace, workdir: Path, checkout: Path = ROOT) -> dict:
    import inference

    workdir = workdir / ("follow-" + str(time.monotonic_ns()))
    workdir.mkdir()
    run = Path(shutil.copytree(EXAMPLES / "vector", workdir / "run"))
    sources = [  # (tensors, their ML-Agents ONNX), taken in turn: consecutive versions answer apart
        (EXAMPLES / "vector" / "Vector" / "Vector-50000.pt", EXAMPLES / "vector" / "Vector" / "Vector-50000.onnx"),
        (EXAMPLES / "vector" / "Vector" / "Vector-100000.pt", EXAMPLES / "vector" / "Vector.onnx"),
    ]
    obs = np.random.RandomState(0).uniform(-1, 1, (a.clients, 8)).astype(np.float32)
    server = Serve(
        "--model-dir",
        run,
        "--follow",
        "--follow-poll-s",
        a.poll_s,
        "--spin",
        "off",
        "--listen",
        "127.0.0.1:0",
        "--http",
        "127.0.0.1:0",
        "--grpc",
        "127.0.0.1:0",
        checkout=checkout,
    )
    ctx = multiprocessing.get_context("spawn")
    stop = ctx.Event()
    procs, first = [], 0
    addresses = {"lines": server.said["listening"], "rest": server.said["http"], "grpc": server.said["grpc"]}
    counts = dict(zip(KINDS, split(a.clients)))
    listed: dict = {}
    try:
        for kind in KINDS:
            out = str(workdir / f"{kind}.npz")
            proc = ctx.Process(target=client_process, args=(kind, addresses[kind], first, counts[kind], obs, stop, out))
            proc.start()
            procs.append((kind, proc, out))
            first += counts[kind]
        time.sleep(a.warmup_s)
        steady_from = time.monotonic()
        cpu_before = server.cpu_s()
        time.sleep(a.steady_s)
        steady_cpu = (server.cpu_s() - cpu_before) / a.steady_s
        jitter = np.random.RandomState(1)  # (a listing falls anywhere between two of the follower's looks)
        for k in range(a.checkpoints):
            step = 150000 + 50000 * k
            listed[step] = write_checkpoint(run, step, *sources[k % 2])
            time.sleep(a.interval_s + jitter.uniform(0, a.poll_s))
    finally:
        stop.set()
        for _, proc, _ in procs:
            proc.join(120)
            if proc.is_alive():
                proc.kill()
                proc.join()
        code = server.stop()
    checkpoints = {100000: run / "Vector" / "Vector-100000.pt"}
    checkpoints.update({step: run / "Vector" / f"Vector-{step}.pt" for step in listed})
    want = {}
    for step, path in checkpoints.items():  # (each checkpoint loaded on its own: the reference, not serve's answer)
        want[step] = np.asarray(inference.load(path).act(obs)["continuous_actions"], np.float64)
    fronts = {}
    for kind, proc, out in procs:
        if not Path(out).exists():  # (the client process failed before it could write its records)
            raise SystemExit(f"bench_follow: the {kind} clients' process ended with exit {proc.exitcode}, no records")
        fronts[kind] = follow_front(np.load(out), want, listed, steady_from, a)
    repository_lines = [line for _, line in server.lines if line.startswith("[repository]")]
    return {
        "clients": counts,
        "poll_s": a.poll_s,
        "listed_steps": sorted(listed),
        "steady_server_cpu_per_s": round(steady_cpu, 3),
        "serve_exit": code,
        "repository_log": repository_lines[:20],
        "verify_s_after_the_run": verify_s(run, sorted(listed)),
        "fronts": fronts,
    }


def verify_s(run: Path, steps: list) -> dict:
    """Each checkpoint's verification (services.repository.verify: the strict load, onnx-compare, the probe) timed
    in this process, after the run: what a swap costs the serving process's cores, on a quieter machine."""
    from mlagents_inference.loaders.run_folder import CheckpointWatch
    from mlagents_inference.services.repository import verify

    found = {f.step: f for f in CheckpointWatch().finished(run, "Vector")}
    out = {}
    for step in steps:
        started = time.monotonic()
        verify(found[step])
        out[str(step)] = round(time.monotonic() - started, 3)
    return out


def follow_front(data, want: dict, listed: dict, steady_from: float, a) -> dict:
    client, sent, latency, version = data["client"], data["sent"], data["latency"], data["version"]
    actions = data["actions"]
    errors, dropped = json.loads(str(data["errors"])), json.loads(str(data["dropped"]))
    unknown = sorted(set(version.tolist()) - set(want))
    worst = 0.0
    for step, reference in want.items():
        mine = version == step
        if mine.any():
            worst = max(worst, float(np.abs(actions[mine] - reference[client[mine]]).max()))
    outside = sent >= steady_from  # (steady: after the warm-up, outside every window after a listing)
    swaps = {}
    for step, at in listed.items():
        answered = sent + latency
        new = answered[(version == step)]
        window = latency[(sent >= at) & (sent < at + a.window_s)]
        outside &= ~((sent >= at) & (sent < at + a.window_s))
        through = latency[(sent >= at) & (sent < (new.min() if len(new) else at) + 1.0)]
        calm = at - (a.interval_s + a.window_s) / 2  # (a control: as long a window between two listings, no swap)
        control = latency[(sent >= calm) & (sent < calm + a.window_s)]
        swaps[str(step)] = {
            "listing_to_first_answer_s": round(float(new.min() - at), 3) if len(new) else None,
            "p99_ms_in_window": round(p99(window) * 1e3, 2) if len(window) else None,
            "requests_in_window": int(len(window)),
            "p99_ms_listing_to_swap_plus_1s": round(p99(through) * 1e3, 2) if len(through) else None,
            "p99_ms_in_a_control_window_before": round(p99(control) * 1e3, 2) if len(control) else None,
        }
    steady = latency[outside]
    steady_s = (sent[outside].max() - steady_from) if outside.any() else 1.0
    steady_s -= sum(min(a.window_s, max(0.0, sent.max() - at)) for at in listed.values())
    steady_p99 = p99(steady)
    window_p99 = [s["p99_ms_in_window"] for s in swaps.values() if s["p99_ms_in_window"] is not None]
    through_p99 = [s["p99_ms_listing_to_swap_plus_1s"] for s in swaps.values()]
    through_p99 = [x for x in through_p99 if x is not None]
    delays = [s["listing_to_first_answer_s"] for s in swaps.values()]
    control_p99 = [s["p99_ms_in_a_control_window_before"] for s in swaps.values()]
    control_p99 = [x for x in control_p99 if x is not None]
    return {
        "answers": int(len(sent)),
        "steady_requests_per_s": round(len(steady) / max(steady_s, 1e-9), 1),
        "steady_p50_ms": round(float(np.median(steady)) * 1e3, 2) if len(steady) else None,
        "steady_p99_ms": round(steady_p99 * 1e3, 2) if steady_p99 is not None else None,
        "swaps": swaps,
        "worst_swap_p99_over_steady": (
            round(max(window_p99) / (steady_p99 * 1e3), 2) if window_p99 and steady_p99 else None
        ),
        "worst_through_swap_p99_over_steady": (
            round(max(through_p99) / (steady_p99 * 1e3), 2) if through_p99 and steady_p99 else None
        ),
        "worst_control_p99_over_steady": (
            round(max(control_p99) / (steady_p99 * 1e3), 2) if control_p99 and steady_p99 else None
        ),
        "worst_listing_to_first_answer_s": max(delays) if delays and None not in delays else None,
        "refused": len(errors),
        "refusals": errors[:3],
        "dropped": len(dropped),
        "drops": dropped[:3],
        "versions_not_written": unknown,
        "max_abs_diff_to_load_act": worst,
    }


# ---- two: two behaviours of one run folder side by side, perf_analyzer on both at once


def two_behaviour_run(workdir: Path) -> Path:
    """examples/vector's Vector and examples/hybrid's Hybrid in one run folder, their records in one
    training_status.json (as tests/conftest.py's two_behaviour_run)."""
    run = Path(shutil.copytree(EXAMPLES / "vector", workdir / "two"))
    shutil.copytree(EXAMPLES / "hybrid" / "Hybrid", run / "Hybrid")
    shutil.copyfile(EXAMPLES / "hybrid" / "Hybrid.onnx", run / "Hybrid.onnx")
    status_file = run / "run_logs" / "training_status.json"
    status = json.loads(status_file.read_text())
    status["Hybrid"] = json.loads((EXAMPLES / "hybrid" / "run_logs" / "training_status.json").read_text())["Hybrid"]
    status_file.write_text(json.dumps(status, indent=4))
    return run


def perf_analyzer_cmd(a, model: str, address: str, data: Path, csv_path: Path) -> list:
    cmd = [a.perf_analyzer, "-m", model, "-u", address, "-i", a.protocol, "-b", "1", "--concurrency-range", "64"]
    cmd += ["--async", "--measurement-interval", str(a.window_ms), "--input-data", str(data), "-f", str(csv_path)]
    # (every window counts as stable: each perf_analyzer runs exactly 3 windows and reports their mean, so that two
    # started together measure the same seconds; one that settled sooner would otherwise measure its model alone)
    cmd += ["--max-threads", "4", "--stability-percentage", "10000", "--max-trials", "3"]
    return cmd


def run_perf(a, models: list, addresses: dict, workdir: Path) -> dict:
    """perf_analyzer on each of `models` at once: {model: its result (obs_per_s, p99_ms) or {"error"}}."""
    from bench_v2 import parse_perf_analyzer, perf_analyzer_env

    env, procs = perf_analyzer_env(), {}
    for model in models:
        csv_path = workdir / f"{model}.csv"
        csv_path.unlink(missing_ok=True)
        cmd = perf_analyzer_cmd(a, model, addresses[a.protocol], workdir / f"{model}.json", csv_path)
        procs[model] = (subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT), csv_path)
    out = {}
    for model, (proc, csv_path) in procs.items():
        try:
            text = proc.communicate(timeout=a.window_ms / 1e3 * 8 + 60)[0].decode(errors="replace")
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
            out[model] = {"error": "perf_analyzer timed out"}
            continue
        result = parse_perf_analyzer(csv_path.read_text() if csv_path.exists() else "", text)
        if proc.returncode != 0 or "obs_per_s" not in result:
            tail = [line for line in text.strip().splitlines() if "WARNING" not in line][-2:]
            result = {"error": f"perf_analyzer exit {proc.returncode}: {' | '.join(tail)}"}
        out[model] = result
    return out


CPU_KEYS = ("serve_s_per_s", "perf_analyzers_s_per_s", "serve_us_per_row")


def model_counts(address: str, model: str) -> tuple:
    """(inference_count, execution_count) of the model's V2 statistics: rows answered, engine calls."""
    conn = http.client.HTTPConnection(*host_port(address), timeout=30)
    try:
        conn.request("GET", f"/v2/models/{model}/stats")
        stats = json.loads(conn.getresponse().read())["model_stats"][0]
        return int(stats["inference_count"]), int(stats["execution_count"])
    finally:
        conn.close()


def measured_perf(a, models: list, addresses: dict, workdir: Path, server: Serve) -> dict:
    """run_perf, with where the CPU went: serve's CPU seconds per second and per row answered, the perf_analyzers'
    CPU seconds per second (the two cores are shared by both), and each model's rows per engine call."""
    import resource

    counts = {m: model_counts(addresses["http"], m) for m in ("Vector", "Hybrid")}
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu, started = server.cpu_s(), time.monotonic()
    got = run_perf(a, models, addresses, workdir)
    wall, cpu = time.monotonic() - started, server.cpu_s() - cpu
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    clients = (after.ru_utime + after.ru_stime) - (children.ru_utime + children.ru_stime)
    rows = 0
    for m in ("Vector", "Hybrid"):
        done, calls = (x - y for x, y in zip(model_counts(addresses["http"], m), counts[m]))
        rows += done
        if m in got and calls > 0:
            got[m]["rows_per_call"] = round(done / calls, 1)
    got["cpu"] = {
        "serve_s_per_s": round(cpu / wall, 2),
        "perf_analyzers_s_per_s": round(clients / wall, 2),
        "serve_us_per_row": round(cpu / rows * 1e6, 1) if rows else None,
    }
    return got


def two_case(a: argparse.Namespace, workdir: Path) -> dict:
    from perf_input_data import input_data

    import inference

    if not a.perf_analyzer:
        return {"skipped": "no perf_analyzer (beside this Python, on PATH, or --perf-analyzer): run tools/v2_tools.sh"}
    run = two_behaviour_run(workdir)
    for model, path in (("Vector", run / "Vector" / "Vector-100000.pt"), ("Hybrid", run / "Hybrid")):
        (workdir / f"{model}.json").write_text(json.dumps(input_data(inference.load(path), 1, 64, 0)))
    server = Serve(
        "--model-dir", run, "--spin", "off", "--http", "127.0.0.1:0", "--grpc", "127.0.0.1:0", fronts=("http", "grpc")
    )
    addresses = {"http": server.said["http"], "grpc": server.said["grpc"]}
    plan = [["Vector"], ["Hybrid"], ["Vector", "Hybrid"]]
    raw: dict = {"Vector": [], "Hybrid": [], "both": []}
    errors: list = []
    try:
        for r in range(a.rounds):
            for models in plan if r % 2 == 0 else plan[::-1]:
                got = measured_perf(a, models, addresses, workdir, server)
                cpu = got.pop("cpu")
                if any("error" in v for v in got.values()):
                    errors += [f"{m} ({'+'.join(models)}): {v['error']}" for m, v in got.items() if "error" in v]
                    continue
                if len(models) == 1:
                    raw[models[0]].append({**got[models[0]], "cpu": cpu})
                else:
                    raw["both"].append({**{m: got[m] for m in models}, "cpu": cpu})
    finally:
        code = server.stop()

    def median(values: list) -> Optional[float]:
        return round(float(np.median(values)), 1) if values else None

    alone = {m: median([x["obs_per_s"] for x in raw[m]]) for m in ("Vector", "Hybrid")}
    both = {m: median([x[m]["obs_per_s"] for x in raw["both"]]) for m in ("Vector", "Hybrid")}
    sums = [x["Vector"]["obs_per_s"] + x["Hybrid"]["obs_per_s"] for x in raw["both"]]
    summed = median(sums)
    return {
        "protocol": a.protocol,
        "concurrency_each": 64,
        "rounds": a.rounds,
        "window_ms": a.window_ms,
        "alone_obs_per_s": alone,
        "alone_p99_ms": {m: median([x["p99_ms"] for x in raw[m] if "p99_ms" in x]) for m in alone},
        "both_obs_per_s": both,
        "both_p99_ms": {m: median([x[m]["p99_ms"] for x in raw["both"] if "p99_ms" in x[m]]) for m in both},
        "both_summed_obs_per_s": summed,
        "summed_over_alone": {m: round(summed / v, 3) if summed and v else None for m, v in alone.items()},
        "summed_over_mean_alone": (  # (two models of different costs: the mix beside the mean of the two alone)
            round(summed / float(np.mean(list(alone.values()))), 3) if summed and None not in alone.values() else None
        ),
        "rows_per_call": {
            "alone": {m: median([x["rows_per_call"] for x in raw[m] if "rows_per_call" in x]) for m in alone},
            "both": {m: median([x[m]["rows_per_call"] for x in raw["both"] if "rows_per_call" in x[m]]) for m in both},
        },
        "cpu": {
            case: {k: median([x["cpu"][k] for x in runs if x["cpu"][k] is not None]) for k in CPU_KEYS}
            for case, runs in raw.items()
        },
        "serve_exit": code,
        "errors": errors,
        "raw": raw,
    }


# ---- main


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--case", choices=("follow", "two", "all"), default="all")
    p.add_argument("--clients", type=int, default=64, help="follow: clients in all, over the three fronts (64)")
    p.add_argument("--warmup-s", type=float, default=2.0, help="follow: seconds before the steady phase (2)")
    p.add_argument("--steady-s", type=float, default=10.0, help="follow: the steady phase (10 s)")
    p.add_argument("--checkpoints", type=int, default=3, help="follow: checkpoints written (3)")
    p.add_argument("--interval-s", type=float, default=8.0, help="follow: seconds between checkpoints (8)")
    p.add_argument("--poll-s", type=float, default=2.0, help="follow: serve's --follow-poll-s (2, its default)")
    p.add_argument("--window-s", type=float, default=2.0, help="follow: the window after a listing for p99 (2 s)")
    p.add_argument("--rounds", type=int, default=3, help="two: rounds of (Vector, Hybrid, both) (3)")
    p.add_argument("--window-ms", type=int, default=3000, help="two: perf_analyzer --measurement-interval (3000)")
    p.add_argument("--protocol", choices=("grpc", "http"), default="grpc", help="two: perf_analyzer -i (grpc)")
    p.add_argument("--perf-analyzer", help="two: perf_analyzer's path (default: beside this Python, else on PATH)")
    p.add_argument("--before", type=Path, help="follow: also measured on this checkout's serve (the code before)")
    p.add_argument("--json", action="store_true", help="one JSON object instead of the text report")
    a = p.parse_args(argv)
    if a.clients < 3 or a.checkpoints < 1 or a.interval_s <= a.window_s:
        p.error("--clients >= 3, --checkpoints >= 1, --interval-s above --window-s")
    if a.before and not (a.before / "inference.py").is_file():
        p.error(f"--before {a.before}: no inference.py there")
    beside = Path(sys.executable).parent / "perf_analyzer"
    a.perf_analyzer = a.perf_analyzer or (str(beside) if beside.exists() else shutil.which("perf_analyzer"))
    return a


def print_follow(name: str, follow: dict) -> None:
    print(
        f"\n{name}: clients {follow['clients']}, --follow-poll-s {follow['poll_s']}, checkpoints listed "
        f"{follow['listed_steps']}, serve's CPU while steady {follow['steady_server_cpu_per_s']} s/s; each "
        f"checkpoint's verification timed here after the run (s): {follow['verify_s_after_the_run']}"
    )
    head = (
        "front",
        "answers",
        "req/s",
        "p50 ms",
        "p99 ms",
        "2s p99/steady",
        "swap p99/steady",
        "calm p99/steady",
        "listing->new s",
        "refused",
        "dropped",
        "max |diff|",
    )
    print("".join(f"{h:>15}" for h in head))
    for kind, f in follow["fronts"].items():
        cells = (
            kind,
            f["answers"],
            f["steady_requests_per_s"],
            f["steady_p50_ms"],
            f["steady_p99_ms"],
            f["worst_swap_p99_over_steady"],
            f["worst_through_swap_p99_over_steady"],
            f["worst_control_p99_over_steady"],
            f["worst_listing_to_first_answer_s"],
            f["refused"],
            f["dropped"],
            f"{f['max_abs_diff_to_load_act']:.2g}",
        )
        print("".join(f"{str(c):>15}" for c in cells))
    for kind, f in follow["fronts"].items():
        for step, s in f["swaps"].items():
            print(
                f"  {kind} {step}: listing -> first answer {s['listing_to_first_answer_s']} s, p99 in the "
                f"window {s['p99_ms_in_window']} ms ({s['requests_in_window']} requests), from the listing to 1 s "
                f"after the swap {s['p99_ms_listing_to_swap_plus_1s']} ms; a control window before (no swap) "
                f"{s['p99_ms_in_a_control_window_before']} ms"
            )
        for what in ("refusals", "drops", "versions_not_written"):
            if f[what]:
                print(f"  {kind} {what}: {f[what]}")
    for line in follow["repository_log"]:
        print(f"  serve said: {line}")


def print_report(out: dict) -> None:
    print(
        f"commit {out['commit']}, {out['cpus']} CPUs, load average before {out['load_before']}, after "
        f"{out['load_after']}, {out['date']}"
    )
    for name in ("follow", "follow_before"):
        if out.get(name):
            print_follow(name, out[name])
    two = out.get("two")
    if two and "skipped" in two:
        print(f"\ntwo: skipped: {two['skipped']}")
    elif two:
        print(
            f"\ntwo ({two['protocol']}, concurrency 64 each, {two['rounds']} rounds, {two['window_ms']} ms windows,"
            " medians):"
        )
        print(f"  alone     obs/s {two['alone_obs_per_s']}  p99 ms {two['alone_p99_ms']}")
        print(f"  both      obs/s {two['both_obs_per_s']}  p99 ms {two['both_p99_ms']}")
        print(
            f"  summed    obs/s {two['both_summed_obs_per_s']}; summed / alone {two['summed_over_alone']}, "
            f"summed / the mean of the two alone {two['summed_over_mean_alone']} (target >= 0.85)"
        )
        print(f"  rows per engine call {two['rows_per_call']}")
        for case, cpu in two["cpu"].items():
            print(
                f"  {case:<9} serve's CPU {cpu['serve_s_per_s']} s/s, {cpu['serve_us_per_row']} us a row; the "
                f"perf_analyzers' CPU {cpu['perf_analyzers_s_per_s']} s/s"
            )
        for error in two["errors"]:
            print(f"  error: {error}")


def main(argv=None) -> int:
    from bench_v2 import commit_of

    a = parse_args(argv)
    out: dict = {
        "commit": commit_of(ROOT),
        "cpus": os.cpu_count(),
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
    }
    out["load_before"] = [round(x, 2) for x in os.getloadavg()]
    with tempfile.TemporaryDirectory(prefix="bench_follow-") as tmp:
        if a.case in ("follow", "all"):
            out["follow"] = follow_case(a, Path(tmp))
            if a.before:  # (the code before, the same case right after, on the same machine)
                out["follow_before"] = follow_case(a, Path(tmp), a.before)
                out["follow_before"]["checkout"] = f"{a.before} at {commit_of(a.before)}"
        if a.case in ("two", "all"):
            out["two"] = two_case(a, Path(tmp))
    out["load_after"] = [round(x, 2) for x in os.getloadavg()]
    if a.json:
        print(json.dumps(out))
    else:
        print_report(out)
    follow = out.get("follow")
    if follow and any(
        f["refused"] or f["dropped"] or f["max_abs_diff_to_load_act"] > TOL or f["versions_not_written"]
        for f in follow["fronts"].values()
    ):
        print("bench_follow: answers refused, dropped, or not equal to load(<checkpoint>).act()", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
