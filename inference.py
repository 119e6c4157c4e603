#!/usr/bin/env python3
"""Run a trained Unity ML-Agents PPO policy outside Unity: CPU, CUDA or Ascend NPU.

The first policy is Huggy the Dog (PaulVialard/ppo-Huggy): a 59 -> 512 -> 512 -> 512 -> 21
SiLU MLP behind ML-Agents' observation normalizer. Any ML-Agents continuous-action PPO
checkpoint (any observation/action size, width, depth, with or without normalizer) works.

    python inference.py --mode info                      # offline, bundled sample
    python inference.py --mode action --obs random --seed 0
    python inference.py --mode onnx-compare --model-dir path/to/ppo-Huggy

Sections, top to bottom: checkpoint -> policy -> onnx graph -> devices and engines ->
observations -> output helpers -> modes -> command line. Each mode is one function
found through the MODES table near the end.

Exit codes: 0 success, 1 a check did not hold, 2 bad input or usage (one line on stderr).
"""
from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import math
import os
import re
import sys
import tempfile
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

import numpy as np

PROCESS_T0 = time.perf_counter()  # fallback origin for "time to first action"
HERE = Path(__file__).resolve().parent
BUNDLED_MODEL_DIR = HERE / "assets" / "ppo-Huggy-sample"
DEFAULT_REPO = "PaulVialard/ppo-Huggy"
DEFAULT_EXPORT = HERE / "assets" / "huggy_rebuilt.onnx"  # beside this file, as in the seed
BUNDLED_NOTE = ("bundled sample: an ML-Agents-format checkpoint with Huggy's architecture, "
                "written by the ML-Agents trainer code, NOT the trained Huggy weights")

# ML-Agents' state-dict names (sic: "_body_endoder" is ML-Agents' own spelling).
NORMALIZER_PREFIXES = ("network_body.observation_encoder.processors.0.normalizer.",
                       "network_body.processors.0.normalizer.")
BODY_PREFIX = "network_body._body_endoder.seq_layers."
MU_PREFIX = "action_model._continuous_distribution.mu."
LOG_SIGMA_KEY = "action_model._continuous_distribution.log_sigma"
NORMALIZER_CLIP = 5.0  # ML-Agents clamps normalized observations to [-5, 5]
ACTION_CLIP = 3.0      # ... and continuous actions to [-3, 3], then divides by 3


class UsageError(Exception):
    """Bad input or usage: one line on stderr, exit code 2."""


class CheckFailed(Exception):
    """A check did not hold: exit code 1."""


# =========================================================================================
# Checkpoint: find the model, list its checkpoints, load and validate one
# =========================================================================================

@dataclass
class ModelSource:
    checkpoint: Path                 # the .pt file to load
    model_dir: Optional[Path]        # the ML-Agents run folder it belongs to, when known
    behavior: Optional[str]          # e.g. "Huggy"
    origin: str                      # how it was found: --checkpoint, --model-dir, hub, ...
    note: Optional[str] = None       # a line the user must see (e.g. bundled sample)


CKPT_NAME = re.compile(r"^(?P<behavior>.+)-(?P<step>\d+)\.pt$")


def find_behavior(model_dir: Path) -> str:
    """The behaviour name from the folder's files: the sub-folder that holds .pt files."""
    try:
        names = sorted(d.name for d in model_dir.iterdir()
                       if d.is_dir() and (any(_step_of(p.name, d.name) is not None for p in d.glob("*.pt"))
                                          or (d / "checkpoint.pt").is_file()))
    except OSError as exc:
        raise UsageError(f"{model_dir}: cannot read the folder ({exc.strerror or exc})")
    if not names:
        raise UsageError(f"{model_dir}: no ML-Agents checkpoint found (expected <Behavior>/<Behavior>-<step>.pt "
                         f"or <Behavior>/checkpoint.pt); pass --checkpoint FILE.pt")
    if len(names) > 1:
        raise UsageError(f"{model_dir}: several behaviours ({', '.join(names)}); choose one with --checkpoint FILE.pt")
    return names[0]


def _step_of(filename: str, behavior: str) -> Optional[int]:
    m = CKPT_NAME.match(filename)
    return int(m.group("step")) if m and m.group("behavior") == behavior else None


def list_checkpoints(model_dir: Path, behavior: str) -> list[tuple[Path, Optional[int]]]:
    """Every <Behavior>-<step>.pt sorted by step, then checkpoint.pt (step None) if present."""
    folder = model_dir / behavior
    stepped = sorted(((p, _step_of(p.name, behavior)) for p in folder.glob("*.pt")
                      if _step_of(p.name, behavior) is not None), key=lambda t: t[1])
    if (folder / "checkpoint.pt").is_file():
        stepped.append((folder / "checkpoint.pt", None))
    return stepped


def default_checkpoint(model_dir: Path, behavior: str) -> Path:
    """The highest-step <Behavior>-<step>.pt, else checkpoint.pt (the seed loads Huggy-2000049.pt)."""
    ckpts = list_checkpoints(model_dir, behavior)
    stepped = [p for p, s in ckpts if s is not None]
    if stepped:
        return stepped[-1]
    if ckpts:
        return ckpts[0][0]
    raise UsageError(f"{model_dir / behavior}: folder holds no checkpoint (.pt)")


def training_status(model_dir: Optional[Path], behavior: Optional[str]) -> dict:
    """run_logs/training_status.json for this behaviour ({} when absent or unreadable)."""
    if not model_dir or not behavior:
        return {}
    path = model_dir / "run_logs" / "training_status.json"
    try:
        data = json.loads(path.read_text())
        return data.get(behavior, {}) if isinstance(data, dict) else {}
    except (OSError, ValueError):
        return {}


def status_entry(status: dict, ckpt: Path, step: Optional[int]) -> dict:
    """The training_status.json record of one checkpoint, matched by file name, then by step."""
    for entry in status.get("checkpoints", []) if isinstance(status.get("checkpoints"), list) else []:
        if not isinstance(entry, dict):
            continue
        files = [entry.get("file_path", "")] + list(entry.get("auxillary_file_paths") or [])
        if any(Path(str(f)).name == ckpt.name for f in files) or (step is not None and entry.get("steps") == step):
            return entry
    return {}


def final_step(model_dir: Optional[Path], behavior: Optional[str]) -> Optional[int]:
    """The run's final step: training_status.json's final_checkpoint, else the highest file step."""
    final = training_status(model_dir, behavior).get("final_checkpoint")
    if isinstance(final, dict) and isinstance(final.get("steps"), int):
        return final["steps"]
    if model_dir and behavior:
        steps = [s for _, s in list_checkpoints(model_dir, behavior) if s is not None]
        return max(steps) if steps else None
    return None


def pick_hub_files(files: list[str]) -> list[str]:
    """From a Hub repo's file list, what inference needs: top-level ONNX and config, run_logs,
    and per behaviour only the highest-step checkpoint and its ONNX (not all 200 of them)."""
    wanted = [f for f in files if "/" not in f and f.endswith((".onnx", ".json", ".yaml"))]
    wanted += [f for f in files if f.startswith("run_logs/") and f.endswith(".json")]
    by_behavior: dict[str, list[tuple[int, str]]] = {}
    for f in files:
        parts = f.split("/")
        if len(parts) == 2 and _step_of(parts[1], parts[0]) is not None:
            by_behavior.setdefault(parts[0], []).append((_step_of(parts[1], parts[0]), f))
    for ckpts in by_behavior.values():
        best = max(ckpts)[1]
        wanted += [best] + [f for f in files if f == best[:-3] + ".onnx"]
    for f in files:
        parts = f.split("/")
        if len(parts) == 2 and parts[1] == "checkpoint.pt" and parts[0] not in by_behavior:
            wanted.append(f)
    return sorted(set(wanted))


