"""The run context shared by the modes (the source, checkpoint, device, engine and policy of one
command, each made once) and the small helpers their results share."""
from __future__ import annotations

import argparse
import contextlib
import math
import os
import sys
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Optional

import numpy as np

from .errors import UsageError
from .obs_files import parse_obs
from .observations import _parse_numbers
from .outputs import _cosine, floats, fmt
from .sources import ModelSource, locate_model, onnx_alone_source, regular_file
from .spec import ATTENTION_EMBEDDING, PolicySettings

if TYPE_CHECKING:  # (the torch layer is imported when a mode needs it: `checkpoints` runs without torch)
    from .checkpoint import LoadedCheckpoint
    from .policy import Policy


@dataclass
class Context:
    args: argparse.Namespace

    @cached_property
    def source(self) -> ModelSource:
        a = self.args
        if a.onnx and not (a.checkpoint or a.model_dir or a.model or os.environ.get("HUGGY_MODEL_DIR")):
            return onnx_alone_source("--onnx", Path(a.onnx))
        return locate_model(a.checkpoint, a.model_dir, a.model)

    @cached_property
    def checkpoint(self) -> LoadedCheckpoint:
        src = self.source
        if src.note:
            machine_readable = self.args.json or self.args.mode in ("stream", "serve")  # stdout is JSON only (serve: unused)
            print(f"[note] {src.note}", file=sys.stderr if machine_readable else sys.stdout)
        onnx = regular_file("--onnx", self.args.onnx) if self.args.onnx else None
        from .policy import load_checkpoint
        return load_checkpoint(src.checkpoint, onnx, src.model_dir, src.behavior, self.args.expect_sha256,
                               self.args.goal_input)

    @property
    def settings(self) -> PolicySettings:
        return self.checkpoint.settings

    @cached_property
    def onnxruntime_devices(self) -> bool:
        """Whether --device means onnxruntime's providers (runtime.onnxruntime_devices)."""
        from .runtime import onnxruntime_devices
        return onnxruntime_devices(self.args.engine, self.args.providers)

    @cached_property
    def device(self):
        if self.onnxruntime_devices:
            from .runtime import ort_device
            return ort_device(self.args.device)
        from .engines import resolve_device
        return resolve_device(self.args.device)

    @cached_property
    def engine_name(self) -> str:
        if self.onnxruntime_devices:
            return "onnxruntime"  # (Policy refuses what onnxruntime's engines do not run, naming what to install)
        from .engines import choose_engine
        return choose_engine(self.args.engine, self.device, self.args.dtype)

    @cached_property
    def policy(self) -> Policy:
        from .policy import Policy
        engine = self.args.engine if self.onnxruntime_devices else self.engine_name
        return Policy(self.checkpoint, self.device, self.args.dtype, engine, self.args.graphs == "on",
                      providers=self.args.providers, spin=self.args.spin == "on")

    def base(self) -> dict:
        return {"checkpoint": str(self.checkpoint.path), "source": self.source.origin, "device": str(self.device),
                "dtype": self.args.dtype, "engine": self.engine_name}

    def obs(self) -> list:
        return parse_obs(self.args.obs, self.policy, self.args.seed)

    def masks(self) -> Optional[np.ndarray]:
        if self.args.mask is None:
            return None
        if not self.settings.discrete_branches:
            raise UsageError("--mask: this policy has no discrete actions")
        return _parse_numbers(self.args.mask, "--mask", sum(self.settings.discrete_branches))

    def memory(self) -> Optional[np.ndarray]:
        if self.args.memory is None:
            return None
        if not self.settings.memory_size:
            raise UsageError("--memory: this policy has no memory (LSTM)")
        return _parse_numbers(self.args.memory, "--memory", self.settings.memory_size)


def _continuous_only(settings: PolicySettings) -> bool:
    return bool(settings.continuous_size) and not settings.discrete_branches and not settings.memory_size


def _action_fields(settings: PolicySettings, out: dict) -> dict:
    """An action result for JSON: ML-Agents' output names; a continuous-only policy keeps 'actions'."""
    fields = {}
    if "continuous_actions" in out:
        fields["continuous_actions"] = floats(out["continuous_actions"])
        if _continuous_only(settings):
            fields["actions"] = fields["continuous_actions"]
    if "discrete_actions" in out:
        fields["discrete_actions"] = np.asarray(out["discrete_actions"]).tolist()
    if "memory" in out:
        fields["memory"] = floats(out["memory"])
    return fields


