#!/usr/bin/env python3
"""serve + inference.connect() beside TorchRL's InferenceServer, in one run (a benchmark, not a test;
docs/performance.md, "Many threads"): 64 actor threads in lock-step (each sends its next observation when its
action has come), on the bundled Huggy, the same ONNX graph through onnxruntime with the same session options on
both sides (the session inference.load(..., spin=False) makes, serve's own: every graph optimisation, onnxruntime's
default threads, no spinning):

- serve, one connect() shared by the 64 threads (one connection; their lines batch on the server);
- serve, one connect() per thread (64 objects: since issue 46's pool, one connection shared by them);
- serve, one connect(shared=False) per thread (64 connections, one line each in flight);
- TorchRL's InferenceServer (service_backend "thread", max_batch_size 64) with its SlotTransport (one slot per
  thread) and with its ThreadingTransport, the model a callable that runs that session on the batch;
- one caller alone (4 x --steps calls), serve + connect() and TorchRL's SlotTransport: a round trip's p50;
- with --before DIR: the shared, per-thread and lone-caller configurations against a second serve, DIR's
  inference.py (a checkout of the code before, e.g. a git worktree), with DIR's own connect() (its package loaded
  under another name), in the same turns.

Each configuration runs `--steps` steps of every thread, in turn, `--rounds` times (interleaved: ours and TorchRL's,
one after the other); actions/s (the steps of all threads over the wall time) and the p99 of one call's latency,
medians over rounds, and each round's ratio to TorchRL's (their median: the same minutes on a shared machine). Every
action is compared with the session's own on that observation (float32 rounding bound); a wrong one is counted.
serve runs as a separate process (python inference.py --mode serve) on the same cores.

    python -m venv --system-site-packages VENV && VENV/bin/pip install 'torchrl==0.14.*' 'tensordict==0.14.*'
    # (pyproject's torchrl extra; a venv, never the global environment: torchrl takes the torch already there)
    flock /tmp/bench.lock VENV/bin/python tools/bench_torchrl.py [--threads 64] [--steps 150] [--rounds 3] [--json]
"""

import argparse
import json
import os
import re
import select
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
HUGGY = ROOT / "assets" / "ppo-Huggy-sample"
OUTPUT = "deterministic_continuous_actions"  # (the engine's deterministic output: the actions act() returns)