def hub_unreachable(timeout: float = 3.0) -> Optional[str]:
    """Why the Hub endpoint ($HF_ENDPOINT, default huggingface.co) cannot be reached, or None.
    A plain TCP connection, no HTTP; skipped behind a proxy, where only the proxy can tell."""
    if any(os.environ.get(v) for v in ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy")):
        return None
    import socket
    from urllib.parse import urlparse
    url = urlparse(os.environ.get("HF_ENDPOINT") or "https://huggingface.co")
    host, port = url.hostname or "huggingface.co", url.port or (80 if url.scheme == "http" else 443)
    try:
        socket.create_connection((host, port), timeout=timeout).close()
        return None
    except OSError as exc:
        return f"{host}:{port} is unreachable ({exc.strerror or exc})"


def download_from_hub(repo_id: str) -> Path:
    """The repo's folder through huggingface_hub: its cache first, then the Hub (or HF_ENDPOINT's
    mirror) unless HF_HUB_OFFLINE is set. Raises UsageError with the reason when unavailable."""
    try:
        from huggingface_hub import HfApi, snapshot_download
    except ImportError:
        raise UsageError("huggingface_hub is not installed (pip install huggingface_hub)")
    try:
        cached = Path(snapshot_download(repo_id, local_files_only=True))
        find_behavior(cached)
        return cached
    except Exception:  # not cached, or cached without a checkpoint: try online below
        pass
    if os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on"):
        raise UsageError(f"{repo_id}: not in the Hugging Face cache and HF_HUB_OFFLINE is set")
    unreachable = hub_unreachable()
    if unreachable:  # huggingface_hub would retry for ~25 s before giving up
        raise UsageError(f"{repo_id}: not in the Hugging Face cache and {unreachable}")
    try:
        files = HfApi().list_repo_files(repo_id)
        return Path(snapshot_download(repo_id, allow_patterns=pick_hub_files(files)))
    except Exception as exc:  # network, authentication, missing repo: all end the same way
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise UsageError(f"{repo_id}: could not download from the Hugging Face Hub ({reason[:200]})")


def locate_model(checkpoint: Optional[str], model_dir: Optional[str], repo_id: Optional[str]) -> ModelSource:
    """--checkpoint, then --model-dir, then $HUGGY_MODEL_DIR, then the Hub, then the bundled sample."""
    if checkpoint:
        path = Path(checkpoint)
        if path.is_dir():
            raise UsageError(f"--checkpoint {path}: is a folder; use --model-dir for a folder")
        if not path.is_file():
            raise UsageError(f"--checkpoint {path}: no such file")
        folder, behavior = path.resolve().parent.parent, path.resolve().parent.name
        if not list_checkpoints(folder, behavior):
            folder, behavior = None, None
        return ModelSource(path, folder, behavior, "--checkpoint")
    for origin, value in (("--model-dir", model_dir), ("HUGGY_MODEL_DIR", os.environ.get("HUGGY_MODEL_DIR"))):
        if value:
            folder = Path(value)
            if not folder.is_dir():
                raise UsageError(f"{origin} {folder}: no such folder")
            behavior = find_behavior(folder)
            return ModelSource(default_checkpoint(folder, behavior), folder, behavior, origin)
    try:
        folder = download_from_hub(repo_id or DEFAULT_REPO)
        behavior = find_behavior(folder)
        return ModelSource(default_checkpoint(folder, behavior), folder, behavior, f"hub:{repo_id or DEFAULT_REPO}")
    except UsageError as exc:
        if repo_id:  # the user asked for this repo: no silent substitute
            raise
        behavior = find_behavior(BUNDLED_MODEL_DIR)
        return ModelSource(default_checkpoint(BUNDLED_MODEL_DIR, behavior), BUNDLED_MODEL_DIR, behavior,
                           "bundled sample", f"{BUNDLED_NOTE} ({exc})")


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


@dataclass
class PolicySpec:
    """Everything inference needs, read from an ML-Agents checkpoint (float32 numpy arrays)."""
    path: Path
    layers: list[tuple[np.ndarray, np.ndarray]]  # network body: (weight [out, in], bias [out])
    mu_weight: np.ndarray
    mu_bias: np.ndarray
    log_sigma: np.ndarray                        # [act_dim]
    running_mean: Optional[np.ndarray] = None    # normalizer, None when normalize: false
    running_variance: Optional[np.ndarray] = None
    normalization_steps: Optional[int] = None
    global_step: Optional[int] = None
    sha256: str = ""
    load_s: float = 0.0

    @property
    def obs_dim(self) -> int:
        return self.layers[0][0].shape[1]

    @property
    def act_dim(self) -> int:
        return self.mu_weight.shape[0]

    @property
    def hidden_units(self) -> int:
        return self.layers[0][0].shape[0]

    @property
    def normalize(self) -> bool:
        return self.running_mean is not None

    @property
    def parameters(self) -> int:
        """Weights and biases of the Linear layers (566,805 for Huggy, as in the seed)."""
        return sum(w.size + b.size for w, b in self.layers) + self.mu_weight.size + self.mu_bias.size

    def architecture(self) -> str:
        widths = [w.shape[0] for w, _ in self.layers]
        body = f"Linear({widths[0]})->SiLU x{len(widths)}" if len(set(widths)) == 1 else \
            "->".join(f"Linear({n})->SiLU" for n in widths)
        norm = "normalizer->" if self.normalize else ""
        return f"obs({self.obs_dim})->{norm}{body}->Linear({self.act_dim})->clip(±3)/3"


def read_checkpoint(path: Path) -> dict:
    """torch.load with weights_only=True: tensors and plain containers only, never code."""
    import pickle
    import torch
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            obj = torch.load(path, map_location="cpu", weights_only=True)
    except IsADirectoryError:
        raise UsageError(f"{path}: is a folder, not a checkpoint file")
    except OSError as exc:
        raise UsageError(f"{path}: cannot read ({exc.strerror or exc})")
    except (pickle.UnpicklingError, RuntimeError, EOFError, ValueError, TypeError, AttributeError,
            ImportError, IndexError, KeyError, UnicodeDecodeError, MemoryError, OverflowError) as exc:
        text = str(exc).strip()
        wants_code = re.search(r"(?:unsupported|Unsupported global:) GLOBAL ([\w.]+)", text)
        if wants_code:  # a pickle asking for code (e.g. GLOBAL posix.system): the refusal we want
            reason = f"it asks to import and call {wants_code.group(1)}, which could run code"
        elif text.startswith("Weights only load failed") or "central directory" in text or not text:
            reason = "not a PyTorch checkpoint file, or a damaged/truncated one"
        else:
            reason = text.splitlines()[0][:160]
        raise UsageError(f"{path}: refused, nothing in it was run ({reason}); "
                         f"expected an ML-Agents .pt written by mlagents-learn")
    if not isinstance(obj, dict) or "Policy" not in obj or not isinstance(obj["Policy"], dict):
        raise UsageError(f"{path}: not an ML-Agents checkpoint (no 'Policy' state dict)")
    return obj


def spec_from_state_dict(state: dict, path: Path, global_step: Optional[int] = None) -> PolicySpec:
    """Infer the architecture from tensor shapes and refuse anything that does not chain."""
    import torch

    def bad(problem: str) -> UsageError:
        return UsageError(f"{path}: not a usable ML-Agents PPO policy: {problem}")

    def tensor(key: str, ndim: int) -> np.ndarray:
        value = state.get(key)
        if not isinstance(value, torch.Tensor):
            raise bad(f"missing tensor '{key}'")
        if value.dtype != torch.float32:
            raise bad(f"'{key}' is {str(value.dtype).replace('torch.', '')}, expected float32")
        if value.dim() != ndim:
            raise bad(f"'{key}' has shape {list(value.shape)}, expected {ndim} dimensions")
        array = value.detach().cpu().numpy().copy()
        if not np.isfinite(array).all():
            raise bad(f"'{key}' holds NaN or infinite values")
        return array

    for key in state:
        if not isinstance(key, str):
            raise bad(f"non-text key {key!r}")
        known = (key.startswith(BODY_PREFIX) or key.startswith(MU_PREFIX) or key == LOG_SIGMA_KEY
                 or any(key.startswith(p) for p in NORMALIZER_PREFIXES))
        if key.startswith(("network_body.", "action_model.")) and not known:
            raise bad(f"unsupported part '{key}' (only vector observations and continuous actions)")
    for key in ("discrete_act_size_vector", "memory_size_vector"):
        value = state.get(key)
        if isinstance(value, torch.Tensor) and value.numel() and bool((value != 0).any()):
            raise bad("discrete actions are not supported" if key.startswith("discrete") else
                      "recurrent (memory) policies are not supported")

    indices = set()
    for key in state:
        if key.startswith(BODY_PREFIX):
            index, _, leaf = key[len(BODY_PREFIX):].partition(".")
            if not index.isdigit() or leaf not in ("weight", "bias"):
                raise bad(f"unexpected network-body key '{key}'")
            indices.add(int(index))
    if not indices:
        raise bad("no network-body layers ('network_body._body_endoder.seq_layers.N.weight')")
    if sorted(indices) != list(range(0, 2 * len(indices), 2)):
        raise bad(f"network-body layers {sorted(indices)} are not Linear layers 0, 2, 4, ... with SiLU between")
    layers, width = [], None
    for i in sorted(indices):
        weight = tensor(f"{BODY_PREFIX}{i}.weight", 2)
        bias = tensor(f"{BODY_PREFIX}{i}.bias", 1)
        if bias.shape[0] != weight.shape[0] or weight.shape[0] == 0 or weight.shape[1] == 0:
            raise bad(f"layer {i}: weight {list(weight.shape)} and bias {list(bias.shape)} do not match")
        if width is not None and weight.shape[1] != width:
            raise bad(f"layer {i} takes {weight.shape[1]} inputs but the layer before gives {width}")
        layers.append((weight, bias))
        width = weight.shape[0]
    mu_weight, mu_bias = tensor(MU_PREFIX + "weight", 2), tensor(MU_PREFIX + "bias", 1)
    if mu_weight.shape[1] != width or mu_bias.shape[0] != mu_weight.shape[0] or mu_weight.shape[0] == 0:
        raise bad(f"mu weight {list(mu_weight.shape)} / bias {list(mu_bias.shape)} do not follow a body of width {width}")
    act_dim = mu_weight.shape[0]
    log_sigma = state.get(LOG_SIGMA_KEY)
    log_sigma = tensor(LOG_SIGMA_KEY, log_sigma.dim() if isinstance(log_sigma, torch.Tensor) else 2)
    if log_sigma.size != act_dim or log_sigma.ndim > 2:
        raise bad(f"log_sigma has shape {list(log_sigma.shape)}, expected [1, {act_dim}]")
    declared = state.get("continuous_act_size_vector")
    if isinstance(declared, torch.Tensor) and declared.numel() == 1 and int(declared.item()) != act_dim:
        raise bad(f"continuous_act_size_vector says {int(declared.item())} actions but mu gives {act_dim}")

    spec = PolicySpec(path, layers, mu_weight, mu_bias, log_sigma.reshape(act_dim), global_step=global_step)
    prefix = next((p for p in NORMALIZER_PREFIXES if any(k.startswith(p) for k in state)), None)
    if prefix:
        spec.running_mean = tensor(prefix + "running_mean", 1)
        spec.running_variance = tensor(prefix + "running_variance", 1)
        steps = state.get(prefix + "normalization_steps")
        if not isinstance(steps, torch.Tensor) or steps.numel() != 1 or steps.dtype.is_floating_point \
                or steps.dtype == torch.bool or steps.is_complex():
            raise bad(f"'{prefix}normalization_steps' must be one integer")
        spec.normalization_steps = int(steps.item())
        if spec.normalization_steps < 1:
            raise bad(f"normalization_steps is {spec.normalization_steps}, expected >= 1")
        for name, array in (("running_mean", spec.running_mean), ("running_variance", spec.running_variance)):
            if array.shape != (spec.obs_dim,):
                raise bad(f"normalizer {name} has shape {list(array.shape)}, expected [{spec.obs_dim}]")
        if (spec.running_variance <= 0).any():
            raise bad("normalizer running_variance has values <= 0")
    return spec


def global_step(checkpoint: dict) -> Optional[int]:
    """The training step saved with a checkpoint ({"_GlobalSteps__global_step": tensor([600017])})."""
    step = checkpoint.get("global_step")
    if isinstance(step, dict):
        step = next(iter(step.values()), None)
    try:
        return int(step.reshape(-1)[0].item()) if hasattr(step, "reshape") else int(step) if step is not None else None
    except (TypeError, ValueError, IndexError, RuntimeError):
        return None


def load_policy_spec(path: Path, expect_sha256: Optional[str] = None) -> PolicySpec:
    """Read, validate and describe one checkpoint file (sha256 checked before unpickling)."""
    t0 = time.perf_counter()
    path = Path(path)
    if not path.is_file():
        raise UsageError(f"{path}: no such checkpoint file")
    sha = file_sha256(path)
    if expect_sha256 and sha != expect_sha256.strip().lower():
        raise UsageError(f"{path}: sha256 is {sha}, not the expected {expect_sha256.strip().lower()}; refusing it")
    obj = read_checkpoint(path)
    spec = spec_from_state_dict(obj["Policy"], path, global_step(obj))
    spec.sha256, spec.load_s = sha, time.perf_counter() - t0
    return spec


# =========================================================================================
# Policy: exactly ML-Agents' computation, in its order and precision
# =========================================================================================

def build_policy(spec: PolicySpec, dtype=None, normalizer_dtype=None):
    """A torch module computing mu: normalizer -> network body (Linear -> SiLU) x L -> mu.

    The normalizer stays float32 whatever dtype the MLP uses: running_variance is an
    accumulated sum (1e8 in Huggy) that overflows float16. Its divisor is computed once, as
    ML-Agents computes it: torch.sqrt(running_variance / normalization_steps) in float32.
    """
    import torch
    from torch import nn
    dtype = dtype or torch.float32
    normalizer_dtype = normalizer_dtype or torch.float32

    class MLAgentsPolicy(nn.Module):
        def __init__(self):
            super().__init__()
            self.normalize = spec.normalize
            if spec.normalize:
                variance = torch.from_numpy(spec.running_variance).to(normalizer_dtype)
                steps = torch.tensor(spec.normalization_steps, dtype=torch.int64)
                self.register_buffer("running_mean", torch.from_numpy(spec.running_mean).to(normalizer_dtype))
                self.register_buffer("divisor", torch.sqrt(variance / steps))
            body = []
            for weight, bias in spec.layers:
                linear = nn.Linear(weight.shape[1], weight.shape[0], dtype=dtype)
                linear.weight.data.copy_(torch.from_numpy(weight))
                linear.bias.data.copy_(torch.from_numpy(bias))
                body += [linear, nn.SiLU()]
            self.body = nn.Sequential(*body)
            self.mu = nn.Linear(spec.mu_weight.shape[1], spec.act_dim, dtype=dtype)
            self.mu.weight.data.copy_(torch.from_numpy(spec.mu_weight))
            self.mu.bias.data.copy_(torch.from_numpy(spec.mu_bias))
            self.mlp_dtype = dtype
            self.requires_grad_(False)

        def forward(self, obs):
            """obs [N, obs_dim] (float32, or float64 for the reference) -> mu [N, act_dim]."""
            if self.normalize:
                obs = torch.clamp((obs - self.running_mean) / self.divisor, -NORMALIZER_CLIP, NORMALIZER_CLIP)
            return self.mu(self.body(obs.to(self.mlp_dtype)))

    return MLAgentsPolicy().eval()


def deterministic_actions(mu: np.ndarray) -> np.ndarray:
    """ML-Agents' deterministic_continuous_actions: clip(mu, -3, 3) / 3."""
    return np.clip(mu, -ACTION_CLIP, ACTION_CLIP) / mu.dtype.type(ACTION_CLIP)


def sampled_actions(mu: np.ndarray, z: np.ndarray, sigma: np.ndarray) -> np.ndarray:
    """ML-Agents' continuous_actions: clip(mu + z * exp(log_sigma), -3, 3) / 3."""
    return deterministic_actions(mu + z * sigma)


def draw_noise(seed: int, rows: Optional[int], act_dim: int) -> np.ndarray:
    """Sampling noise, drawn on the CPU as the seed does (NPUs have no such generator):
    torch.randn(act_dim) or torch.randn(rows, act_dim) from torch.Generator().manual_seed(seed)."""
    import torch
    shape = (act_dim,) if rows is None else (rows, act_dim)
    return torch.randn(shape, generator=torch.Generator().manual_seed(seed)).numpy()


def noise_sequence(seed: int, steps: int, act_dim: int) -> np.ndarray:
    """Noise for a control loop: one torch.randn(act_dim) per step from one generator seeded
    once, so that step 0 draws exactly what `sample --seed S` draws."""
    import torch
    generator = torch.Generator().manual_seed(seed)
    return torch.stack([torch.randn(act_dim, generator=generator) for _ in range(steps)]).numpy()


def reference_mu(spec: PolicySpec, obs: np.ndarray) -> np.ndarray:
    """mu in float64 on the CPU, straight from the checkpoint (the precision reference)."""
    import torch
    policy = build_policy(spec, torch.float64, torch.float64)
    with torch.inference_mode():
        return policy(torch.from_numpy(np.asarray(obs, np.float64))).numpy()


# =========================================================================================
# ONNX graph: ML-Agents' own interface and operator order, built from the checkpoint
# =========================================================================================

def build_onnx(spec: PolicySpec, interface: str = "mlagents"):
    """An ONNX model of the policy, node for node as ML-Agents' exporter writes it (opset 9).

    interface="mlagents": input obs_0 [batch, obs_dim]; outputs version_number,
      memory_size, continuous_actions (RandomNormalLike, as ML-Agents draws it),
      continuous_action_output_shape, deterministic_continuous_actions.
    interface="engine": the same normalizer/body/mu nodes, outputs mu and
      deterministic_continuous_actions only (what the onnxruntime engine runs).
    """
    import onnx
    import torch
    from onnx import TensorProto, helper, numpy_helper

    nodes, inits = [], []

    def init(name: str, array) -> str:
        inits.append(numpy_helper.from_array(np.asarray(array, np.float32), name))
        return name

    def node(op: str, inputs: list[str], output: str, **attrs) -> str:
        nodes.append(helper.make_node(op, inputs, [output], name=output.rsplit("_output", 1)[0], **attrs))
        return output

    def const(name: str, value: float) -> str:
        tensor = numpy_helper.from_array(np.asarray(value, np.float32), name + "_value")
        return node("Constant", [], name, value=tensor)

    x = "obs_0"
    if spec.normalize:
        norm = NORMALIZER_PREFIXES[0]
        divisor = torch.sqrt(torch.from_numpy(spec.running_variance)
                             / torch.tensor(spec.normalization_steps, dtype=torch.int64)).numpy()
        x = node("Sub", [x, init(norm + "running_mean", spec.running_mean)],
                 "/network_body/observation_encoder/processors.0/normalizer/Sub_output_0")
        x = node("Div", [x, init(norm + "divisor", divisor)],
                 "/network_body/observation_encoder/processors.0/normalizer/Div_output_0")
        x = node("Clip", [x], "/network_body/observation_encoder/processors.0/normalizer/Clip_output_0",
                 min=-NORMALIZER_CLIP, max=NORMALIZER_CLIP)
    if interface == "mlagents":  # a one-input Concat copies its input: the engine skips it
        x = node("Concat", [x], "/network_body/observation_encoder/Concat_output_0", axis=1)
    for k, (weight, bias) in enumerate(spec.layers):
        i = 2 * k
        base = f"/network_body/_body_endoder/seq_layers/seq_layers.{i}"
        gemm = node("Gemm", [x, init(f"{BODY_PREFIX}{i}.weight", weight), init(f"{BODY_PREFIX}{i}.bias", bias)],
                    f"{base}/Gemm_output_0", alpha=1.0, beta=1.0, transB=1)
        sig = node("Sigmoid", [gemm], f"/network_body/_body_endoder/seq_layers/seq_layers.{i + 1}/Sigmoid_output_0")
        x = node("Mul", [gemm, sig], f"/network_body/_body_endoder/seq_layers/seq_layers.{i + 1}/Mul_output_0")
    mu = node("Gemm", [x, init(MU_PREFIX + "weight", spec.mu_weight), init(MU_PREFIX + "bias", spec.mu_bias)],
              "/_continuous_distribution/mu/Gemm_output_0", alpha=1.0, beta=1.0, transB=1)
    batch = helper.make_tensor_value_info("obs_0", TensorProto.FLOAT, ["batch", spec.obs_dim])
    actions = lambda name: helper.make_tensor_value_info(name, TensorProto.FLOAT, ["batch", spec.act_dim])
    if interface == "mlagents":
        zero = const("/_continuous_distribution/Constant_output_0", 0.0)
        log_sigma = init(LOG_SIGMA_KEY, spec.log_sigma.reshape(1, -1))
        scaled = node("Mul", [mu, zero], "/_continuous_distribution/Mul_output_0")
        added = node("Add", [scaled, log_sigma], "/_continuous_distribution/Add_output_0")
        sigma = node("Exp", [added], "/_continuous_distribution/Exp_output_0")
        noise = node("RandomNormalLike", [mu], "/RandomNormalLike_output_0", dtype=TensorProto.FLOAT)
        noisy = node("Add", [mu, node("Mul", [noise, sigma], "/Mul_output_0")], "/Add_output_0")
        clipped = node("Clip", [noisy], "/Clip_output_0", min=-ACTION_CLIP, max=ACTION_CLIP)
        node("Div", [clipped, const("/Constant_output_0", ACTION_CLIP)], "continuous_actions")
    clipped = node("Clip", [mu], "/Clip_1_output_0", min=-ACTION_CLIP, max=ACTION_CLIP)
    node("Div", [clipped, const("/Constant_1_output_0", ACTION_CLIP)], "deterministic_continuous_actions")
    if interface == "mlagents":
        for name, value, out in (("version_number.1", 3.0, "version_number"),
                                 ("memory_size_vector", 0.0, "memory_size"),
                                 ("continuous_act_size_vector", float(spec.act_dim), "continuous_action_output_shape")):
            node("Identity", [init(name, [value])], out)
        scalar = lambda name: helper.make_tensor_value_info(name, TensorProto.FLOAT, [1])
        outputs = [scalar("version_number"), scalar("memory_size"), actions("continuous_actions"),
                   scalar("continuous_action_output_shape"), actions("deterministic_continuous_actions")]
    else:
        outputs = [actions("/_continuous_distribution/mu/Gemm_output_0"), actions("deterministic_continuous_actions")]
    graph = helper.make_graph(nodes, "ml-agents-policy", [batch], outputs, inits)
    model = helper.make_model(graph, producer_name="inference.py", opset_imports=[helper.make_opsetid("", 9)])
    model.ir_version = 4
    onnx.checker.check_model(model)
    return model


def onnx_session(model_or_path, tuned: bool = True):
    """An onnxruntime CPU session; `tuned` enables every graph optimisation."""
    try:
        import onnxruntime as ort
    except ImportError:
        raise UsageError("onnxruntime is not installed (pip install onnxruntime)")
    options = ort.SessionOptions()
    if tuned:
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    source = model_or_path.SerializeToString() if hasattr(model_or_path, "SerializeToString") else str(model_or_path)
    try:
        return ort.InferenceSession(source, options, providers=["CPUExecutionProvider"])
    except Exception as exc:
        raise UsageError(f"{model_or_path if isinstance(model_or_path, (str, Path)) else 'model'}: "
                         f"onnxruntime cannot load it ({str(exc).splitlines()[0][:160]})")


def mlagents_onnx_session(path: Path):
    """A session for an ML-Agents ONNX file, refusing files without ML-Agents' interface."""
    session = onnx_session(path, tuned=False)
    inputs, outputs = [i.name for i in session.get_inputs()], [o.name for o in session.get_outputs()]
    if inputs != ["obs_0"] or "deterministic_continuous_actions" not in outputs:
        raise UsageError(f"{path}: not an ML-Agents policy ONNX (inputs {inputs[:3]}, expected obs_0 and a "
                         f"deterministic_continuous_actions output, as ML-Agents 2.0 and later write)")
    return session


def run_mlagents_onnx(session, obs: np.ndarray) -> np.ndarray:
    """deterministic_continuous_actions from an ML-Agents-interface ONNX session."""
    return session.run(["deterministic_continuous_actions"], {"obs_0": np.ascontiguousarray(obs, np.float32)})[0]


# =========================================================================================
# Devices and engines
# =========================================================================================

DTYPES = ("float32", "float16", "bfloat16")


def parse_device(text: str) -> tuple[str, Optional[int]]:
    """'auto' | 'cpu' | 'cuda[:N]' | 'npu[:N]' -> (kind, index or None)."""
    m = re.fullmatch(r"(auto|cpu|cuda|npu)(?::(\d+))?", text.strip().lower())
    if not m or (m.group(1) in ("auto", "cpu") and m.group(2) is not None):
        raise UsageError(f"--device {text!r}: expected auto, cpu, cuda[:N] or npu[:N]")
    return m.group(1), int(m.group(2)) if m.group(2) is not None else None


def import_torch_npu():
    """Import torch_npu quietly, as the seed does; None when it is not installed."""
    import importlib.util
    if importlib.util.find_spec("torch_npu") is None:
        return None
    os.environ.setdefault("ASCEND_GLOBAL_LOG_LEVEL", "3")  # CANN logs: errors only
    warnings.filterwarnings("ignore", message=".*owner.*")  # directory-ownership warning
    warnings.filterwarnings("ignore", message=".*group.*write.*")
    import torch_npu  # noqa: F401  (registers torch.npu)
    return torch_npu


def npu_count() -> int:
    if import_torch_npu() is None:
        return 0
    import torch
    try:
        return torch.npu.device_count() if torch.npu.is_available() else 0
    except Exception:
        return 0


def cuda_count() -> int:
    import torch
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def select_device(text: str, npus: Callable[[], int], cudas: Callable[[], int]) -> str:
    """The device string for --device given how many NPUs and CUDA GPUs there are
    (auto: npu, else cuda, else cpu); UsageError naming what is missing."""
    kind, index = parse_device(text)
    if kind == "auto":
        return "npu:0" if npus() else "cuda:0" if cudas() else "cpu"
    if kind == "cpu":
        return "cpu"
    index = index or 0
    count = npus() if kind == "npu" else cudas()
    what = "NPU" if kind == "npu" else "CUDA GPU"
    if count == 0:
        raise UsageError(f"--device {text}: no {what} is available ({missing_backend(kind)})")
    if index >= count:
        raise UsageError(f"--device {text}: {what} {index} does not exist ({count} available)")
    return f"{kind}:{index}"


def missing_backend(kind: str) -> str:
    """Why a device kind is absent, in words."""
    import importlib.util
    if kind == "npu":
        return ("torch_npu is not installed (Ascend hosts: use CANN's torch/torch_npu)"
                if importlib.util.find_spec("torch_npu") is None else "torch_npu sees no NPU; check npu-smi info")
    import torch
    return "a CPU-only torch build" if torch.version.cuda is None else f"CUDA {torch.version.cuda} build sees no GPU"


def resolve_device(text: str):
    """A torch.device for --device, checking that it exists."""
    import torch
    return torch.device(select_device(text, npu_count, cuda_count))


def synchronize(device) -> None:
    """Wait for the device, so that a clock read afterwards sees finished work."""
    import torch
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    elif device.type == "npu":
        torch.npu.synchronize(device)


class TorchEngine:
    """The policy as a torch module on cpu/cuda/npu. On CUDA (and on NPU where torch_npu has
    graph capture: untested here) each batch size is captured once as a device graph."""
    name = "torch"

    def __init__(self, spec: PolicySpec, device, dtype: str):
        import torch
        self.torch, self.device, self.dtype = torch, device, getattr(torch, dtype)
        self.policy = build_policy(spec, self.dtype).to(device)
        self.sigma = torch.exp(torch.from_numpy(spec.log_sigma)).to(device)
        self.graphs: dict[int, tuple] = {}
        api = torch.cuda if device.type == "cuda" else getattr(torch, "npu", None) if device.type == "npu" else None
        graph_cls = getattr(api, "CUDAGraph" if device.type == "cuda" else "NPUGraph", None) if api else None
        self.graph_api = api if graph_cls is not None and hasattr(api, "graph") else None
        self.graph_cls = graph_cls

    def _forward(self, x):
        mu = self.policy(x).float()
        return mu, torch_clip_div(self.torch, mu)

    def _captured(self, rows: int):
        """(static input, static mu, static actions, graph) for a batch size, captured on first use."""
        if rows not in self.graphs and len(self.graphs) < 8:
            torch = self.torch
            static_in = torch.zeros(rows, self.policy.body[0].in_features, device=self.device)
            stream = self.graph_api.Stream(device=self.device)
            stream.wait_stream(self.graph_api.current_stream(self.device))
            with self.graph_api.stream(stream), torch.inference_mode():
                for _ in range(3):
                    self._forward(static_in)
            self.graph_api.current_stream(self.device).wait_stream(stream)
            graph = self.graph_cls()
            with torch.inference_mode(), self.graph_api.graph(graph):
                static_mu, static_act = self._forward(static_in)
            self.graphs[rows] = (static_in, static_mu, static_act, graph)
        return self.graphs.get(rows)

    def _run(self, obs: np.ndarray):
        torch = self.torch
        host = np.ascontiguousarray(obs, np.float32)
        host = torch.from_numpy(host if host.flags.writeable else host.copy())  # e.g. a read-only memory map
        if self.graph_api is not None:
            try:
                captured = self._captured(obs.shape[0])
            except Exception:  # capture unsupported here: stay eager from now on
                self.graph_api, captured = None, None
            if captured:
                static_in, static_mu, static_act, graph = captured
                static_in.copy_(host, non_blocking=False)
                graph.replay()
                return static_mu, static_act
        with torch.inference_mode():
            return self._forward(host.to(self.device))

    def deterministic(self, obs: np.ndarray) -> np.ndarray:
        return self._run(obs)[1].cpu().numpy()  # .cpu() synchronises the device

    def mu(self, obs: np.ndarray) -> np.ndarray:
        return self._run(obs)[0].cpu().numpy()

    def sample(self, obs: np.ndarray, z: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        torch = self.torch
        mu, det = self._run(obs)
        with torch.inference_mode():
            noisy = mu + torch.from_numpy(np.ascontiguousarray(z, np.float32)).to(self.device) * self.sigma
            return det.cpu().numpy(), torch_clip_div(torch, noisy).cpu().numpy()


def torch_clip_div(torch, mu):
    return torch.clamp(mu, -ACTION_CLIP, ACTION_CLIP) / ACTION_CLIP


class OnnxRuntimeEngine:
    """The policy built from the checkpoint as an in-memory ONNX graph (the same nodes as
    export-onnx), run by onnxruntime on the CPU. float32 only."""
    name = "onnxruntime"

    def __init__(self, spec: PolicySpec):
        self.session = onnx_session(build_onnx(spec, interface="engine"))
        self.sigma = np.exp(spec.log_sigma.astype(np.float32))
        self.mu_name = "/_continuous_distribution/mu/Gemm_output_0"
        self.run = self.session.run

    def deterministic(self, obs: np.ndarray) -> np.ndarray:
        return self.run(["deterministic_continuous_actions"], {"obs_0": obs})[0]

    def mu(self, obs: np.ndarray) -> np.ndarray:
        return self.run([self.mu_name], {"obs_0": obs})[0]

    def sample(self, obs: np.ndarray, z: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        mu, det = self.run([self.mu_name, "deterministic_continuous_actions"], {"obs_0": obs})
        return det, sampled_actions(mu, np.asarray(z, np.float32), self.sigma)


def choose_engine(name: str, device, dtype: str) -> str:
    """auto: onnxruntime on the CPU in float32 (faster there), torch everywhere else."""
    import importlib.util
    has_ort = importlib.util.find_spec("onnxruntime") is not None and importlib.util.find_spec("onnx") is not None
    if name == "onnxruntime":
        if device.type != "cpu":
            raise UsageError(f"--engine onnxruntime runs on the CPU; for {device} use --engine torch or auto")
        if dtype != "float32":
            raise UsageError(f"--engine onnxruntime runs float32 only; use --engine torch for --dtype {dtype}")
        if not has_ort:
            raise UsageError("--engine onnxruntime: onnxruntime and onnx are not installed")
        return name
    if name == "torch":
        return name
    return "onnxruntime" if device.type == "cpu" and dtype == "float32" and has_ort else "torch"


def make_engine(name: str, spec: PolicySpec, device, dtype: str):
    return OnnxRuntimeEngine(spec) if name == "onnxruntime" else TorchEngine(spec, device, dtype)


# =========================================================================================
# Observations
# =========================================================================================

def random_obs(seed: int, obs_dim: int, rows: Optional[int] = None) -> np.ndarray:
    """The seed's convention: np.random.RandomState(seed).randn(obs_dim) (or (rows, obs_dim))."""
    shape = (obs_dim,) if rows is None else (rows, obs_dim)
    return np.random.RandomState(seed).randn(*shape).astype(np.float32)


def boundary_obs(spec: PolicySpec) -> np.ndarray:
    """Observations at the normalizer's clip edges: feature i sits at running_mean ± 5 standard
    deviations (+ for even i, − for odd i), so the normalized input is ±5; without a
    normalizer, the raw values ±5."""
    signs = np.where(np.arange(spec.obs_dim) % 2 == 0, 1.0, -1.0)
    if not spec.normalize:
        return (NORMALIZER_CLIP * signs).astype(np.float32)
    std = np.sqrt(spec.running_variance.astype(np.float64) / spec.normalization_steps)
    return (spec.running_mean + NORMALIZER_CLIP * signs * std).astype(np.float32)


def parse_obs(text: str, spec: PolicySpec, seed: int) -> np.ndarray:
    """--obs: random | zeros | ones | ones_neg | boundary | <number> | <obs_dim comma-separated numbers>."""
    word = text.strip().lower()
    named = {"random": lambda: random_obs(seed, spec.obs_dim), "zeros": lambda: np.zeros(spec.obs_dim, np.float32),
             "ones": lambda: np.ones(spec.obs_dim, np.float32), "ones_neg": lambda: -np.ones(spec.obs_dim, np.float32),
             "boundary": lambda: boundary_obs(spec)}
    if word in named:
        return named[word]()
    parts = [p.strip() for p in text.split(",")]
    if len(parts) > 1 and parts[-1] == "":
        parts.pop()  # tolerate one trailing comma
    try:
        values = [float(p) for p in parts]
    except ValueError:
        bad = next(p for p in parts if not _is_float(p))
        raise UsageError(f"--obs: {bad[:40]!r} is not a number; expected random, zeros, ones, ones_neg, boundary, "
                         f"one number or {spec.obs_dim} comma-separated numbers")
    if len(values) == 1:
        values = values * spec.obs_dim
    if len(values) != spec.obs_dim:
        raise UsageError(f"--obs: expected {spec.obs_dim} numbers (or one), got {len(values)}")
    obs = np.asarray(values, np.float64)
    if not np.isfinite(obs).all() or np.abs(obs).max() > np.finfo(np.float32).max:
        raise UsageError("--obs: values must be finite numbers within float32 range (no nan, inf)")
    return obs.astype(np.float32)


def _is_float(text: str) -> bool:
    try:
        float(text)
        return True
    except ValueError:
        return False


def check_obs_rows(obs: np.ndarray, obs_dim: int, what: str, first_row: int = 0) -> np.ndarray:
    """A float32 [N, obs_dim] array with finite values, or UsageError naming the bad row."""
    if obs.dtype.kind not in "fiu" or obs.dtype.kind == "b":
        raise UsageError(f"{what}: holds {obs.dtype} values, expected numbers")
    if obs.ndim == 1 and obs.shape[0] == obs_dim:
        obs = obs[None, :]
    if obs.ndim != 2 or obs.shape[1] != obs_dim:
        raise UsageError(f"{what}: shape {list(obs.shape)}, expected [rows, {obs_dim}]")
    obs = np.ascontiguousarray(obs, np.float32)
    finite = np.isfinite(obs).all(axis=1)
    if not finite.all():
        raise UsageError(f"{what}: row {first_row + int(np.argmin(finite))} holds nan or inf")
    return obs


def open_obs_file(path: Path, obs_dim: int) -> np.ndarray:
    """An observation array from .npy (memory-mapped), .npz (key 'obs' or the only array) or .csv."""
    if not path.is_file():
        raise UsageError(f"--obs-file {path}: no such file")
    suffix = path.suffix.lower()
    try:
        if suffix == ".npy":
            array = np.load(path, mmap_mode="r", allow_pickle=False)
        elif suffix == ".npz":
            with np.load(path, allow_pickle=False) as archive:
                keys = list(archive.keys())
                key = "obs" if "obs" in keys else keys[0] if len(keys) == 1 else None
                if key is None:
                    raise UsageError(f"--obs-file {path}: several arrays ({', '.join(keys[:5])}); name one 'obs'")
                array = archive[key]
        elif suffix == ".csv":
            array = np.loadtxt(path, delimiter=",", dtype=np.float64, ndmin=2)
        else:
            raise UsageError(f"--obs-file {path}: expected a .npy, .npz or .csv file")
    except UsageError:
        raise
    except (ValueError, OSError, EOFError) as exc:
        raise UsageError(f"--obs-file {path}: not a readable array ({str(exc).splitlines()[0][:120]})")
    if array.dtype.kind not in "fiu":
        raise UsageError(f"--obs-file {path}: holds {array.dtype} values, expected numbers")
    if array.ndim == 1 and array.shape[0] == obs_dim:
        array = array[None, :]
    if array.ndim != 2 or array.shape[1] != obs_dim:
        raise UsageError(f"--obs-file {path}: shape {list(array.shape)}, expected [rows, {obs_dim}]")
    if array.shape[0] == 0:
        raise UsageError(f"--obs-file {path}: holds no rows")
    return array


def available_memory() -> int:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return int(os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))


def check_batch_fits(rows: int, spec: PolicySpec) -> None:
    """Refuse, before allocating, a batch that would not fit in memory."""
    widest = max(w.shape[0] for w, _ in spec.layers)
    need = rows * (spec.obs_dim * 12 + widest * 4 * 4 + spec.act_dim * 16)
    have = available_memory()
    if need > 0.8 * have:
        raise UsageError(f"--batch {rows}: would need about {need / 2**30:.1f} GiB, "
                         f"{have / 2**30:.1f} GiB available; use a smaller --batch or --obs-file with --chunk")


# =========================================================================================
# Output helpers
# =========================================================================================

def fmt(values, digits: Optional[int] = None) -> str:
    """A list at full float32 precision (shortest text that reads back the same float32)."""
    values = np.asarray(values, np.float32).reshape(-1)
    if digits is not None:
        return "[" + ", ".join(f"{v:.{digits}f}" for v in values) + "]"
    return "[" + ", ".join(np.format_float_positional(v, unique=True, trim="0") if abs(v) >= 1e-4 or v == 0
                           else np.format_float_scientific(v, unique=True, trim="0") for v in values) + "]"


def floats(values) -> list:
    """JSON-ready floats: each float32 value exactly (float64 text of the float32)."""
    return np.asarray(values, np.float32).astype(np.float64).tolist()


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    a, b = np.asarray(a, np.float64).ravel(), np.asarray(b, np.float64).ravel()
    denom = np.linalg.norm(a) * np.linalg.norm(b)
    return float(a @ b / denom) if denom else float(np.array_equal(a, b))


def atomic_write(path: Path, write: Callable[[Path], None]) -> None:
    """Write through a temporary file beside `path`, then rename: never a half-written file,
    and an existing file stays as it was when anything fails."""
    handle, name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=f".tmp{path.suffix}")
    os.close(handle)
    tmp = Path(name)  # ends like the target, so writers that add a suffix (np.save) do not
    try:
        write(tmp)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise


def check_output_path(path: Path, suffixes: tuple[str, ...]) -> Path:
    """Refuse, before any work, an --output that cannot be written."""
    if path.suffix.lower() not in suffixes:
        raise UsageError(f"--output {path}: expected a {' or '.join(suffixes)} file")
    if path.is_dir():
        raise UsageError(f"--output {path}: is a folder")
    parent = path.parent if str(path.parent) else Path(".")
    if parent.exists() and not parent.is_dir():
        raise UsageError(f"--output {path}: {parent} is a file, not a folder")
    if not parent.is_dir():
        raise UsageError(f"--output {path}: folder {parent} does not exist")
    if not os.access(parent, os.W_OK):
        raise UsageError(f"--output {path}: folder {parent} is not writable")
    return path


def process_start_time() -> float:
    """Seconds since the epoch when this process started (Linux /proc), else import time."""
    try:
        ticks = int(Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()[19])
        boot = next(int(l.split()[1]) for l in Path("/proc/stat").read_text().splitlines() if l.startswith("btime"))
        return boot + ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, StopIteration):
        return time.time() - (time.perf_counter() - PROCESS_T0)


