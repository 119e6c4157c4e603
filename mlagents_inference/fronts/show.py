"""Modes that show the policy: info, checkpoints, action, sample, fingerprint, stats. Each takes
the run context and returns (result dict, check held?); show_* renders the human lines."""

from __future__ import annotations

import hashlib
import re
import time
from typing import TYPE_CHECKING

import numpy as np

from ..core.errors import UsageError
from ..core.files import short_path
from ..core.observations import check_rows_fit, random_inputs, random_masks
from ..core.onnx_graph import ONNX_ONLY_SOURCE
from ..core.report import (
    action_fields,
    action_lines,
    actions_ok,
    floats,
    fmt,
    header,
    kind_fields,
    process_start_time,
    versions,
)
from ..core.sources import check_sha256, default_checkpoint, list_checkpoints, status_entry, training_status
from ..core.spec import ATTENTION_EMBEDDING, InputSpec, PolicySettings

if TYPE_CHECKING:  # (annotations only)
    from ..services.context import Context

__all__ = [
    "mode_info",
    "fixed_sigma",
    "show_info",
    "architecture",
    "mode_checkpoints",
    "show_checkpoints",
    "mode_action",
    "show_action",
    "mode_sample",
    "show_sample",
    "rollout_sequence",
    "mode_fingerprint",
    "show_fingerprint",
    "mode_stats",
    "show_stats",
]


def mode_info(ctx: Context):
    """Environment, model and one deterministic action (the original adaptation's case 1)."""
    import shutil
    import subprocess

    from ..core.extras import torch_available

    if torch_available():
        from ..engines.torch_devices import cuda_count, npu_count  # (the torch layer, imported when a mode runs)

        npus, cudas = npu_count(), cuda_count()
    else:  # (torch-free: the devices onnxruntime's providers reach; a count needs the device's own library)
        import onnxruntime

        npus, cudas = [
            int("CANNExecutionProvider" in onnxruntime.get_available_providers()),
            int("CUDAExecutionProvider" in onnxruntime.get_available_providers()),
        ]
    v, health = versions(), None
    if shutil.which("npu-smi"):
        try:
            text = subprocess.run(["npu-smi", "info"], capture_output=True, text=True, timeout=10).stdout
            health = next(
                (l.strip() for l in text.splitlines() if re.search(r"\|\s*(OK|Warning|Alarm|Critical)\s*\|", l)),
                "no health line found",
            )
        except (OSError, subprocess.SubprocessError):
            health = "no health line found"
    ckpt, src, s = ctx.checkpoint, ctx.source, ctx.settings
    steps = None
    if ckpt.actor is not None:
        steps = next(
            (
                int(p.normalizer.normalization_steps)
                for p in ckpt.actor.network_body.processors
                if getattr(p, "normalizer", None) is not None
            ),
            None,
        )
    log_sigma = None
    if s.continuous_size and not s.conditional_sigma and ckpt.actor is not None:
        log_sigma = ckpt.actor.action_model._continuous_distribution.log_sigma.detach().reshape(-1).numpy()
    elif s.continuous_size and not s.conditional_sigma and "sigma" in ctx.policy.engine.sampled:  # the file's own
        log_sigma = np.log(fixed_sigma(ctx).astype(np.float64))
    obs = random_inputs(s, ctx.args.seed)
    out = ctx.policy.act(obs)
    first_action_s = time.time() - process_start_time()
    from ..core.sessions import onnxruntime_builds
    from ..engines.factory import engine_report

    builds = ", ".join(f"{name} {version}" for name, version in onnxruntime_builds()) or None
    return {
        **ctx.policy.info,
        **engine_report(ctx.policy.engine),
        "onnxruntime_build": builds,
        "obs_dim": sum(int(np.prod(i.shape)) for i in s.inputs),
        "action_dim": s.continuous_size,
        "normalize": s.normalize,
        "normalization_steps": steps,
        "log_sigma": floats(log_sigma) if log_sigma is not None else None,
        **ctx.base(),
        "versions": v,
        "load_s": ckpt.load_s,
        "note": src.note,
        "devices": {"npu": npus, "cuda": cudas},
        "npu_smi": health,
        "architecture": architecture(s),
        "inputs_described": [i.describe() for i in s.inputs],
        "seed": ctx.args.seed,
        "obs": floats(obs[0].reshape(-1)[:6]),
        **({"deterministic_actions": floats(out["continuous_actions"])} if "continuous_actions" in out else {}),
        **action_fields(s, out),
        "time_to_first_action_s": first_action_s,
    }, actions_ok(s, out)