def start_serve(listen: str, root: Path = ROOT) -> tuple:
    proc = subprocess.Popen(
        [sys.executable, str(root / "inference.py"), "--mode", "serve", "--model-dir", str(HUGGY), "--listen", listen],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    text, deadline = b"", time.monotonic() + 120
    while not (found := re.search(rb"listening on (\S+)\n", text)):
        if time.monotonic() > deadline or proc.poll() is not None:
            proc.kill()
            raise SystemExit(f"serve did not start: {text.decode(errors='replace')[-500:]}")
        if select.select([proc.stderr], [], [], 1.0)[0]:
            text += os.read(proc.stderr.fileno(), 4096)
    return proc, found.group(1).decode()


def lockstep(threads: int, steps: int, make_actor, obs: np.ndarray, want: np.ndarray) -> dict:
    """`threads` threads, each `steps` calls of its actor on its own observations: actions/s, p99, wrong answers."""
    latencies = [np.zeros(steps) for _ in range(threads)]
    wrong, errors = [0] * threads, []
    actors = [make_actor(k) for k in range(threads)]
    ready = threading.Barrier(threads + 1)

    def run(k):
        act, mine, expected, lat = actors[k], obs[k], want[k], latencies[k]
        ready.wait()
        try:
            for step in range(steps):
                t0 = time.perf_counter()
                got = act(mine[step])
                lat[step] = time.perf_counter() - t0
                wrong[k] += not np.allclose(got, expected[step], rtol=1e-5, atol=1e-5)
        except Exception as exc:  # noqa: BLE001 - a benchmark reports every thread's failure
            errors.append(f"{type(exc).__name__}: {exc}")

    pool = [threading.Thread(target=run, args=(k,)) for k in range(threads)]
    for t in pool:
        t.start()
    ready.wait()
    t0 = time.perf_counter()
    for t in pool:
        t.join()
    wall = time.perf_counter() - t0
    lat = np.concatenate(latencies)
    return {
        "actions_per_s": threads * steps / wall,
        "p50_ms": float(np.percentile(lat, 50) * 1e3),
        "p99_ms": float(np.percentile(lat, 99) * 1e3),
        "wrong": sum(wrong),
        "errors": errors[:3],
    }


def before_connect(root: Path):
    """The connect() of the checkout at `root` (its package imported under another name, beside this tree's)."""
    import importlib
    import importlib.util

    name, package = "mlagents_inference_before", root / "mlagents_inference"
    spec = importlib.util.spec_from_file_location(
        name, package / "__init__.py", submodule_search_locations=[str(package)]
    )
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return importlib.import_module(name + ".fronts.remote").connect


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=64)
    ap.add_argument("--steps", type=int, default=150)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--listen", default="127.0.0.1:0", help="serve's address (unix:PATH for a Unix socket)")
    ap.add_argument("--before", type=Path, help="a checkout of the code before: its serve, side by side")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()

    import torch
    import torchrl
    from tensordict import TensorDict
    from torchrl.modules.inference_server import InferenceServer, SlotTransport, ThreadingTransport

    import inference

    torch.set_num_threads(1)  # (torch only stacks tensors here; onnxruntime computes)
    session = inference.load(HUGGY, engine="onnxruntime", spin=False).engine.session  # serve's session options
    rng = np.random.RandomState(0)
    obs = rng.randn(args.threads, args.steps, 59).astype(np.float32)
    want = session.run([OUTPUT], {"obs_0": obs.reshape(-1, 59)})[0].reshape(args.threads, args.steps, -1)
    lone = obs.reshape(1, -1, 59)[:, : args.steps * 4]  # (one caller alone: a round trip's latency)
    lone_want = want.reshape(1, -1, want.shape[-1])[:, : args.steps * 4]

    def model(td):  # TorchRL's side: the batch through the same session
        actions = session.run([OUTPUT], {"obs_0": td["obs"].numpy()})[0]
        return TensorDict({"action": torch.from_numpy(actions)}, batch_size=td.batch_size)

    proc, address = start_serve(args.listen)
    procs, results = [proc], {}
    try:
        shared = inference.connect(address)
        own = [inference.connect(address) for _ in range(args.threads)]
        alone = [inference.connect(address, shared=False) for _ in range(args.threads)]
        before = None
        if args.before:  # (a Unix socket: the path with ".before" added)
            listen = args.listen + ".before" if args.listen.startswith("unix:") else args.listen
            before_proc, before_address = start_serve(listen, args.before.resolve())
            procs.append(before_proc)
            old = before_connect(args.before.resolve())
            before = old(before_address), [old(before_address) for _ in own]

        def torchrl_run(transport, threads=args.threads, obs=obs, want=want) -> dict:
            with InferenceServer(model, transport, max_batch_size=args.threads) as server:
                clients = server.clients(threads)

                def make(k):
                    client = clients[k]
                    return lambda x: client(TensorDict({"obs": torch.from_numpy(x)}))["action"].numpy()

                return lockstep(threads, len(obs[0]), make, obs, want)

        configs = {
            "serve, one connect() shared": lambda: lockstep(
                args.threads, args.steps, lambda k: lambda x: shared.act(x)["continuous_actions"], obs, want
            ),
            "serve, one connect() per thread": lambda: lockstep(
                args.threads,
                args.steps,
                lambda k: (lambda p: lambda x: p.act(x)["continuous_actions"])(own[k]),
                obs,
                want,
            ),
            "serve, one connect(shared=False) per thread": lambda: lockstep(
                args.threads,
                args.steps,
                lambda k: (lambda p: lambda x: p.act(x)["continuous_actions"])(alone[k]),
                obs,
                want,
            ),
            **(
                {
                    "before: serve, one connect() shared": lambda: lockstep(
                        args.threads, args.steps, lambda k: lambda x: before[0].act(x)["continuous_actions"], obs, want
                    ),
                    "before: serve, one connect() per thread": lambda: lockstep(
                        args.threads,
                        args.steps,
                        lambda k: (lambda p: lambda x: p.act(x)["continuous_actions"])(before[1][k]),
                        obs,
                        want,
                    ),
                }
                if before
                else {}
            ),
            "TorchRL SlotTransport": lambda: torchrl_run(SlotTransport(args.threads)),
            "TorchRL ThreadingTransport": lambda: torchrl_run(ThreadingTransport()),
            "lone caller: serve + connect()": lambda: lockstep(
                1, args.steps * 4, lambda k: lambda x: shared.act(x)["continuous_actions"], lone, lone_want
            ),
            "lone caller: TorchRL SlotTransport": lambda: torchrl_run(SlotTransport(1), 1, lone, lone_want),
            **(
                {
                    "before: lone caller: serve + connect()": lambda: lockstep(
                        1, args.steps * 4, lambda k: lambda x: before[0].act(x)["continuous_actions"], lone, lone_want
                    )
                }
                if before
                else {}
            ),
        }
        for name, run in configs.items():  # (warm up: every path once, short)
            run()
        for _ in range(args.rounds):
            for name, run in configs.items():
                results.setdefault(name, []).append(run())
        for p in [shared, *own, *alone, *([before[0], *before[1]] if before else [])]:
            p.close()
    finally:
        for proc in procs:
            proc.terminate()  # (SIGTERM: serve drains and removes its Unix socket)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()

    summary = {
        name: {
            "actions_per_s": float(np.median([r["actions_per_s"] for r in rs])),
            "p99_ms": float(np.median([r["p99_ms"] for r in rs])),
            "p50_ms": float(np.median([r["p50_ms"] for r in rs])),
            "actions_per_s_rounds": [round(r["actions_per_s"]) for r in rs],
            "p99_ms_rounds": [round(r["p99_ms"], 2) for r in rs],
            "wrong": sum(r["wrong"] for r in rs),
            "errors": [e for r in rs for e in r["errors"]][:3],
        }
        for name, rs in results.items()
    }
    ours = [name for name in results if "one connect(" in name]
    for name in ours:  # (per round: the same minutes)
        rounds = zip(results[name], results["TorchRL SlotTransport"], results["TorchRL ThreadingTransport"])
        speed, p99 = zip(*((r["actions_per_s"] / a["actions_per_s"], r["p99_ms"] / b["p99_ms"]) for r, a, b in rounds))
        summary[name]["x_slot_actions_per_s"] = float(np.median(speed))
        summary[name]["x_slot_actions_per_s_rounds"] = [round(x, 2) for x in speed]
        summary[name]["p99_over_threading_p99"] = float(np.median(p99))
        summary[name]["p99_over_threading_p99_rounds"] = [round(x, 2) for x in p99]
    meta = {
        "torchrl": torchrl.__version__,
        "onnxruntime": __import__("onnxruntime").__version__,
        "threads": args.threads,
        "steps": args.steps,
        "rounds": args.rounds,
        "listen": args.listen.split(":")[0],
        "before": str(args.before) if args.before else None,
    }
    if args.json:
        print(json.dumps({"meta": meta, "results": summary}))
        return
    print(json.dumps(meta))
    for name, r in summary.items():
        extra = (
            f"\n    {r['x_slot_actions_per_s']:.2f}x Slot's actions/s {r['x_slot_actions_per_s_rounds']}, "
            f"p99 {r['p99_over_threading_p99']:.2f}x Threading's {r['p99_over_threading_p99_rounds']}"
            if "x_slot_actions_per_s" in r
            else ""
        )
        print(
            f"{name:42s} {r['actions_per_s']:8.0f} actions/s  p50 {r['p50_ms']:6.2f} ms  p99 {r['p99_ms']:6.2f} ms  "
            f"rounds {r['actions_per_s_rounds']} / {r['p99_ms_rounds']}  wrong {r['wrong']}{extra}"
            + (f"  errors {r['errors']}" if r["errors"] else "")
        )


if __name__ == "__main__":
    main()