def versions() -> dict:
    import importlib.metadata as md
    out = {"python": sys.version.split()[0]}
    for name in ("torch", "torch_npu", "numpy", "onnxruntime", "onnx"):
        try:
            out[name] = md.version(name)
        except md.PackageNotFoundError:
            out[name] = None
    return out


# =========================================================================================
# Modes: each takes the run context and returns (result dict, check held?)
# =========================================================================================

@dataclass
class Context:
    args: argparse.Namespace
    _cache: dict = field(default_factory=dict)

    def say(self, text: str = "") -> None:
        if not self.args.json:
            print(text, flush=True)

    def cached(self, key, make):
        if key not in self._cache:
            self._cache[key] = make()
        return self._cache[key]

    @property
    def source(self) -> ModelSource:
        return self.cached("source", lambda: locate_model(self.args.checkpoint, self.args.model_dir, self.args.model))

    @property
    def spec(self) -> PolicySpec:
        def load():
            src = self.source
            if src.note:
                machine_readable = self.args.json or self.args.mode == "stream"  # stdout is JSON only
                print(f"[note] {src.note}", file=sys.stderr if machine_readable else sys.stdout)
            return load_policy_spec(src.checkpoint, self.args.expect_sha256)
        return self.cached("spec", load)

    @property
    def device(self):
        return self.cached("device", lambda: resolve_device(self.args.device))

    @property
    def engine_name(self) -> str:
        return self.cached("engine_name", lambda: choose_engine(self.args.engine, self.device, self.args.dtype))

    @property
    def engine(self):
        return self.cached("engine", lambda: make_engine(self.engine_name, self.spec, self.device, self.args.dtype))

    def header(self, title: str) -> None:
        self.say(f"===== {title} (device={self.device}, dtype={self.args.dtype}, engine={self.engine_name}) =====")

    def base(self) -> dict:
        return {"checkpoint": str(self.spec.path), "source": self.source.origin, "device": str(self.device),
                "dtype": self.args.dtype, "engine": self.engine_name}

    def obs(self) -> np.ndarray:
        return parse_obs(self.args.obs, self.spec, self.args.seed)


