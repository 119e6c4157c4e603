#!/usr/bin/env python3
"""The device check's probe step (tools/device_check.sh): where a call's time goes on the card, measured, not gated.
One JSON line on stdout (its "summary" the log's one line); exit 0 when it ran, 2 when it cannot run.

    python tools/device_probe.py --device cuda:0 [--model-dir DIR] [--batches 1,64,4096,65536] [--runs 300]

- bandwidth: a 64 MiB host buffer to the card and back, pageable against pinned (GB/s, best of 5);
- for each batch: act() with host arrays and act() with tensors already on the card (answered there: no host copy),
  p50 and p99 over the runs (fewer for the big batches), the card waited for after each call with tensors;
- the same batch split with the card's own events (torch.cuda.Event / torch.npu.Event, on the engine's stream):
  copy in, replay, copy out (milliseconds, median of the runs), where the bucket's graph runs;
- kernels in one replay (CUDA: torch.profiler's kernel events; None elsewhere);
- forwards per act(): the network body's forward calls in one act() of each kind (eager, so that Python runs them);
- the engine's captures, replays and eager calls after all of it.
With --device cpu (the script's dry run) the card-only figures are None: nothing here is a card figure then.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SAMPLE = ROOT / "assets" / "ppo-Huggy-sample"
MIB = 1 << 20


def percentile_ms(times: list, q: float):
    import numpy as np

    return round(float(np.percentile(np.asarray(times) * 1e3, q)), 4) if times else None


def bandwidth(device) -> dict:
    """GB/s host to card and back through pageable and pinned host memory (64 MiB, best of 5)."""
    import torch

    from mlagents_inference.engines.torch_devices import synchronize

    if device.type == "cpu":
        return {"pageable": None, "pinned": None}
    card = torch.empty(64 * MIB, dtype=torch.uint8, device=device)
    out = {}
    for kind, host in (
        ("pageable", torch.empty(64 * MIB, dtype=torch.uint8)),
        ("pinned", torch.empty(64 * MIB, dtype=torch.uint8, pin_memory=True)),
    ):
        best = {}
        for way in ("to_card", "to_host"):
            times = []
            for _ in range(5):
                synchronize(device)
                t0 = time.perf_counter()
                (card.copy_(host, non_blocking=True) if way == "to_card" else host.copy_(card, non_blocking=True))
                synchronize(device)
                times.append(time.perf_counter() - t0)
            best[way] = round(64 * MIB / min(times) / 1e9, 2)
        out[kind] = best
    return out


def latencies(policy, device, batch: int, runs: int, seed: int) -> dict:
    """act() p50/p99 with host arrays and with tensors on the device (waited for after each call)."""
    import torch

    from mlagents_inference.core.observations import random_inputs
    from mlagents_inference.engines.torch_devices import synchronize

    host = random_inputs(policy.settings, seed, batch)
    on_card = [torch.from_numpy(x).to(device) for x in host]
    out = {}
    for kind, obs in (("host", host), ("device", on_card)):
        for _ in range(3):  # (warm-up: the bucket captured)
            answer = policy.act(obs)
        kept = isinstance(next(iter(answer.values())), torch.Tensor)
        times = []
        for _ in range(runs):
            synchronize(device)
            t0 = time.perf_counter()
            policy.act(obs)
            if kind == "device":
                synchronize(device)
            times.append(time.perf_counter() - t0)
        out[kind] = {"p50_ms": percentile_ms(times, 50), "p99_ms": percentile_ms(times, 99), "runs": runs}
        if kind == "device":
            out[kind]["answered_on_device"] = kept
    return out


def event_split(policy, batch: int, runs: int, seed: int):
    """Copy in, replay, copy out of one call at `batch` rows with the card's events on the engine's stream, as
    TorchEngine.run does them (milliseconds, medians); None where no graph runs for the bucket."""
    import numpy as np
    import torch

    from mlagents_inference.core.observations import random_inputs

    engine = policy.engine
    api, bucket = engine.api, engine.bucket_of(batch)
    captured = engine.graphs.get(bucket) if api is not None and bucket is not None else None
    if captured is None or engine.stream is None:
        return None
    flat = policy.prepare(random_inputs(policy.settings, seed, batch))[0]
    static_in, static_out, graph = captured
    staged = engine.staging[bucket]
    splits = []
    with api.device(engine.card), api.stream(engine.stream):
        for _ in range(runs):
            events = [api.Event(enable_timing=True) for _ in range(4)]
            for buffer, x in zip(staged, flat):
                buffer[:batch].copy_(torch.from_numpy(x if x.flags.writeable else x.copy()))
            events[0].record(engine.stream)
            for dst, src in zip(static_in, staged):
                dst[:batch].copy_(src[:batch], non_blocking=True)
            events[1].record(engine.stream)
            graph.replay()
            events[2].record(engine.stream)
            outs = [engine.pinned(o[:batch].shape, o.dtype) for o in static_out]
            for host, o in zip(outs, static_out):
                host.copy_(o[:batch], non_blocking=True)
            events[3].record(engine.stream)
            events[3].synchronize()
            splits.append([events[i].elapsed_time(events[i + 1]) for i in range(3)])
    med = np.median(np.asarray(splits), axis=0)
    return {
        "copy_in_ms": round(float(med[0]), 4),
        "replay_ms": round(float(med[1]), 4),
        "copy_out_ms": round(float(med[2]), 4),
    }


def kernels_per_replay(policy, batch: int):
    """CUDA kernels launched by one replay of the bucket's graph (torch.profiler); None off CUDA or unmeasured."""
    engine = policy.engine
    captured = engine.graphs.get(engine.bucket_of(batch))
    if captured is None or policy.device.type != "cuda":
        return None
    try:
        import torch
        from torch.profiler import ProfilerActivity, profile

        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            captured[2].replay()
            torch.cuda.synchronize(policy.device)
        return sum(
            1 for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA and "emcpy" not in e.name
        )
    except Exception:  # (a profiler this build does not have, or CUPTI missing)
        return None


