#!/usr/bin/env python3
"""The two installs side by side (a measurement, not a test): the torch-free venv (`pip install .` alone) and a venv
with torch, each running the same first action in a fresh process, in turns, in one run; and each venv's size.

    python tools/bench_install.py --torch-free VENV --torch VENV [--runs 7] [--model-dir examples/vector]

A venv without the package installed runs the clone's inference.py. Prints one JSON object: per install the median
wall time from process start to exit, the program's own time_to_first_action_s, the venv's size in MB, and the
ratio torch-free / torch of the medians; the actions of both must be equal within 1e-5."""

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def command(venv: Path, args: list) -> list:
    script = venv / "bin" / "mlagents-infer"
    return (
        [str(script), *args] if script.exists() else [str(venv / "bin" / "python"), str(ROOT / "inference.py"), *args]
    )


def size_mb(venv: Path) -> int:
    return sum(p.stat().st_size for p in venv.rglob("*") if p.is_file() and not p.is_symlink()) >> 20


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--torch-free", type=Path, required=True)
    p.add_argument("--torch", type=Path, required=True)
    p.add_argument("--runs", type=int, default=7)
    p.add_argument("--model-dir", default=str(ROOT / "examples" / "vector"))
    a = p.parse_args()
    args = ["--mode", "info", "--model-dir", a.model_dir, "--seed", "0", "--json"]
    installs = {"torch-free": a.torch_free, "torch": a.torch}
    walls = {name: [] for name in installs}
    firsts = {name: [] for name in installs}
    actions = {}
    for _ in range(a.runs):
        for name, venv in installs.items():  # in turns: both see the same machine load
            t0 = time.perf_counter()
            r = subprocess.run(command(venv, args), capture_output=True, text=True, cwd=ROOT, timeout=300)
            walls[name].append(time.perf_counter() - t0)
            if r.returncode != 0:
                print(f"{name}: exit {r.returncode}: {r.stderr.strip()[-300:]}", file=sys.stderr)
                return 1
            out = json.loads(r.stdout)
            firsts[name].append(out["time_to_first_action_s"])
            actions[name] = (
                out.get("continuous_actions"),
                out.get("discrete_actions"),
                out["engine"],
                out.get("runs"),
                out["versions"]["torch"],
            )
    (c1, d1, *_), (c2, d2, *_) = actions["torch-free"], actions["torch"]
    same = d1 == d2 and (c1 is None or max(abs(x - y) for x, y in zip(c1, c2)) <= 1e-5)
    result = {
        name: {
            "wall_s_median": round(statistics.median(walls[name]), 3),
            "time_to_first_action_s_median": round(statistics.median(firsts[name]), 3),
            "venv_mb": size_mb(installs[name]),
            "engine": actions[name][2],
            "runs": actions[name][3],
            "torch": actions[name][4],
        }
        for name in installs
    }
    result["ratio_first_action"] = round(
        result["torch-free"]["time_to_first_action_s_median"] / result["torch"]["time_to_first_action_s_median"], 3
    )
    result["ratio_wall"] = round(result["torch-free"]["wall_s_median"] / result["torch"]["wall_s_median"], 3)
    result["actions_equal"] = same
    print(json.dumps(result, indent=1))
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