def mode_info(ctx: Context):
    """Environment, model and one deterministic action (the seed's case 1)."""
    v = versions()
    ctx.say(f"[env] torch {v['torch']} | torch_npu {v['torch_npu'] or 'not installed'} | numpy {v['numpy']} | python {v['python']}")
    ctx.say(f"[env] onnxruntime {v['onnxruntime'] or 'not installed'} | onnx {v['onnx'] or 'not installed'}")
    import shutil
    import subprocess
    npus, cudas = npu_count(), cuda_count()
    ctx.say(f"[env] device {ctx.device} | NPU available: {bool(npus)} ({npus}) | CUDA available: {bool(cudas)} ({cudas})")
    health = None
    if shutil.which("npu-smi"):
        try:
            text = subprocess.run(["npu-smi", "info"], capture_output=True, text=True, timeout=10).stdout
            health = next((l.strip() for l in text.splitlines() if re.search(r"\|\s*(OK|Warning|Alarm|Critical)\s*\|", l)), None)
        except (OSError, subprocess.SubprocessError):
            health = None
        ctx.say(f"[npu-smi] {health or 'no health line found'}")
    spec, src = ctx.spec, ctx.source
    ctx.say(f"[load] source = {src.origin}")
    ctx.say(f"[load] checkpoint = {spec.path}")
    ctx.say(f"[load] sha256 = {spec.sha256}")
    ctx.say(f"[load] parameters = {spec.parameters:,} | load time {spec.load_s:.3f}s")
    ctx.say(f"[load] dtype = {ctx.args.dtype} | architecture = {spec.architecture()}")
    ctx.say(f"[load] obs normalizer steps = {spec.normalization_steps if spec.normalize else 'none (normalize: false)'}")
    ctx.say(f"[load] log_sigma[:6] = {fmt(spec.log_sigma[:6], 4)}")
    obs = random_obs(ctx.args.seed, spec.obs_dim)
    actions = ctx.engine.deterministic(obs[None])[0]
    first_action_s = time.time() - process_start_time()
    ctx.say(f"[policy] obs(random,seed={ctx.args.seed})[:6] = {fmt(obs[:6], 4)}")
    ctx.say(f"[policy] deterministic_actions[:6] = {fmt(actions[:6])}")
    ctx.say(f"[policy] engine = {ctx.engine_name} | process start to first action = {first_action_s:.2f}s")
    result = {"obs_dim": spec.obs_dim, "action_dim": spec.act_dim, "hidden_units": spec.hidden_units,
              "num_layers": len(spec.layers), "normalize": spec.normalize,
              "normalization_steps": spec.normalization_steps, "parameters": spec.parameters,
              "log_sigma": floats(spec.log_sigma), **ctx.base(), "versions": v, "sha256": spec.sha256,
              "global_step": spec.global_step, "load_s": spec.load_s, "note": src.note,
              "devices": {"npu": npus, "cuda": cudas}, "npu_smi": health,
              "deterministic_actions": floats(actions), "time_to_first_action_s": first_action_s}
    return result, bool(np.all(np.abs(actions) <= 1.0))


