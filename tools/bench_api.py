#!/usr/bin/env python3
"""What one call of the Python API costs, against a bare onnxruntime session on the same ML-Agents ONNX.

    python tools/bench_api.py                                  # Huggy, discrete-multi (masks), lstm
    python tools/bench_api.py --rounds 60 --calls 300
    python tools/bench_api.py --model-dir examples/hybrid --model-dir examples/visual-simple
    python tools/bench_api.py --inference /tmp/old/inference.py   # another version's API, e.g. a git worktree
    python tools/bench_api.py --tensors --device cuda:0           # also the torch engine: host arrays, card tensors

For each policy, in ONE process, at batch 1 (what a control loop sends):

  * bare:       onnxruntime.InferenceSession(<Behavior>.onnx) with default options, session.run of the
                deterministic outputs (and recurrent_out), every input fed as ML-Agents' graph takes it;
  * act:        policy.act(observations, action_masks, memory=...) on the same inputs: float32 arrays
                [1, ...], a 0/1 float32 mask (1 = allowed), the LSTM memory [1, memory_size];
  * get_action: policy.get_action(decision_steps) on the same inputs as mlagents_envs hands them
                (obs list, agent_id, action_mask as per-branch bool arrays, True = masked; the memory
                kept by the policy).
  * with --tensors, on the torch engine on --device (default cpu):
    torch act:          policy.act() with the same host arrays;
    torch act, tensors: policy.act() with the same inputs as torch tensors already on the device, answered with
                        tensors there (no host copy; the device waited for after each call).

Every contender's inputs are made once, outside the timing. The contenders take turns (--rounds
turns of --calls timed calls each, after one untimed call; who goes first alternates), so all see
the same machine load; two sessions' thread pools in one process cost each other something at a
turn's start, which long turns dilute. Printed per policy: each contender's median per-call time
(median over turns of the turn's median) and the ratio to bare, as the median over turns of the
ratio within each turn (steadier on a shared machine than a ratio of two medians).
Exit code 0; --limit R: 1 when some act() ratio exceeds R.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_DIRS = [ROOT / "assets" / "ppo-Huggy-sample", ROOT / "examples" / "discrete-multi", ROOT / "examples" / "lstm"]


class Steps:
    """The fields of mlagents_envs' DecisionSteps that a policy reads."""

    def __init__(self, obs, agent_id, action_mask):
        self.obs, self.agent_id, self.action_mask = obs, agent_id, action_mask


def _internal(inference, module: str, name: str):
    """A helper of the version measured: in the package beside its inference.py, or (an older,
    single-file inference.py) in that file itself."""
    if hasattr(inference, name):
        return getattr(inference, name)
    try:
        return getattr(importlib.import_module(f"mlagents_inference.core.{module}"), name)  # (since the regrouping)
    except ImportError:
        return getattr(importlib.import_module(f"mlagents_inference.{module}"), name)


def contenders(inference, model_dir: Path, seed: int, tensors: bool = False, device: str = "cpu") -> dict:
    import onnxruntime as ort

    policy = inference.load(model_dir)
    s = policy.settings
    behavior = _internal(inference, "sources", "find_behavior")(model_dir)
    session = ort.InferenceSession(str(model_dir / f"{behavior}.onnx"), providers=["CPUExecutionProvider"])
    rng = np.random.RandomState(seed)
    obs = [
        (rng.rand(1, *i.shape) if i.kind == "visual" else rng.randn(1, *i.shape)).astype(np.float32) for i in s.inputs
    ]
    masks = _internal(inference, "observations", "random_masks")(s, seed, 1)
    memory = None
    if s.memory_size:
        half = s.memory_size // 2
        memory = np.concatenate([np.tanh(rng.randn(1, half)), rng.randn(1, half)], axis=1).astype(np.float32)
    names = [i.name for i in session.get_inputs()]
    feed = {f"obs_{k}": x for k, x in enumerate(obs)}
    if "action_masks" in names:
        feed["action_masks"] = masks
    if "recurrent_in" in names:
        feed["recurrent_in"] = memory.reshape(1, 1, -1)
    outputs = [o.name for o in session.get_outputs()]
    fetch = [
        n
        for n in ("deterministic_continuous_actions", "deterministic_discrete_actions", "recurrent_out")
        if n in outputs
    ]
    run = session.run
    out = {"bare": lambda: run(fetch, feed), "act": lambda: policy.act(obs, masks, memory=memory)}
    if hasattr(policy, "get_action"):
        per_branch = None
        if masks is not None:
            per_branch = np.split(masks == 0, np.cumsum(s.discrete_branches)[:-1], axis=1)  # True = masked
        steps = Steps(obs, np.array([0], np.int32), per_branch)
        out["get_action"] = lambda: policy.get_action(steps)
    if tensors:
        out.update(tensor_contenders(inference, model_dir, obs, masks, memory, device))
    return out