def _actions_ok(settings: PolicySettings, out: dict, deterministic: bool = True) -> bool:
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


def header(r: dict, title: str) -> str:
    return f"===== {title} (device={r['device']}, dtype={r['dtype']}, engine={r['engine']}) ====="


def _action_lines(r: dict, prefix: str = "", label: str = "action") -> list:
    """The human lines of one action (the continuous lines keep the original NPU adaptation's labels)."""
    lines = []
    if prefix + "continuous_actions" in r:
        c = np.asarray(r[prefix + "continuous_actions"], np.float32)
        lines.append(f"  {label + '[:8]':<14} = {fmt(c[:8])}")
        lines.append(f"  {label + ' range':<14} = [{c.min():.4f}, {c.max():.4f}]"
                     + (" (SAC: raw mu, as ML-Agents' ONNX)" if r.get("sac") else " (must lie in [-1, 1])"))
    if prefix + "discrete_actions" in r:
        lines.append(f"  discrete_actions = {r[prefix + 'discrete_actions']} (branches {r['discrete_branches']})")
    if prefix + "memory" in r:
        lines.append(f"  next memory[:8] = {fmt(np.asarray(r[prefix + 'memory'])[:8])}")
    return lines


def _kind_fields(s: PolicySettings) -> dict:
    """What the renderers need to know about the policy's actions."""
    return {"discrete_branches": list(s.discrete_branches), "sac": s.tanh_squash}


def obs_label(ctx: Context) -> str:
    return ctx.args.obs if len(ctx.args.obs) < 24 else "custom"


def check_rows_fit(rows: int, settings: PolicySettings, what: str = "--batch") -> None:
    """Refuse, before allocating, a batch that would not fit in memory."""
    per_row = sum(math.prod(i.shape) for i in settings.inputs) * 12 + settings.hidden_units * 16 + \
        (settings.continuous_size + sum(settings.discrete_branches) + settings.memory_size) * 24
    per_row += sum(settings.hidden_units * 64 * 4 for i in settings.inputs if i.kind == "visual")
    per_row += sum(i.shape[0] * ATTENTION_EMBEDDING * 4 * 8 + i.shape[0] ** 2 * 4 * 4 * 3  # (4 heads' N x N scores)
                   for i in settings.inputs if i.kind == "entities")
    need = rows * per_row
    if need < 64 << 20:  # (small: not worth reading /proc, which a stream would do on every line)
        return
    have = available_memory()
    if need > 0.8 * have:
        option = what.startswith("--")
        raise UsageError(f"{what + ' ' + str(rows) if option else str(rows) + ' rows'}: would need about "
                         f"{need / 2**30:.1f} GiB, {have / 2**30:.1f} GiB available; "
                         + (f"use a smaller {what}" + (" or --obs-file with --chunk" if what == "--batch" else "")
                            if option else f"send fewer rows {what}"))


def available_memory() -> int:
    """The host's available memory, or what this process's cgroup (v2) limit leaves, if less."""
    have = None
    with contextlib.suppress(OSError, ValueError, IndexError):
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                have = int(line.split()[1]) * 1024
    if have is None:
        have = int(os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
    with contextlib.suppress(OSError, ValueError, IndexError):
        group = Path("/proc/self/cgroup").read_text().splitlines()[0].split("::", 1)[1]
        folder = Path("/sys/fs/cgroup") / group.lstrip("/")
        limit = (folder / "memory.max").read_text().strip()
        if limit != "max":
            have = min(have, max(0, int(limit) - int((folder / "memory.current").read_text())))
    return have


def compare(test: np.ndarray, ref: np.ndarray) -> dict:
    diff = np.abs(test.astype(np.float64) - ref.astype(np.float64))
    rel = diff / np.maximum(np.abs(ref.astype(np.float64)), 1e-6)
    return {"cos": _cosine(test, ref), "max_abs_err": float(diff.max()), "mean_abs_err": float(diff.mean()),
            "max_rel_err": float(rel.max()),
            "bitwise_equal_ratio": float(np.mean(test.astype(np.float32) == ref.astype(np.float32)))}


def _percentiles(times_ms: list) -> dict:
    t = np.asarray(times_ms)
    return {"avg_ms": float(t.mean()), "p50_ms": float(np.percentile(t, 50)), "p95_ms": float(np.percentile(t, 95)),
            "p99_ms": float(np.percentile(t, 99)), "max_ms": float(t.max())}