def mode_checkpoints(ctx: Context):
    """Every <Behavior>-<step>.pt sorted by step, with reward from run_logs/training_status.json."""
    src = ctx.source
    if src.model_dir is None:
        raise UsageError(f"{src.checkpoint}: not inside an ML-Agents run folder; use --model-dir")
    default = default_checkpoint(src.model_dir, src.behavior)
    status = training_status(src.model_dir, src.behavior)
    rows = []
    ctx.say(f"[files] {src.model_dir} (behaviour {src.behavior}, {src.origin})")
    if src.note:
        ctx.say(f"[note] {src.note}")
    for path, step in list_checkpoints(src.model_dir, src.behavior):
        if step is None:  # checkpoint.pt: its step is saved inside (read weights-only)
            try:
                step = global_step(read_checkpoint(path))
            except UsageError:
                step = None
        entry = status_entry(status, path, step)
        rows.append({"file": path.name, "steps": step, "reward": entry.get("reward")})
    ctx.say(f"[files] {len(rows)} PyTorch checkpoint(s):")
    for row in rows:
        mark = "    <- default (highest step)" if row["file"] == default.name else ""
        reward = f"reward {row['reward']}" if row["reward"] is not None else "reward n/a"
        ctx.say(f"  - {row['file']:<24} steps {row['steps'] if row['steps'] is not None else 'n/a':>9} | {reward}{mark}")
    top = src.model_dir / f"{src.behavior}.onnx"
    ctx.say(f"[files] top-level ONNX: {top.name if top.is_file() else 'none'}")
    ctx.say(f"[load] default checkpoint: {default.name}")
    return {"model_dir": str(src.model_dir), "behavior": src.behavior, "checkpoints": rows,
            "default": default.name, "source": src.origin}, bool(rows)


def _action_range_ok(actions) -> bool:
    return bool(np.all(np.isfinite(actions)) and np.all(np.abs(actions) <= 1.0))


def mode_action(ctx: Context):
    """Deterministic action for one observation (clip(mu, -3, 3) / 3)."""
    obs = ctx.obs()
    actions = ctx.engine.deterministic(obs[None])[0]
    ctx.header(f"deterministic action (obs={ctx.args.obs if len(ctx.args.obs) < 24 else 'custom'}, seed={ctx.args.seed})")
    ctx.say(f"  obs[:8]        = {fmt(obs[:8])}")
    ctx.say(f"  action[:8]     = {fmt(actions[:8])}")
    ctx.say(f"  action range   = [{actions.min():.4f}, {actions.max():.4f}] (must lie in [-1, 1])")
    ctx.say(f"  action L2 norm = {np.linalg.norm(actions.astype(np.float64)):.4f}")
    return {"obs": floats(obs), "actions": floats(actions), **ctx.base()}, _action_range_ok(actions)