def fixed_sigma(ctx: Context) -> np.ndarray:
    """A sigma the same for every observation (not SAC's): the checkpoint's, or the file's, read out of its graph."""
    if ctx.policy.sigma is not None:
        return ctx.policy.sigma
    return ctx.policy.engine.run(ctx.policy.prepare(random_inputs(ctx.settings, 0), None, None)[0], ["log_sigma"])[
        "sigma"
    ][0]


def show_info(r: dict) -> list:
    v = r["versions"]
    lines = [
        f"[env] torch {v['torch']} | torch_npu {v['torch_npu'] or 'not installed'} | numpy {v['numpy']} | python "
        f"{v['python']}",
        f"[env] onnxruntime {r.get('onnxruntime_build') or v['onnxruntime'] or 'not installed'} | "
        f"onnx {v['onnx'] or 'not installed'}",
        f"[env] device {r['device']} | NPU available: {bool(r['devices']['npu'])} ({r['devices']['npu']}) | "
        f"CUDA available: {bool(r['devices']['cuda'])} ({r['devices']['cuda']})",
    ]
    if r["npu_smi"] is not None:
        lines.append(f"[npu-smi] {r['npu_smi']}")
    lines += [
        f"[load] source = {r['source']}",
        f"[load] checkpoint = {r['checkpoint']}",
        f"[load] sha256 = {r['sha256']}",
        f"[load] parameters = {r['parameters']:,} | load time {r['load_s']:.3f}s",
        f"[load] dtype = {r['dtype']} | architecture = {r['architecture']}",
        f"[load] trainer = {r['trainer'] or 'unknown'}"
        f"{' (shared critic: value heads in the policy, unused)' if r['shared_critic'] else ''}"
        f" | {'' if r['settings_source'] == ONNX_ONLY_SOURCE else 'settings from '}{r['settings_source']}",
    ]
    lines += [f"[load] input {text}" for text in r["inputs_described"]]
    lines.append(
        f"[load] obs normalizer steps = "
        f"{r['normalization_steps'] or ('folded into the ONNX file' if r['normalize'] else 'none (normalize: false)')}"
    )
    if r["log_sigma"] is not None:
        lines.append(f"[load] log_sigma[:6] = {fmt(r['log_sigma'][:6], 4)}")
    lines.append(f"[policy] obs(random,seed={r['seed']})[:6] = {fmt(r['obs'], 4)}")
    if "continuous_actions" in r:
        lines.append(f"[policy] deterministic_actions[:6] = {fmt(r['continuous_actions'][:6])}")
    if "discrete_actions" in r:
        lines.append(f"[policy] deterministic_discrete_actions = {r['discrete_actions']}")
    lines.append(
        f"[policy] engine = {r['engine']} ({r['runs']}{' on ' + ', '.join(r['providers']) if r['providers'] else ''}) "
        f"| "
        f"process start to first action = {r['time_to_first_action_s']:.2f}s"
    )
    lines += [
        f"[policy] {label} = {r[key]}"
        for key, label in (("precision", "precision"), ("graphs", "device graphs"), ("compiled", "compiled"))
        if r.get(key)
    ]
    if r.get("graph_calls"):
        lines.append(f"[policy] device graph calls = {', '.join(f'{k} {v}' for k, v in r['graph_calls'].items())}")
    return lines


def architecture(s: PolicySettings) -> str:
    """One line, e.g. obs(59)->normalizer->Linear(512)->SiLU x3->Linear(21)->clip(±3)/3."""
    parts = []
    for spec in s.inputs:
        if spec.kind == "vector":
            parts.append(f"obs({spec.shape[0]}){'->normalizer' if spec.normalized else ''}")
        elif spec.kind == "visual":
            parts.append(f"image({'x'.join(map(str, spec.shape))})->{spec.encoder}")
        else:
            parts.append(f"entities({spec.shape[0]}x{spec.shape[1]})")
    head = " + ".join(parts) if len(parts) > 1 else parts[0]
    if any(i.kind == "entities" for i in s.inputs):
        head += f"->attention({ATTENTION_EMBEDDING})"
    body = (
        f"hypernetwork({s.hidden_units}) x{s.num_layers}"
        if s.hyper
        else f"Linear({s.hidden_units})->SiLU x{s.num_layers}"
    )
    tail = []
    if s.memory_size:
        body += f"->LSTM({s.memory_size // 2})"
    if s.continuous_size:
        tail.append(f"Linear({s.continuous_size})->" + ("tanh-Gaussian (SAC)" if s.tanh_squash else "clip(±3)/3"))
    if s.discrete_branches:
        tail.append(f"branches{s.discrete_branches}->masked argmax")
    return f"{head}->{body}->{' + '.join(tail)}"