def forwards_per_act(model_dir, device) -> dict:
    """The network body's forward calls in one act(), deterministic and sampled, eager (graphs off)."""
    import inference
    from mlagents_inference.core.observations import random_inputs

    policy = inference.load(str(model_dir), device=str(device), engine="torch", graphs=False)
    calls = []
    policy.engine.heads.actor.network_body.register_forward_hook(lambda *a: calls.append(1))
    obs = random_inputs(policy.settings, 0, 4)
    out = {}
    for kind, deterministic in (("deterministic", True), ("sampled", False)):
        calls.clear()
        policy.act(obs, deterministic=deterministic, seed=0)
        out[kind] = len(calls)
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", required=True)
    parser.add_argument("--model-dir", type=Path, default=SAMPLE)
    parser.add_argument("--batches", default="1,64,4096,65536")
    parser.add_argument("--runs", type=int, default=300, help="runs at batch 1 (fewer for big batches)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    import inference
    from mlagents_inference.core.errors import UsageError
    from mlagents_inference.engines.factory import engine_report

    try:
        batches = [int(b) for b in args.batches.split(",") if b.strip()]
        policy = inference.load(str(args.model_dir), device=args.device, engine="torch")
    except (UsageError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    device = policy.device
    result = {"device": str(device), "model": str(args.model_dir), "bandwidth_gb_s": bandwidth(device), "batches": {}}
    for batch in batches:
        runs = max(10, min(args.runs, args.runs * 64 // batch))
        row = latencies(policy, device, batch, runs, args.seed)
        row["split"] = event_split(policy, batch, max(5, runs // 4), args.seed)
        row["kernels_per_replay"] = kernels_per_replay(policy, batch)
        result["batches"][str(batch)] = row
    result["forwards_per_act"] = forwards_per_act(args.model_dir, device)
    result.update(engine_report(policy.engine))
    parts = []
    for batch, row in result["batches"].items():
        split = row["split"]
        parts.append(
            f"b{batch}: host p50 {row['host']['p50_ms']} p99 {row['host']['p99_ms']} ms, device p50 "
            f"{row['device']['p50_ms']} p99 {row['device']['p99_ms']} ms"
            + (f", in/replay/out {split['copy_in_ms']}/{split['replay_ms']}/{split['copy_out_ms']} ms" if split else "")
            + (f", {row['kernels_per_replay']} kernels" if row["kernels_per_replay"] is not None else "")
        )
    bw = result["bandwidth_gb_s"]
    result["summary"] = (
        f"bandwidth pageable {bw['pageable']} pinned {bw['pinned']} GB/s; "
        + "; ".join(parts)
        + f"; forwards per act() {result['forwards_per_act']}; graph calls {result['graph_calls']}"
    )
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