def mode_sample(ctx: Context):
    """Sampled action clip(mu + z * exp(log_sigma), -3, 3) / 3, drawn twice with the same seed."""
    obs, spec = ctx.obs(), ctx.spec
    draws = [ctx.engine.sample(obs[None], draw_noise(ctx.args.seed, None, spec.act_dim)[None]) for _ in range(2)]
    det, first, second = draws[0][0][0], draws[0][1][0], draws[1][1][0]
    same = bool(np.array_equal(first, second))
    sigma = np.exp(spec.log_sigma.astype(np.float32))
    ctx.header(f"sampled action (obs={ctx.args.obs if len(ctx.args.obs) < 24 else 'custom'}, seed={ctx.args.seed})")
    ctx.say(f"  obs[:8]        = {fmt(obs[:8])}")
    ctx.say(f"  deterministic  = {fmt(det[:8])}")
    ctx.say(f"  sampled#1      = {fmt(first[:8])}")
    ctx.say(f"  sampled#2      = {fmt(second[:8])}")
    ctx.say(f"  same seed, same draw = {'yes' if same else 'NO'}")
    ctx.say(f"  sigma[:6]      = {fmt(sigma[:6])}")
    return ({"obs": floats(obs), "deterministic": floats(det), "sampled": floats(first), "sigma": floats(sigma),
             "seed": ctx.args.seed, "identical": same, **ctx.base()},
            same and _action_range_ok(first) and _action_range_ok(det))


def mode_batch(ctx: Context):
    """--batch N random observations in memory, or --obs-file in chunks to --output."""
    if ctx.args.obs_file:
        return batch_file(ctx)
    spec, rows = ctx.spec, ctx.args.batch
    output = check_output_path(Path(ctx.args.output), (".npy",)) if ctx.args.output else None
    check_batch_fits(rows, spec)
    obs = random_obs(ctx.args.seed, spec.obs_dim, rows)
    engine = ctx.engine
    t0 = time.perf_counter()
    actions = engine.deterministic(obs)  # first (cold) call
    cold_ms = (time.perf_counter() - t0) * 1e3
    warm = []
    for _ in range(10 if rows <= 4096 else 3):
        t0 = time.perf_counter()
        again = engine.deterministic(obs)
        warm.append((time.perf_counter() - t0) * 1e3)
    warm_ms = float(np.median(warm))
    mu_max = float(np.abs(engine.mu(obs[: min(rows, 4096)])).max())
    ctx.header(f"batch inference (batch={rows}, seed={ctx.args.seed})")
    ctx.say(f"  first (cold) call = {cold_ms:.4f} ms | steady (warm, median of {len(warm)}) = {warm_ms:.4f} ms")
    ctx.say(f"  throughput (warm) = {rows / (warm_ms / 1e3):,.0f} observations/s")
    ctx.say("  deterministic[:5, :6] =")
    for i in range(min(5, rows)):
        ctx.say(f"    batch[{i}] {fmt(actions[i, :6])}")
    ctx.say(f"  |mu| max (first {min(rows, 4096)} rows) = {mu_max:.4f}")
    ctx.say(f"  output range = [{actions.min():.4f}, {actions.max():.4f}]")
    stable = bool(np.array_equal(actions, again))
    ctx.say(f"  repeated calls identical = {'yes' if stable else 'NO'}")
    if output:
        atomic_write(output, lambda tmp: np.save(tmp, actions))
        ctx.say(f"  written: {output.resolve()}")
    return ({"batch": rows, "actions": floats(actions), "cold_ms": cold_ms, "warm_ms": warm_ms,
             "output": str(output) if output else None,
             "throughput_per_s": rows / (warm_ms / 1e3), **ctx.base()}, _action_range_ok(actions) and stable)


def batch_file(ctx: Context):
    """A dataset-sized batch: memory-mapped input, chunked inference, memory-mapped .npy output
    written atomically, progress on stderr."""
    import resource
    spec, args = ctx.spec, ctx.args
    path = Path(args.obs_file)
    output = check_output_path(Path(args.output), (".npy",)) if args.output else None
    data = open_obs_file(path, spec.obs_dim)
    rows, chunk, engine = data.shape[0], args.chunk, ctx.engine
    try:
        from tqdm import tqdm
        bar = tqdm(total=rows, unit="obs", unit_scale=True, file=sys.stderr,
                   disable=rows < 4 * chunk or not sys.stderr.isatty() and not args.progress, mininterval=0.5)
    except ImportError:
        bar = None
    summary = {"min": np.inf, "max": -np.inf, "first": None}
    t0 = time.perf_counter()

    def run_chunks(out: Optional[np.ndarray]) -> None:
        for start in range(0, rows, chunk):
            block = check_obs_rows(np.asarray(data[start:start + chunk]), spec.obs_dim, f"--obs-file {path}", start)
            actions = engine.deterministic(block)
            if out is not None:
                out[start:start + len(block)] = actions
            summary["min"] = min(summary["min"], float(actions.min()))
            summary["max"] = max(summary["max"], float(actions.max()))
            if summary["first"] is None:
                summary["first"] = actions[0]
            if bar is not None:
                bar.update(len(block))

    try:
        if output is None:
            run_chunks(None)
        else:
            def write(tmp: Path) -> None:
                out = np.lib.format.open_memmap(tmp, mode="w+", dtype=np.float32, shape=(rows, spec.act_dim))
                run_chunks(out)
                out.flush()
                del out
            atomic_write(output, write)
    finally:
        if bar is not None:
            bar.close()
    seconds = time.perf_counter() - t0
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    ctx.header(f"file batch ({path.name}: {rows:,} rows, chunk={chunk:,})")
    ctx.say(f"  first row actions[:6] = {fmt(summary['first'][:6])}")
    ctx.say(f"  output range = [{summary['min']:.4f}, {summary['max']:.4f}]")
    ctx.say(f"  time = {seconds:.3f} s | throughput = {rows / seconds:,.0f} observations/s | peak RSS = {peak_mb:.0f} MB")
    ctx.say(f"  written: {output.resolve()}" if output else "  (no --output: actions not saved)")
    ok = -1.0 <= summary["min"] <= summary["max"] <= 1.0
    return ({"rows": rows, "chunk": chunk, "output": str(output) if output else None, "seconds": seconds,
             "throughput_per_s": rows / seconds, "peak_rss_mb": peak_mb, "first_action": floats(summary["first"]),
             **ctx.base()}, ok)


def compare(test: np.ndarray, ref: np.ndarray) -> dict:
    diff = np.abs(test.astype(np.float64) - ref.astype(np.float64))
    rel = diff / np.maximum(np.abs(ref.astype(np.float64)), 1e-6)
    return {"cos": cosine(test, ref), "max_abs_err": float(diff.max()), "mean_abs_err": float(diff.mean()),
            "max_rel_err": float(rel.max()),
            "bitwise_equal_ratio": float(np.mean(test.astype(np.float32) == ref.astype(np.float32)))}


def mode_precision(ctx: Context):
    """The chosen device/dtype/engine against a float64 CPU reference computed from the checkpoint."""
    spec, n = ctx.spec, ctx.args.samples
    obs = random_obs(ctx.args.seed, spec.obs_dim, n)
    reference = deterministic_actions(reference_mu(spec, obs))
    test = ctx.engine.deterministic(obs)
    same_as_test = ctx.engine_name == "torch" and ctx.device.type == "cpu" and ctx.args.dtype == "float32"
    cpu32 = test if same_as_test else TorchEngine(spec, resolve_device("cpu"), "float32").deterministic(obs)
    vs_ref, vs_cpu = compare(test, reference), compare(test, cpu32)
    passed = vs_ref["cos"] >= 0.999 and vs_ref["max_abs_err"] < ctx.args.tol
    ctx.header("precision against a float64 CPU reference")
    ctx.say(f"  samples = {n} (normal observations, RandomState({ctx.args.seed}))")
    ctx.say(f"  vs float64: cos = {vs_ref['cos']:.8f} | max_abs_err = {vs_ref['max_abs_err']:.3e} | "
            f"max_rel_err = {vs_ref['max_rel_err']:.3e} | bitwise equal (after float32 rounding) = "
            f"{vs_ref['bitwise_equal_ratio']:.2%}")
    ctx.say(f"  vs CPU float32 (torch): cos = {vs_cpu['cos']:.8f} | max_abs_err = {vs_cpu['max_abs_err']:.3e} | "
            f"bitwise equal = {vs_cpu['bitwise_equal_ratio']:.2%}")
    ctx.say(f"  holds (cos >= 0.999 and max_abs_err < {ctx.args.tol}): {'yes' if passed else 'NO'}")
    return ({"reference": "float64 cpu", **{k: vs_ref[k] for k in ("cos", "max_abs_err", "max_rel_err",
                                                                      "bitwise_equal_ratio")},
             "vs_cpu_float32": vs_cpu, "samples": n, "tol": ctx.args.tol, "passed": passed, **ctx.base()}, passed)


def checkpoint_onnx(ctx: Context) -> Path:
    """The ONNX that belongs to the chosen checkpoint: --onnx, <Behavior>-<step>.onnx beside it,
    or <Behavior>.onnx for the final checkpoint only."""
    if ctx.args.onnx:
        path = Path(ctx.args.onnx)
        if not path.is_file():
            raise UsageError(f"--onnx {path}: no such file")
        return path
    spec, src = ctx.spec, ctx.source
    step = _step_of(spec.path.name, src.behavior or "") or spec.global_step
    beside = spec.path.parent / f"{src.behavior or spec.path.stem.rsplit('-', 1)[0]}-{step}.onnx"
    if step is not None and beside.is_file():
        return beside
    top = (src.model_dir / f"{src.behavior}.onnx") if src.model_dir and src.behavior else None
    if top and top.is_file() and step is not None and step == final_step(src.model_dir, src.behavior):
        return top
    raise UsageError(f"{spec.path.name}: no ONNX belongs to this checkpoint (looked for {beside.name}"
                     f"{' and the final ' + top.name if top else ''}); pass --onnx FILE")


def mode_onnx_compare(ctx: Context):
    """The rebuilt policy against the ML-Agents ONNX of the same checkpoint (onnxruntime)."""
    spec, rows = ctx.spec, ctx.args.batch
    onnx_path = checkpoint_onnx(ctx)
    session = mlagents_onnx_session(onnx_path)
    declared = session.get_inputs()[0].shape
    ctx.header(f"ONNX cross-check (batch={rows}, seed={ctx.args.seed}) against {onnx_path.name}")

    def not_this_policy(why: str):
        ctx.say(f"  {onnx_path.name} {why}: not this policy")
        return {"reference": str(onnx_path), "max_abs_err": None, "mean_abs_err": None, "cos": None,
                "passed": False, **ctx.base()}, False

    if len(declared) != 2 or declared[1] != spec.obs_dim:
        return not_this_policy(f"takes obs_0 {declared}, the checkpoint {spec.obs_dim} observations")
    obs = random_obs(ctx.args.seed, spec.obs_dim, rows)
    reference = run_mlagents_onnx(session, obs)
    test = ctx.engine.deterministic(obs)
    if reference.shape != test.shape:
        return not_this_policy(f"gives {list(reference.shape)} actions, the checkpoint {list(test.shape)}")
    stats = compare(test, reference)
    passed = stats["max_abs_err"] < 1e-4 and stats["cos"] >= 0.999999
    ctx.say(f"  ML-Agents ONNX deterministic[0][:6] = {fmt(reference[0, :6])}")
    ctx.say(f"  rebuilt policy deterministic[0][:6] = {fmt(test[0, :6])}")
    ctx.say(f"  max_abs_err = {stats['max_abs_err']:.3e} | mean_abs_err = {stats['mean_abs_err']:.3e} | cos = {stats['cos']:.8f}")
    ctx.say(f"  holds (max_abs_err < 1e-4 and cos >= 0.999999): {'yes' if passed else 'NO'}")
    return {"reference": str(onnx_path), "max_abs_err": stats["max_abs_err"], "mean_abs_err": stats["mean_abs_err"],
            "cos": stats["cos"], "passed": passed, **ctx.base()}, passed