def mode_checkpoints(ctx: Context):
    """Every <Behavior>-<step>.pt sorted by step, with reward from run_logs/training_status.json."""
    src = ctx.source
    if src.checkpoint.suffix.lower() == ".onnx":
        raise UsageError(f"{short_path(src.checkpoint)}: a policy given as its ONNX alone has no checkpoints to list")
    check_sha256(src.checkpoint, ctx.args.expect_sha256)
    if src.model_dir is None:
        raise UsageError(f"{src.checkpoint}: not inside an ML-Agents run folder; use --model-dir")
    default = default_checkpoint(src.model_dir, src.behavior)
    status = training_status(src.model_dir, src.behavior)
    rows = []
    for path, step in list_checkpoints(src.model_dir, src.behavior):
        if step is None:  # checkpoint.pt: its step is saved inside (read weights-only)
            try:
                from ..loaders.checkpoint import global_step, read_checkpoint  # (torch: listing .pt files needs none)

                step = global_step(read_checkpoint(path))
            except (UsageError, ImportError):
                step = None
        rows.append({"file": path.name, "steps": step, "reward": status_entry(status, path, step).get("reward")})
    top = src.model_dir / f"{src.behavior}.onnx"
    return {
        "model_dir": str(src.model_dir),
        "behavior": src.behavior,
        "checkpoints": rows,
        "default": default.name,
        "source": src.origin,
        "note": src.note,
        "top_onnx": top.name if top.is_file() else None,
    }, bool(rows)


def show_checkpoints(r: dict) -> list:
    lines = [f"[files] {r['model_dir']} (behaviour {r['behavior']}, {r['source']})"]
    if r["note"]:
        lines.append(f"[note] {r['note']}")
    lines.append(f"[files] {len(r['checkpoints'])} PyTorch checkpoint(s):")
    for row in r["checkpoints"]:
        mark = "    <- default (highest step)" if row["file"] == r["default"] else ""
        reward = f"reward {row['reward']}" if row["reward"] is not None else "reward n/a"
        lines.append(
            f"  - {row['file']:<24} steps {row['steps'] if row['steps'] is not None else 'n/a':>9} | {reward}{mark}"
        )
    lines += [f"[files] top-level ONNX: {r['top_onnx'] or 'none'}", f"[load] default checkpoint: {r['default']}"]
    return lines


def mode_action(ctx: Context):
    """Deterministic action for one observation (ML-Agents' deterministic_* outputs)."""
    obs, masks, memory, s = ctx.obs(), ctx.masks(), ctx.memory(), ctx.settings
    out = ctx.policy.act(obs, masks, memory=memory)
    obs_json = (
        floats(obs[0].reshape(-1))
        if len(obs) == 1 and obs[0].ndim == 1
        else {spec.name: np.asarray(v, np.float32).astype(np.float64).tolist() for spec, v in zip(s.inputs, obs)}
    )
    return {
        "obs": obs_json,
        "obs_label": ctx.obs_label(),
        "seed": ctx.args.seed,
        **action_fields(s, out),
        **kind_fields(s),
        **ctx.base(),
    }, actions_ok(s, out)


def show_action(r: dict) -> list:
    lines = [header(r, f"deterministic action (obs={r['obs_label']}, seed={r['seed']})")]
    for name, value in r["obs"].items() if isinstance(r["obs"], dict) else [("obs", r["obs"])]:
        lines.append(f"  {name + '[:8]':<14} = {fmt(np.asarray(value).reshape(-1)[:8])}")
    lines += action_lines(r)
    if "continuous_actions" in r:
        lines.append(f"  action L2 norm = {np.linalg.norm(np.asarray(r['continuous_actions'], np.float64)):.4f}")
    return lines


