"""Numbers as text and the figures results share: fmt/floats, cosine, percentiles, compare and parity against
a reference, the header of a mode's human lines, the versions of what runs."""

from __future__ import annotations

import contextlib
import os
import sys
import time
from pathlib import Path
from typing import Optional

import numpy as np

from .files import PROCESS_T0
from .spec import PolicySettings, continuous_only

__all__ = [
    "header",
    "compare",
    "percentiles",
    "latency_text",
    "parity",
    "PARITY_MIN_COS",
    "parity_holds",
    "fmt",
    "floats",
    "process_start_time",
    "versions",
    "action_fields",
    "actions_ok",
    "action_lines",
    "kind_fields",
]


def header(r: dict, title: str) -> str:
    return f"===== {title} (device={r['device']}, dtype={r['dtype']}, engine={r['engine']}) ====="


def compare(test: np.ndarray, ref: np.ndarray) -> dict:
    diff = np.abs(test.astype(np.float64) - ref.astype(np.float64))
    rel = diff / np.maximum(np.abs(ref.astype(np.float64)), 1e-6)
    return {
        "cos": _cosine(test, ref),
        "max_abs_err": float(diff.max()),
        "mean_abs_err": float(diff.mean()),
        "max_rel_err": float(rel.max()),
        "bitwise_equal_ratio": float(np.mean(test.astype(np.float32) == ref.astype(np.float32))),
    }


def percentiles(times_ms: list) -> dict:
    t = np.asarray(times_ms)
    return {
        "avg_ms": float(t.mean()),
        "p50_ms": float(np.percentile(t, 50)),
        "p95_ms": float(np.percentile(t, 95)),
        "p99_ms": float(np.percentile(t, 99)),
        "max_ms": float(t.max()),
    }


def latency_text(p: dict) -> dict:
    """percentiles' p50 and p99 as the --stream-stats line shows them ("0.1234ms")."""
    return {key: f"{p[key]:.4f}ms" for key in ("p50_ms", "p99_ms")}


def parity(s: PolicySettings, ours: dict, theirs: dict) -> dict:
    """How far our actions are from the reference's: continuous max abs error and cos, discrete
    mismatching rows, memory error relative to max(1, |value|)."""
    out = {}
    if "continuous_actions" in ours:
        st = compare(ours["continuous_actions"], theirs["continuous_actions"])
        out.update(max_abs_err=st["max_abs_err"], mean_abs_err=st["mean_abs_err"], cos=st["cos"])
    if "discrete_actions" in ours:
        out["discrete_mismatches"] = int(
            (np.asarray(ours["discrete_actions"]) != np.asarray(theirs["discrete_actions"])).any(axis=1).sum()
        )
    if "memory" in ours:
        a, b = np.asarray(ours["memory"], np.float64), np.asarray(theirs["memory"], np.float64)
        out["memory_max_rel_err"] = float((np.abs(a - b) / np.maximum(1.0, np.abs(b))).max())
    return out


PARITY_MIN_COS = 0.999999  # onnx-compare: the rebuilt policy's continuous actions against ML-Agents' ONNX


def parity_holds(p: dict, tol: float) -> bool:
    return (
        p.get("max_abs_err", 0.0) < tol
        and p.get("cos", 1.0) >= PARITY_MIN_COS
        and p.get("discrete_mismatches", 0) == 0
        and p.get("memory_max_rel_err", 0.0) < tol
    )


def fmt(values, digits: Optional[int] = None) -> str:
    """A list at full float32 precision (shortest text that reads back the same float32)."""
    values = np.asarray(values, np.float32).reshape(-1)
    if digits is not None:
        return "[" + ", ".join(f"{v:.{digits}f}" for v in values) + "]"
    return (
        "["
        + ", ".join(
            np.format_float_positional(v, unique=True, trim="0")
            if abs(v) >= 1e-4 or v == 0
            else np.format_float_scientific(v, unique=True, trim="0")
            for v in values
        )
        + "]"
    )