def mode_export_onnx(ctx: Context):
    """Write the rebuilt policy as ONNX with ML-Agents' interface, verified before it is written."""
    import onnx
    if not ctx.args.output:
        DEFAULT_EXPORT.parent.mkdir(exist_ok=True)  # e.g. inference.py copied alone onto a host
    output = check_output_path(Path(ctx.args.output or DEFAULT_EXPORT), (".onnx",))
    spec = ctx.spec
    model = build_onnx(spec, interface="mlagents")
    obs = random_obs(ctx.args.seed, spec.obs_dim, 64)
    exported = run_mlagents_onnx(onnx_session(model, tuned=False), obs)
    try:
        reference_path = checkpoint_onnx(ctx)
        reference = run_mlagents_onnx(mlagents_onnx_session(reference_path), obs)
        reference_name, limit = str(reference_path), 1e-5  # the project's parity bar with ML-Agents' ONNX
    except UsageError:  # no ML-Agents ONNX beside the checkpoint: hold it to the float64 rebuild
        reference = deterministic_actions(reference_mu(spec, obs)).astype(np.float32)
        reference_name, limit = "float64 rebuild (no ML-Agents ONNX for this checkpoint)", 1e-5
    if reference.shape != exported.shape:
        raise CheckFailed(f"{reference_name} gives {list(reference.shape)}, the export {list(exported.shape)}")
    max_abs = float(np.abs(exported.astype(np.float64) - reference).max())
    identical = bool(np.array_equal(exported, reference))
    passed = max_abs <= limit
    ctx.say("===== export the rebuilt policy as ONNX (ML-Agents interface, opset 9) =====")
    ctx.say(f"  inputs  = {[i.name for i in model.graph.input]} | outputs = {[o.name for o in model.graph.output]}")
    ctx.say(f"  vs {reference_name}: max_abs_err = {max_abs:.3e} | bit-identical = {'yes' if identical else 'no'}")
    if passed:
        atomic_write(output, lambda tmp: onnx.save(model, str(tmp)))
        ctx.say(f"  written: {output.resolve()}")
    else:
        ctx.say(f"  NOT written: max_abs_err above {limit:g}")
    return {"path": str(output.resolve()) if passed else None, "max_abs_err_vs_reference": max_abs,
            "bit_identical": identical, "reference": reference_name, **ctx.base()}, passed


def step_action(engine, obs: np.ndarray, z: Optional[np.ndarray]) -> np.ndarray:
    """One control-loop step: the action for one observation, sampled with noise z unless z is None."""
    return engine.deterministic(obs[None])[0] if z is None else engine.sample(obs[None], z[None])[1][0]


def action_sequence(ctx: Context, seed: int, steps: int, deterministic: bool) -> np.ndarray:
    """One observation per step (RandomState(seed).randn(steps, obs_dim)) and one noise draw
    per step (noise_sequence); step 0 equals `sample --seed S`."""
    spec, engine = ctx.spec, ctx.engine
    obs = random_obs(seed, spec.obs_dim, steps)
    noise = None if deterministic else noise_sequence(seed, steps, spec.act_dim)
    out = np.empty((steps, spec.act_dim), np.float32)
    for t in range(steps):
        out[t] = step_action(engine, obs[t], None if noise is None else noise[t])
    return out


def mode_fingerprint(ctx: Context):
    """sha256 of a seeded action sequence, computed twice in this process."""
    a = ctx.args
    runs = [action_sequence(ctx, a.seed, a.steps, a.deterministic) for _ in range(2)]
    digests = [hashlib.sha256(np.ascontiguousarray(r, np.float32).tobytes()).hexdigest() for r in runs]
    identical = digests[0] == digests[1] and bool(np.array_equal(runs[0], runs[1]))
    ctx.header(f"action-sequence fingerprint (seed={a.seed}, steps={a.steps}, deterministic={a.deterministic})")
    ctx.say(f"  run1 first action[:6] = {fmt(runs[0][0, :6])}")
    ctx.say(f"  run2 first action[:6] = {fmt(runs[1][0, :6])}")
    ctx.say(f"  runs identical        = {'yes' if identical else 'NO'}")
    ctx.say(f"  sha256(actions)       = {digests[0]}")
    return ({"sha256": digests[0], "identical": identical, "first_action": floats(runs[0][0]), "steps": a.steps,
             "seed": a.seed, "deterministic": a.deterministic, **ctx.base()}, identical and _action_range_ok(runs[0]))