def mode_sample(ctx: Context):
    """Sampled action with seeded CPU noise, drawn twice with the same seed."""
    obs, masks, memory, s = ctx.obs(), ctx.masks(), ctx.memory(), ctx.settings
    det = ctx.policy.act(obs, masks, memory=memory)
    first, second = (
        ctx.policy.act(obs, masks, deterministic=False, seed=ctx.args.seed, memory=memory) for _ in range(2)
    )
    same = all(np.array_equal(first[k], second[k]) for k in first)
    obs_json = (
        floats(obs[0].reshape(-1))
        if len(obs) == 1 and obs[0].ndim == 1
        else {spec.name: np.asarray(v, np.float32).astype(np.float64).tolist() for spec, v in zip(s.inputs, obs)}
    )
    result = {
        "obs": obs_json,
        "obs_head": floats(obs[0].reshape(-1)[:8]),
        "obs_label": ctx.obs_label(),
        "seed": ctx.args.seed,
        "identical": same,
        **kind_fields(s),
    }
    if s.continuous_size:
        result.update(
            deterministic=floats(det["continuous_actions"]),
            sampled=floats(first["continuous_actions"]),
            sampled_again=floats(second["continuous_actions"]),
        )
    if s.discrete_branches:
        result.update(
            deterministic_discrete=det["discrete_actions"].tolist(),
            sampled_discrete_again=second["discrete_actions"].tolist(),
        )
    if s.continuous_size and not s.conditional_sigma:  # (the checkpoint's sigma, or the file's)
        result["sigma"] = floats(fixed_sigma(ctx))
    result.update(
        {("sampled_" + k if k != "memory" else k): v for k, v in action_fields(s, first).items() if k != "actions"}
    )
    return {**result, **ctx.base()}, same and actions_ok(s, first, False) and actions_ok(s, det)


def show_sample(r: dict) -> list:
    lines = [
        header(r, f"sampled action (obs={r['obs_label']}, seed={r['seed']})"),
        f"  obs[:8]        = {fmt(r['obs_head'])}",
    ]
    if "sampled" in r:
        lines += [
            f"  deterministic  = {fmt(r['deterministic'][:8])}",
            f"  sampled#1      = {fmt(r['sampled'][:8])}",
            f"  sampled#2      = {fmt(r['sampled_again'][:8])}",
        ]
    if "sampled_discrete_actions" in r:
        lines += [
            f"  deterministic discrete = {r['deterministic_discrete']}",
            f"  sampled#1 discrete     = {r['sampled_discrete_actions']}",
            f"  sampled#2 discrete     = {r['sampled_discrete_again']}",
        ]
    lines.append(f"  same seed, same draw = {'yes' if r['identical'] else 'NO'}")
    if "sigma" in r:
        lines.append(f"  sigma[:6]      = {fmt(r['sigma'][:6])}")
    return lines


def rollout_sequence(ctx: Context, seed: int, steps: int, deterministic: bool) -> dict:
    """One observation per step (random_inputs(seed, steps), random masks), one noise draw per
    step from one noise_generator(seed), the memory carried from zeros; step 0 equals
    `sample --seed S` for a continuous-only policy."""
    from ..api.policy import noise_generator

    s, policy = ctx.settings, ctx.policy
    obs, masks = random_inputs(s, seed, steps), random_masks(s, seed, steps)
    generator = None if deterministic else noise_generator(seed)
    memory, seq = None, {}
    for t in range(steps):
        out = policy.act(
            [o[t : t + 1] for o in obs],
            None if masks is None else masks[t : t + 1],
            deterministic,
            memory=memory,
            generator=generator,
        )
        memory = out.get("memory")
        for key, value in out.items():
            seq.setdefault(key, []).append(value[0])
    return {k: np.stack(v) for k, v in seq.items()}


def _sequence_digest(seq: dict) -> str:
    digest = hashlib.sha256()
    for key in ("continuous_actions", "discrete_actions", "memory"):
        if key in seq:
            digest.update(
                np.ascontiguousarray(seq[key], np.float32 if key != "discrete_actions" else np.int64).tobytes()
            )
    return digest.hexdigest()


def mode_fingerprint(ctx: Context):
    """sha256 of a seeded action sequence (memory carried), computed twice in this process."""
    a, s = ctx.args, ctx.settings
    check_rows_fit(a.steps, s, "--steps")
    runs = [rollout_sequence(ctx, a.seed, a.steps, a.deterministic) for _ in range(2)]
    digests = [_sequence_digest(r) for r in runs]
    identical = digests[0] == digests[1] and all(np.array_equal(runs[0][k], runs[1][k]) for k in runs[0])
    key = "continuous_actions" if "continuous_actions" in runs[0] else "discrete_actions"
    first = {k: v[0] for k, v in runs[0].items()}
    return (
        {
            "sha256": digests[0],
            "identical": identical,
            "first_action": floats(first[key]),
            "first_action_run2": floats(runs[1][key][0]),
            **{"first_" + k: v for k, v in action_fields(s, first).items() if k != "actions"},
            "steps": a.steps,
            "seed": a.seed,
            "deterministic": a.deterministic,
            **ctx.base(),
        },
        identical and actions_ok(s, runs[0], a.deterministic),
    )


