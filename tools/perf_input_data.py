#!/usr/bin/env python3
"""perf_analyzer's --input-data for a policy served by `--mode serve --http/--grpc` (docs/serve.md): its random data
would hold masks that are not 0 or 1 (refused, as they should be) and, for a masked policy, whole branches masked.

    python tools/perf_input_data.py --model-dir examples/discrete-multi --output masks.json
    perf_analyzer -m DiscreteMulti -u 127.0.0.1:9000 --input-data masks.json

Each step holds every observation input the V2 model takes (floats: N(0, 1) for vectors and entity rows, [0, 1) for
cameras, flattened as perf_analyzer reads them) and, for a policy with discrete branches, `action_masks` of 0s and 1s
with at least one 1 in every branch. An LSTM policy gets --streams streams of --steps steps (perf_analyzer sends each
as a sequence: sequence_id, start, end; the server keeps its memory); any other policy --streams x --steps steps.
`recurrent_in` is never written: a sequence's memory is the server's. Seeded (--seed): the same file every time.
The file is written whole or not at all (an existing one is replaced only once the new one is complete).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import inference  # noqa: E402  (the clone's, beside this folder)
from mlagents_inference.core.files import atomic_write, check_output_path  # noqa: E402


def one_step(policy, rng: np.random.RandomState) -> dict:
    """One request's inputs, as perf_analyzer's JSON data takes them (each tensor's values flattened)."""
    step = {}
    for spec in policy.info["inputs"]:
        size = int(np.prod(spec["shape"]))
        values = rng.rand(size) if spec["kind"] == "visual" else rng.randn(size)
        step[spec["name"]] = [float(x) for x in values.astype(np.float32)]
    branches = policy.info["discrete_branches"]
    if branches:
        masks = []
        for size in branches:
            allowed = rng.randint(0, 2, size)
            allowed[rng.randint(size)] = 1  # (a branch with every action masked has no action to take)
            masks += [float(x) for x in allowed]
        step["action_masks"] = masks
    return step


def input_data(policy, streams: int, steps: int, seed: int) -> dict:
    rng = np.random.RandomState(seed)
    made = [[one_step(policy, rng) for _ in range(steps)] for _ in range(streams)]
    return {"data": made if policy.info["memory_size"] else [step for stream in made for step in stream]}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model-dir", required=True, help="the run folder (or .pt, or ML-Agents .onnx) that serve loads")
    p.add_argument("--output", required=True, help="the JSON file to write (perf_analyzer's --input-data)")
    p.add_argument("--streams", type=int, default=3, help="sequences for an LSTM policy (default 3)")
    p.add_argument("--steps", type=int, default=20, help="steps in each (default 20)")
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args(argv)
    try:
        if a.streams < 1 or a.steps < 1 or a.streams * a.steps > 100_000:
            raise inference.UsageError("--streams and --steps: at least 1 each, at most 100,000 steps in all")
        output = check_output_path(a.output, (".json",))
        data = input_data(inference.load(a.model_dir), a.streams, a.steps, a.seed)
        atomic_write(output, lambda path: path.write_text(json.dumps(data)))
    except inference.UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"wrote {output}: {a.streams * a.steps} steps")
    return 0


if __name__ == "__main__":
    sys.exit(main())