def mode_stats(ctx: Context):
    """Closed-loop rollouts on a SYNTHETIC dynamics (not Huggy's environment, which needs Unity):
    obs' = 0.9 * obs + 0.5 * tile(action) + 0.1 * noise, noise from RandomState(seed + r)."""
    a, spec, engine = ctx.args, ctx.spec, ctx.engine
    reps = -(-spec.obs_dim // spec.act_dim)
    rollouts = []
    ctx.header(f"closed-loop rollouts on synthetic dynamics (rollouts={a.rollouts}, steps={a.steps}, first seed={a.seed})")
    for r in range(a.rollouts):
        rng = np.random.RandomState(a.seed + r)
        obs = rng.randn(spec.obs_dim).astype(np.float32)
        noise = None if a.deterministic else noise_sequence(a.seed + r, a.steps, spec.act_dim)
        actions, times = np.empty((a.steps, spec.act_dim), np.float32), []
        for t in range(a.steps):
            t0 = time.perf_counter()
            act = step_action(engine, obs, None if noise is None else noise[t])
            times.append(time.perf_counter() - t0)
            actions[t] = act
            feedback = np.tile(act, reps)[: spec.obs_dim]
            obs = (0.9 * obs + 0.5 * feedback + 0.1 * rng.randn(spec.obs_dim)).astype(np.float32)
        row = {"rollout": r, "steps": a.steps, "mean_abs_action": float(np.abs(actions).mean()),
               "max_abs_action": float(np.abs(actions).max()), "all_in_range": _action_range_ok(actions),
               "mean_step_ms": float(np.mean(times) * 1e3)}
        rollouts.append(row)
        ctx.say(f"  rollout[{r:02d}] steps={a.steps:4d} | mean|a|={row['mean_abs_action']:.4f} | "
                f"max|a|={row['max_abs_action']:.4f} | in[-1,1]={row['all_in_range']} | avg={row['mean_step_ms']:.4f}ms")
    all_in = all(r["all_in_range"] for r in rollouts)
    mean_ms = float(np.mean([r["mean_step_ms"] for r in rollouts]))
    ctx.say(f"  -> all actions in [-1, 1]: {'yes' if all_in else 'NO'} | mean step time {mean_ms:.4f} ms")
    ctx.say("  (synthetic dynamics for a stability and range check, not Huggy's Unity environment)")
    return {"rollouts": rollouts, "all_in_range": all_in, "mean_step_ms": mean_ms,
            "dynamics": "synthetic: obs' = 0.9*obs + 0.5*tile(action) + 0.1*N(0,1)", **ctx.base()}, all_in


def percentiles(times_ms: list[float]) -> dict:
    t = np.asarray(times_ms)
    return {"avg_ms": float(t.mean()), "p50_ms": float(np.percentile(t, 50)), "p95_ms": float(np.percentile(t, 95)),
            "p99_ms": float(np.percentile(t, 99)), "max_ms": float(t.max())}


def mode_benchmark(ctx: Context):
    """Latency of one control-loop call (host numpy in, host actions out, device synchronised),
    measured side by side with a bare onnxruntime session on the same policy, interleaved."""
    import importlib.util
    a, spec = ctx.args, ctx.spec
    check_batch_fits(a.batch, spec)
    obs = random_obs(a.seed, spec.obs_dim, a.batch)
    engine, warmup = ctx.engine, max(20, a.runs // 10)
    contenders = {"engine": lambda: engine.deterministic(obs)}
    bare_name = None
    if importlib.util.find_spec("onnxruntime") and importlib.util.find_spec("onnx"):
        try:
            bare_path = checkpoint_onnx(ctx)
            bare, bare_name = mlagents_onnx_session(bare_path), bare_path.name
        except UsageError:
            bare, bare_name = onnx_session(build_onnx(spec, "mlagents"), tuned=False), "export of this checkpoint"
        bare_run = bare.run
        feed = {"obs_0": obs}
        contenders["onnxruntime"] = lambda: bare_run(["deterministic_continuous_actions"], feed)
    times = {k: [] for k in contenders}
    for fn in contenders.values():
        for _ in range(warmup):
            fn()
    synchronize(ctx.device)  # (each timed call ends by copying actions to the host, which waits too)
    block = 5 if a.batch < 256 else 2  # short alternating blocks: both see the same noise
    done = 0
    while done < a.runs:  # alternate blocks so that both see the same machine noise
        n = min(block, a.runs - done)
        for key, fn in contenders.items():
            record = times[key].append
            for _ in range(n):
                t0 = time.perf_counter()
                fn()
                record((time.perf_counter() - t0) * 1e3)
        done += n
    ours = percentiles(times["engine"])
    result = {"runs": a.runs, "warmup": warmup, "batch": a.batch, **ours,
              "throughput_per_s": a.batch / (ours["avg_ms"] / 1e3), **ctx.base(),
              "onnxruntime_p50_ms": None, "ratio_to_onnxruntime": None, "throughput_ratio_to_onnxruntime": None}
    ctx.header(f"benchmark (runs={a.runs}, warmup={warmup}, batch={a.batch})")
    ctx.say(f"  avg = {ours['avg_ms']:.4f} ms | p50 = {ours['p50_ms']:.4f} ms | p95 = {ours['p95_ms']:.4f} ms | "
            f"p99 = {ours['p99_ms']:.4f} ms | max = {ours['max_ms']:.4f} ms")
    ctx.say(f"  throughput = {result['throughput_per_s']:,.0f} observations/s")
    if "onnxruntime" in times:
        bare = percentiles(times["onnxruntime"])
        result.update(onnxruntime_p50_ms=bare["p50_ms"], onnxruntime_avg_ms=bare["avg_ms"],
                      onnxruntime_throughput_per_s=a.batch / (bare["avg_ms"] / 1e3),
                      ratio_to_onnxruntime=ours["p50_ms"] / bare["p50_ms"],
                      throughput_ratio_to_onnxruntime=bare["avg_ms"] / ours["avg_ms"], onnxruntime_model=bare_name)
        ctx.say(f"  bare onnxruntime ({bare_name}, default session, same run): p50 = {bare['p50_ms']:.4f} ms | "
                f"throughput = {result['onnxruntime_throughput_per_s']:,.0f} observations/s")
        ctx.say(f"  p50 ratio to onnxruntime = {result['ratio_to_onnxruntime']:.3f} (<= 1 is as fast or faster) | "
                f"throughput ratio = {result['throughput_ratio_to_onnxruntime']:.3f} (>= 1 is as fast or faster)")
    else:
        ctx.say("  onnxruntime not installed: no side-by-side figure")
    if a.plot:
        plot_latencies(Path(a.plot), times, a)
        ctx.say(f"  plot written: {Path(a.plot).resolve()}")
    return result, True


def plot_latencies(path: Path, times: dict, args) -> None:
    check_output_path(path, (".png",))
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise UsageError("--plot needs matplotlib (pip install matplotlib)")
    fig, ax = plt.subplots(figsize=(7, 4))
    for key, values in times.items():
        ax.hist(values, bins=60, alpha=0.6, label=f"{key} (p50 {np.percentile(values, 50):.4f} ms)")
    ax.set_xlabel("latency per call (ms)")
    ax.set_ylabel("calls")
    ax.set_title(f"batch={args.batch}, runs={args.runs}, device={args.device}, dtype={args.dtype}")
    ax.legend()
    fig.tight_layout()
    atomic_write(path, lambda tmp: fig.savefig(tmp, format="png"))


def mode_stream(ctx: Context):
    """JSON lines on stdin -> JSON lines on stdout, one answer per line, flushed at once.
    In: {"obs": [...] | [[...], ...], "id": any, "stochastic": bool, "seed": int}.
    Out: {"id": ..., "actions": [...]} or {"id": ..., "error": "..."}."""
    spec, engine = ctx.spec, ctx.engine
    read, write, flush = sys.stdin.buffer.readline, sys.stdout.write, sys.stdout.flush
    dumps, loads = json.dumps, json.loads
    lines = errors = 0
    latencies = []
    clock = time.perf_counter
    with np.errstate(over="ignore"):  # an observation beyond float32 becomes inf, answered with an error
        while True:
            raw = read()
            if not raw:
                break
            if not raw.strip():
                continue
            t0 = clock()
            lines += 1
            ident = None
            try:
                try:
                    msg = loads(raw)
                except ValueError:
                    raise UsageError("line is not JSON")
                if not isinstance(msg, dict):
                    raise UsageError('expected an object like {"obs": [...]}')
                ident = msg.get("id")
                obs = msg.get("obs")
                if not isinstance(obs, list) or not obs:
                    raise UsageError(f'"obs" must be a list of {spec.obs_dim} numbers or a list of such lists')
                batch = isinstance(obs[0], list)
                for row in obs if batch else (obs,):  # JSON numbers only: no strings, booleans or null
                    if type(row) is not list or not all(type(v) is float or type(v) is int for v in row):
                        raise UsageError(f'"obs" must hold numbers only, {spec.obs_dim} per row')
                try:
                    array = np.asarray(obs if batch else [obs], dtype=np.float32)  # beyond float32 -> inf
                except (ValueError, TypeError, OverflowError):
                    raise UsageError(f'"obs" must hold numbers only, {spec.obs_dim} per row')
                if array.ndim != 2 or array.shape[1] != spec.obs_dim:
                    raise UsageError(f'"obs": expected {spec.obs_dim} numbers per row, got shape {list(array.shape)}')
                if not np.isfinite(array).all():
                    raise UsageError('"obs" holds nan, inf or values beyond float32')
                if msg.get("stochastic"):
                    seed = msg.get("seed", 0)
                    if not isinstance(seed, int) or isinstance(seed, bool) or not 0 <= seed < 2**63:
                        raise UsageError('"seed" must be a non-negative integer')
                    actions = engine.sample(array, draw_noise(seed, len(array), spec.act_dim))[1]
                else:
                    actions = engine.deterministic(array)
                answer = {"id": ident, "actions": actions.tolist() if batch else actions[0].tolist()}
            except UsageError as exc:
                errors += 1
                answer = {"id": ident, "error": str(exc)}
            write(dumps(answer) + "\n")
            flush()
            latencies.append((clock() - t0) * 1e3)
    if ctx.args.stats:
        p = percentiles(latencies) if latencies else {"p50_ms": float("nan"), "p99_ms": float("nan")}
        print(f"[stream] lines={lines} errors={errors} p50={p['p50_ms']:.4f}ms p99={p['p99_ms']:.4f}ms "
              f"engine={ctx.engine_name} device={ctx.device}", file=sys.stderr)
    return None, True


MODES: dict[str, Callable] = {
    "info": mode_info,
    "checkpoints": mode_checkpoints,
    "action": mode_action,
    "sample": mode_sample,
    "batch": mode_batch,
    "precision": mode_precision,
    "onnx-compare": mode_onnx_compare,
    "export-onnx": mode_export_onnx,
    "fingerprint": mode_fingerprint,
    "stats": mode_stats,
    "benchmark": mode_benchmark,
    "stream": mode_stream,
}


# =========================================================================================
# Command line
# =========================================================================================

class OneLineParser(argparse.ArgumentParser):
    def error(self, message: str):
        raise UsageError(f"{message} (see --help)")


def whole_number(low: int, high: Optional[int] = None) -> Callable[[str], int]:
    """An argparse type: a whole number in [low, high)."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number")
        if value < low or (high is not None and value >= high):
            raise argparse.ArgumentTypeError(f"{value} must be at least {low}" if high is None else
                                             f"{value} must be between {low} and {high - 1}")
        return value
    return parse


positive_int = whole_number(1)
seed_int = whole_number(0, 2**32)  # what np.random.RandomState accepts


def positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number")
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"{text} must be a positive number")
    return value


def build_parser() -> argparse.ArgumentParser:
    p = OneLineParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter,
                      epilog="Modes: " + ", ".join(MODES) + ". README.md shows an example of each.")
    p.add_argument("--mode", choices=list(MODES), default="info", help="what to do (default: info)")
    src = p.add_argument_group("model (first that applies: --checkpoint, --model-dir, $HUGGY_MODEL_DIR, "
                               "--model on the Hub, bundled sample)")
    src.add_argument("--checkpoint", help="an ML-Agents checkpoint file, e.g. Huggy/Huggy-2000049.pt")
    src.add_argument("--model-dir", help="a Hugging Face ML-Agents folder (<Behavior>.onnx, <Behavior>/*.pt, run_logs/)")
    src.add_argument("--model", metavar="REPO_ID", default=None,
                     help=f"Hub repo id (default {DEFAULT_REPO}; offline or unreachable -> bundled sample)")
    src.add_argument("--expect-sha256", metavar="HEX", help="refuse a checkpoint whose sha256 differs (pin a file)")
    run = p.add_argument_group("device and precision")
    run.add_argument("--device", default="auto", help="auto (npu, else cuda, else cpu) | cpu | cuda[:N] | npu[:N]")
    run.add_argument("--dtype", choices=DTYPES, default="float32",
                     help="MLP precision; the normalizer stays float32 (default float32, recommended)")
    run.add_argument("--engine", choices=("auto", "torch", "onnxruntime"), default="auto",
                     help="auto: onnxruntime on CPU float32, torch elsewhere (CUDA graphs on GPUs)")
    obs = p.add_argument_group("observations")
    obs.add_argument("--obs", default="random",
                     help="random | zeros | ones | ones_neg | boundary | <number> | <obs_dim comma-separated numbers>")
    obs.add_argument("--seed", type=seed_int, default=0,
                     help="RandomState(seed) for observations, torch.Generator(seed) for sampling noise (default 0)")
    obs.add_argument("--batch", type=positive_int, default=None,
                     help="rows per call (batch: 32, onnx-compare: 64, benchmark: 1)")
    obs.add_argument("--obs-file", help="batch mode: .npy (memory-mapped), .npz or .csv of [rows, obs_dim]")
    obs.add_argument("--chunk", type=positive_int, default=16384, help="rows per call with --obs-file (default 16384)")
    obs.add_argument("--output", help="batch: .npy for the actions; export-onnx: .onnx (default assets/huggy_rebuilt.onnx)")
    obs.add_argument("--progress", action="store_true", help="show the --obs-file progress bar even when stderr is not a terminal")
    chk = p.add_argument_group("checks and measurements")
    chk.add_argument("--samples", type=positive_int, default=100, help="precision: observations compared (default 100)")
    chk.add_argument("--tol", type=positive_float, default=0.01, help="precision: max abs error allowed (default 0.01)")
    chk.add_argument("--onnx", help="onnx-compare/export-onnx/benchmark: the ML-Agents ONNX to compare with (default: the checkpoint's own)")
    chk.add_argument("--steps", type=positive_int, default=None, help="fingerprint (64) / stats (50): steps")
    chk.add_argument("--rollouts", type=positive_int, default=5, help="stats: closed-loop rollouts (default 5)")
    chk.add_argument("--deterministic", action="store_true", help="fingerprint/stats: deterministic actions, no noise")
    chk.add_argument("--runs", type=positive_int, default=200, help="benchmark: timed calls (default 200)")
    chk.add_argument("--plot", metavar="FILE.png", help="benchmark: draw the latency distribution (needs matplotlib)")
    chk.add_argument("--stats", action="store_true", help="stream: print line count, errors and latency to stderr at the end")
    p.add_argument("--json", action="store_true", help="print exactly one JSON object on stdout instead of text")
    return p


def glue_option_values(argv: list[str], options=("--obs",)) -> list[str]:
    """Let `--obs -0.5` and `--obs -2.0,-1.93,...` work without '=' (argparse would take a
    leading minus for an option)."""
    out, i = [], 0
    while i < len(argv):
        if argv[i] in options and i + 1 < len(argv):
            out.append(f"{argv[i]}={argv[i + 1]}")
            i += 2
        else:
            out.append(argv[i])
            i += 1
    return out


def parse_args(argv: list[str]) -> argparse.Namespace:
    args = build_parser().parse_args(glue_option_values(argv))
    defaults = {"batch": 64 if args.mode == "onnx-compare" else 1 if args.mode == "benchmark" else 32,
                "steps": 50 if args.mode == "stats" else 64}
    for name, value in defaults.items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    if args.expect_sha256 and not re.fullmatch(r"[0-9a-fA-F]{64}", args.expect_sha256.strip()):
        raise UsageError("--expect-sha256: expected 64 hexadecimal digits")
    if args.mode == "stream" and args.json:
        raise UsageError("--json does not apply to stream mode (every line is JSON already)")
    for option, modes in (("output", ("batch", "export-onnx")), ("obs_file", ("batch",)), ("plot", ("benchmark",)),
                          ("onnx", ("onnx-compare", "export-onnx", "benchmark"))):
        if getattr(args, option) and args.mode not in modes:
            raise UsageError(f"--{option.replace('_', '-')} applies to --mode {' / '.join(modes)}, not {args.mode}")
    return args


def main(argv: Optional[list[str]] = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    try:
        args = parse_args(argv)
        ctx = Context(args)
        result, held = MODES[args.mode](ctx)
    except UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except CheckFailed as exc:
        print(f"FAILED: {exc}", file=sys.stderr)
        return 1
    except ModuleNotFoundError as exc:  # e.g. torch on a fresh machine
        print(f"error: the Python package '{exc.name}' is not installed; run: pip install -r requirements.txt",
              file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        with contextlib.suppress(OSError):  # the reader went away: nothing left to say
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    if result is None:  # stream mode answers line by line
        return 0
    if args.json:
        print(json.dumps({"mode": args.mode, "passed": held, **result}))
    else:
        print("SUCCESS" if held else "FAILED: the check above did not hold")
    return 0 if held else 1


if __name__ == "__main__":
    sys.exit(main())