def show_fingerprint(r: dict) -> list:
    return [
        header(
            r, f"action-sequence fingerprint (seed={r['seed']}, steps={r['steps']}, deterministic={r['deterministic']})"
        ),
        f"  run1 first action[:6] = {fmt(r['first_action'][:6])}",
        f"  run2 first action[:6] = {fmt(r['first_action_run2'][:6])}",
        f"  runs identical        = {'yes' if r['identical'] else 'NO'}",
        f"  sha256(actions)       = {r['sha256']}",
    ]


def mode_stats(ctx: Context):
    """Closed-loop rollouts on a SYNTHETIC dynamics (not the policy's Unity environment): every input decays and is
    pushed by the action: x' = 0.9 x + 0.5 feedback + 0.1 noise, where feedback tiles the action vector (continuous
    actions, else discrete actions scaled to [-1, 1]) over the input's values; images are clipped to [0, 1] and entity
    rows stay present; noise from RandomState(seed + r); the memory is carried from zeros."""
    from ..api.policy import noise_generator

    a, s, policy = ctx.args, ctx.settings, ctx.policy
    rollouts = []
    for r in range(a.rollouts):
        rng = np.random.RandomState(a.seed + r)
        obs = random_inputs(s, a.seed + r)
        generator = None if a.deterministic else noise_generator(a.seed + r)
        memory, times, seq = None, [], []
        for t in range(a.steps):
            t0 = time.perf_counter()
            out = policy.act(obs, deterministic=a.deterministic, memory=memory, generator=generator)
            times.append(time.perf_counter() - t0)
            memory = out.get("memory")
            feedback = _action_feedback(s, out)
            seq.append(out)
            obs = [_synthetic_step(spec, x, feedback, rng) for spec, x in zip(s.inputs, obs)]
        ok = all(actions_ok(s, o, a.deterministic) for o in seq)
        row = {
            "rollout": r,
            "steps": a.steps,
            "mean_abs_action": float(np.mean([np.abs(_action_feedback(s, o)).mean() for o in seq])),
            "max_abs_action": float(np.max([np.abs(_action_feedback(s, o)).max() for o in seq])),
            "all_in_range": ok,
            "mean_step_ms": float(np.mean(times) * 1e3),
        }
        rollouts.append(row)
    all_in = all(r["all_in_range"] for r in rollouts)
    mean_ms = float(np.mean([r["mean_step_ms"] for r in rollouts]))
    return {
        "rollouts": rollouts,
        "all_in_range": all_in,
        "mean_step_ms": mean_ms,
        "steps": a.steps,
        "seed": a.seed,
        "dynamics": "synthetic: x' = 0.9*x + 0.5*tile(action) + 0.1*N(0,1) per input",
        **ctx.base(),
    }, all_in


def show_stats(r: dict) -> list:
    lines = [
        header(
            r,
            f"closed-loop rollouts on synthetic dynamics (rollouts={len(r['rollouts'])}, steps={r['steps']}, "
            f"first seed={r['seed']})",
        )
    ]
    lines += [
        f"  rollout[{row['rollout']:02d}] steps={row['steps']:4d} | mean|a|={row['mean_abs_action']:.4f} | "
        f"max|a|={row['max_abs_action']:.4f} | in[-1,1]={row['all_in_range']} | avg={row['mean_step_ms']:.4f}ms"
        for row in r["rollouts"]
    ]
    return lines + [
        f"  -> all actions in range: {'yes' if r['all_in_range'] else 'NO'} | mean step time {r['mean_step_ms']:.4f} "
        f"ms",
        "  (synthetic dynamics for a stability and range check, not the policy's Unity environment)",
    ]


def _action_feedback(s: PolicySettings, out: dict) -> np.ndarray:
    parts = []
    if "continuous_actions" in out:
        parts.append(np.clip(np.asarray(out["continuous_actions"], np.float64), -1, 1))
    if "discrete_actions" in out:
        sizes = np.maximum(np.asarray(s.discrete_branches) - 1, 1)
        parts.append(2.0 * np.asarray(out["discrete_actions"]) / sizes - 1.0)
    return np.concatenate(parts)


def _synthetic_step(spec: InputSpec, x: np.ndarray, feedback: np.ndarray, rng) -> np.ndarray:
    count = int(np.prod(spec.shape))
    push = np.tile(feedback, -(-count // feedback.size))[:count].reshape(spec.shape)
    new = 0.9 * x + 0.5 * push + 0.1 * rng.randn(*spec.shape)
    if spec.kind == "visual":
        new = np.clip(new, 0.0, 1.0)
    return new.astype(np.float32)
