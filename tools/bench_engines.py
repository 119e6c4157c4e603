#!/usr/bin/env python3
"""The torch engine before and after a change, beside onnxruntime, in ONE process and one run.

    git worktree add /tmp/before main                       # the code before, e.g. main's
    python tools/bench_engines.py --before /tmp/before      # bundled sample, batch 4096
    python tools/bench_engines.py --before /tmp/before --batch 64 --model-dir examples/lstm --json

Contenders, each `act()` (or `run()`) of the Python API on the same float32 observations (random normal vectors,
uniform [0, 1) images, all-allowed masks, zero memories; deterministic):

  * before:      the --before checkout's `inference.load(model, engine="torch")`, imported first under its own
                 package and then set aside in sys.modules, so both versions live in this process side by side;
  * torch:       this tree's `inference.load(model, engine="torch")`;
  * onnxruntime: this tree's `inference.load(model, engine="onnxruntime")` (its own export of the modules);
  * bare:        a default onnxruntime.InferenceSession on ML-Agents' ONNX beside the checkpoint, fetching the
                 deterministic outputs (and recurrent_out);
  * with --threads N, also "torch threads=N" and "onnxruntime threads=N": this tree's engines loaded with
                 `threads=N` (torch's threads during the torch engine's calls; onnxruntime's intra-op threads).

They take turns (--rounds turns of --calls timed calls each, after one untimed call; who goes first alternates), so
all see the same machine load. Printed: each contender's median call time (median over turns of the turn's median),
its throughput (batch / that time) and its ratio of throughput to every other contender, as the median over turns of
the ratio within each turn (steadier on a shared machine than a ratio of two medians). Exit code 0, 2 on bad input.
"""

from __future__ import annotations

import argparse
import importlib
import json
import statistics
import sys
from pathlib import Path

import numpy as np
from bench_api import round_medians  # (tools/ is this script's folder: on sys.path)

ROOT = Path(__file__).resolve().parent.parent
HUGGY = ROOT / "assets" / "ppo-Huggy-sample"


def _import_inference(root: Path):
    """inference.py of `root` with its package, then taken out of sys.modules (the objects made from it keep their
    modules), so that another root's can be imported next."""
    sys.path.insert(0, str(root))
    try:
        module = importlib.import_module("inference")
    finally:
        sys.path.remove(str(root))
    return module


def _forget_package() -> None:
    for name in [n for n in sys.modules if n == "inference" or n.split(".")[0] == "mlagents_inference"]:
        del sys.modules[name]


def _inputs(settings, batch: int, seed: int):
    rng = np.random.RandomState(seed)
    obs = [
        (rng.rand(batch, *i.shape) if i.kind == "visual" else rng.randn(batch, *i.shape)).astype(np.float32)
        for i in settings.inputs
    ]
    masks = np.ones((batch, sum(settings.discrete_branches)), np.float32) if settings.discrete_branches else None
    memory = np.zeros((batch, settings.memory_size), np.float32) if settings.memory_size else None
    return obs, masks, memory


def _bare(model_dir: Path, settings, obs, masks, memory):
    import onnxruntime as ort

    onnx = sorted(p for p in model_dir.rglob("*.onnx"))
    if not onnx:
        return None
    session = ort.InferenceSession(str(onnx[0]), providers=["CPUExecutionProvider"])
    names = [i.name for i in session.get_inputs()]
    feed = {f"obs_{k}": x for k, x in enumerate(obs)}
    if "action_masks" in names:
        feed["action_masks"] = masks
    if "recurrent_in" in names:
        feed["recurrent_in"] = memory.reshape(len(memory), 1, -1)
    outputs = [o.name for o in session.get_outputs()]
    fetch = [
        n
        for n in ("deterministic_continuous_actions", "deterministic_discrete_actions", "recurrent_out")
        if n in outputs
    ]
    return lambda: session.run(fetch, feed)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--before", type=Path, required=True, help="a checkout of the code before (its root)")
    parser.add_argument("--model-dir", type=Path, default=HUGGY, help="an ML-Agents run folder (default: the sample)")
    parser.add_argument("--batch", type=int, default=4096)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--calls", type=int, default=5)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=None, help="also both engines with load(threads=N)")
    parser.add_argument("--json", action="store_true")
    a = parser.parse_args()
    if not (a.before / "inference.py").is_file() or min(a.batch, a.rounds, a.calls, a.threads or 1) < 1:
        print(
            "error: --before must hold inference.py; --batch, --rounds, --calls and --threads at least 1",
            file=sys.stderr,
        )
        return 2
    if a.before.resolve() == ROOT:
        print("error: --before is this tree", file=sys.stderr)
        return 2
    model_dir = a.model_dir.resolve()
    old = _import_inference(a.before.resolve())
    before = old.load(model_dir, engine="torch")
    _forget_package()
    new = _import_inference(ROOT)
    after, ort_engine = new.load(model_dir, engine="torch"), new.load(model_dir, engine="onnxruntime")
    obs, masks, memory = _inputs(after.settings, a.batch, a.seed)

    def act(policy):
        return lambda: policy.act(obs, masks, memory=memory) if memory is not None else policy.act(obs, masks)

    fns = {"before": act(before), "torch": act(after), "onnxruntime": act(ort_engine)}
    if a.threads:
        for engine in ("torch", "onnxruntime"):
            fns[f"{engine} threads={a.threads}"] = act(new.load(model_dir, engine=engine, threads=a.threads))
    bare = _bare(model_dir, after.settings, obs, masks, memory)
    if bare is not None:
        fns["bare"] = bare
    medians = round_medians(fns, a.rounds, a.calls)
    result = {"model_dir": str(model_dir), "batch": a.batch, "rounds": a.rounds, "calls": a.calls, "contenders": {}}
    for name, values in medians.items():
        row = {"median_ms": 1e3 * statistics.median(values), "throughput_per_s": a.batch / statistics.median(values)}
        for other, theirs in medians.items():
            if other != name:  # throughput ratio = their time / mine, turn by turn
                row[f"x_{other}"] = statistics.median(t / m for m, t in zip(values, theirs))
        result["contenders"][name] = row
    if a.json:
        print(json.dumps(result))
    else:
        print(f"{model_dir.name}, batch {a.batch}, {a.rounds} turns of {a.calls} calls")
        for name, row in result["contenders"].items():
            ratios = "  ".join(f"{k[2:]} x{v:.2f}" for k, v in row.items() if k.startswith("x_"))
            print(f"  {name:22s} {row['median_ms']:9.2f} ms  {row['throughput_per_s']:10.0f}/s  throughput: {ratios}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