def floats(values) -> list:
    """JSON-ready floats: each float32 value exactly (float64 text of the float32)."""
    return np.asarray(values, np.float32).astype(np.float64).tolist()


def _cosine(a: np.ndarray, b: np.ndarray) -> float:
    a, b = np.asarray(a, np.float64).ravel(), np.asarray(b, np.float64).ravel()
    denom = np.linalg.norm(a) * np.linalg.norm(b)
    return float(a @ b / denom) if denom else float(np.array_equal(a, b))


def process_start_time() -> float:
    """Seconds since the epoch when this process started (Linux /proc), else import time."""
    try:
        ticks = int(Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()[19])  # since boot, in clock ticks
        return time.time() - (time.clock_gettime(time.CLOCK_BOOTTIME) - ticks / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError, AttributeError):  # (/proc/stat's btime is whole seconds: not used)
        return time.time() - (time.perf_counter() - PROCESS_T0)


def versions() -> dict:
    import importlib.metadata as md

    out = {"python": sys.version.split()[0]}
    for name in ("torch", "torch_npu", "numpy", "onnxruntime", "onnx"):
        out[name] = None
        if name in sys.modules and sys.modules[name] is None:  # (made unimportable: as good as absent)
            continue
        with contextlib.suppress(md.PackageNotFoundError):
            out[name] = md.version(name)
    return out


def action_fields(settings: PolicySettings, out: dict) -> dict:
    """An action result for JSON: ML-Agents' output names; a continuous-only policy keeps 'actions'."""
    fields = {}
    if "continuous_actions" in out:
        fields["continuous_actions"] = floats(out["continuous_actions"])
        if continuous_only(settings):
            fields["actions"] = fields["continuous_actions"]
    if "discrete_actions" in out:
        fields["discrete_actions"] = np.asarray(out["discrete_actions"]).tolist()
    if "memory" in out:
        fields["memory"] = floats(out["memory"])
    return fields


def actions_ok(settings: PolicySettings, out: dict, deterministic: bool = True) -> bool:
    """Finite, continuous in [-1, 1] (except SAC's deterministic raw mu), discrete within each branch."""
    ok = True
    if "continuous_actions" in out:
        c = np.asarray(out["continuous_actions"])
        ok &= bool(np.isfinite(c).all()) and (settings.tanh_squash and deterministic or bool(np.all(np.abs(c) <= 1.0)))
    if "discrete_actions" in out:
        d = np.asarray(out["discrete_actions"]).reshape(-1, len(settings.discrete_branches))
        ok &= bool(((d >= 0) & (d < np.asarray(settings.discrete_branches))).all())
    if "memory" in out:
        ok &= bool(np.isfinite(out["memory"]).all())
    return ok


def action_lines(r: dict, prefix: str = "", label: str = "action") -> list:
    """The human lines of one action (the continuous lines keep the original NPU adaptation's labels)."""
    lines = []
    if prefix + "continuous_actions" in r:
        c = np.asarray(r[prefix + "continuous_actions"], np.float32)
        lines.append(f"  {label + '[:8]':<14} = {fmt(c[:8])}")
        lines.append(
            f"  {label + ' range':<14} = [{c.min():.4f}, {c.max():.4f}]"
            + (" (SAC: raw mu, as ML-Agents' ONNX)" if r.get("sac") else " (must lie in [-1, 1])")
        )
    if prefix + "discrete_actions" in r:
        lines.append(f"  discrete_actions = {r[prefix + 'discrete_actions']} (branches {r['discrete_branches']})")
    if prefix + "memory" in r:
        lines.append(f"  next memory[:8] = {fmt(np.asarray(r[prefix + 'memory'])[:8])}")
    return lines


def kind_fields(s: PolicySettings) -> dict:
    """What the renderers need to know about the policy's actions."""
    return {"discrete_branches": list(s.discrete_branches), "sac": s.tanh_squash}