def tensor_contenders(inference, model_dir: Path, obs, masks, memory, device: str) -> dict:
    import torch

    from mlagents_inference.engines.torch_devices import synchronize

    policy = inference.load(model_dir, device=device, engine="torch")
    on = policy.device
    t_obs = [torch.from_numpy(x).to(on) for x in obs]
    t_masks = None if masks is None else torch.from_numpy(masks).to(on)
    t_memory = None if memory is None else torch.from_numpy(memory).to(on)

    def on_device():
        policy.act(t_obs, t_masks, memory=t_memory)
        synchronize(on)

    return {"torch act": lambda: policy.act(obs, masks, memory=memory), "torch act, tensors": on_device}


def round_medians(fns: dict, rounds: int, calls: int) -> dict:
    """Each contender's median call time (seconds) in each round, the contenders taking turns (the order reversed every
    other round), one call before each round's timed ones (tools/bench_engines.py uses it too)."""
    perf = time.perf_counter
    medians = {name: [] for name in fns}
    for turn in range(rounds):
        order = list(fns) if turn % 2 == 0 else list(fns)[::-1]
        for name in order:
            fn = fns[name]
            fn()
            times = []
            for _ in range(calls):
                t0 = perf()
                fn()
                times.append(perf() - t0)
            medians[name].append(statistics.median(times))
    return medians


def measure(fns: dict, rounds: int, calls: int) -> dict:
    medians = {name: [t * 1e6 for t in values] for name, values in round_medians(fns, rounds, calls).items()}
    result = {}
    for name, values in medians.items():
        result[name] = {"median_us": statistics.median(values)}
        if name != "bare":
            ratios = sorted(a / b for a, b in zip(values, medians["bare"]))
            result[name].update(
                ratio=statistics.median(ratios),
                ratio_q1=ratios[len(ratios) // 4],
                ratio_q3=ratios[(3 * len(ratios)) // 4],
            )
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model-dir", action="append", type=Path, help="an ML-Agents run folder (repeatable)")
    parser.add_argument("--rounds", type=int, default=40)
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--inference", type=Path, default=ROOT / "inference.py", help="the inference.py to import")
    parser.add_argument("--limit", type=float, default=None, help="exit 1 when an act() ratio exceeds this")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--tensors", action="store_true", help="add the torch engine with host arrays and tensors")
    parser.add_argument("--device", default="cpu", help="--tensors: the torch engine's device")
    args = parser.parse_args()
    sys.path.insert(0, str(Path(args.inference).resolve().parent))  # (its package, mlagents_inference/, beside it)
    spec = importlib.util.spec_from_file_location("inference", args.inference)
    inference = importlib.util.module_from_spec(spec)
    sys.modules["inference"] = inference
    spec.loader.exec_module(inference)
    results, worst = {}, 0.0
    for model_dir in args.model_dir or DEFAULT_DIRS:
        fns = contenders(inference, model_dir.resolve(), args.seed, args.tensors, args.device)
        r = measure(fns, args.rounds, args.calls)
        results[model_dir.name] = r
        worst = max(worst, r["act"]["ratio"])
        if not args.json:
            line = f"{model_dir.name:24s} bare {r['bare']['median_us']:7.1f} µs"
            for name in r:
                if name != "bare":
                    x = r[name]
                    line += (
                        f" | {name} {x['median_us']:7.1f} µs, {x['ratio']:.3f}x bare "
                        f"(turns' quartiles {x['ratio_q1']:.3f}-{x['ratio_q3']:.3f})"
                    )
            print(line, flush=True)
    if args.json:
        print(
            json.dumps(
                {"inference": str(args.inference), "rounds": args.rounds, "calls": args.calls, "results": results}
            )
        )
    return 1 if args.limit is not None and worst > args.limit else 0


if __name__ == "__main__":
    sys.exit(main())
