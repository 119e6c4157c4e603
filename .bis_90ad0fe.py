#!/usr/bin/env python3
"""Run trained Unity ML-Agents policies outside Unity: CPU, CUDA or Ascend NPU.

Every policy kind ML-Agents 1.x trains: one or several vector inputs (normalised or not),
cameras and grid sensors (the five visual encoders), buffer sensors (entity attention),
goal signals (hypernetwork bodies), LSTM memory; continuous, discrete (masked branches) and
hybrid actions; PPO, SAC, POCA and shared-critic checkpoints. The first policy was Huggy the
Dog (PaulVialard/ppo-Huggy), the bundled default. Numbers are checked against the ONNX file
ML-Agents writes beside each checkpoint.

    python inference.py --mode info                      # offline, bundled sample
    python inference.py --mode action --obs random --seed 0
    python inference.py --mode onnx-compare --model-dir path/to/ml-agents-run

    import inference                                     # the same policy from Python (docs/python-api.md)
    policy = inference.load("path/to/ml-agents-run")     # or a .pt, or <Behavior>.onnx alone
    out = policy.act(observations, action_masks=None)    # continuous_actions, discrete_actions, memory
    actions = policy.get_action(decision_steps)          # mlagents_envs: an ActionTuple for env.set_actions

Sections, top to bottom: finding and reading checkpoints -> ML-Agents' modules (mirrored
from Unity ML-Agents 1.1.0, Apache-2.0) -> building a policy from a checkpoint -> export as
ML-Agents does -> policies from an ML-Agents ONNX alone -> devices and engines -> the policy
(Python API) -> inputs -> output helpers -> modes (one function each, found through the MODES
table) -> command line.

Exit codes: 0 success, 1 a check did not hold, 2 bad input, usage or environment (one line
on stderr), 128 + N after signal N.
"""
from __future__ import annotations

__version__ = "0.9.0"  # pyproject.toml reads it (setuptools, statically)

import argparse
import collections
import contextlib
import copy
import hashlib
import io
import itertools
import json
import math
import os
import re
import sys
import tempfile
import time
import warnings
import zipfile
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional, Sequence, Union


def _stopped_while_starting(signum, frame) -> None:
    """Ctrl-C (or SIGTERM, SIGHUP) while numpy and torch import (~2 s): nothing to clean up
    yet; one line and 128 + N, not a traceback from inside an import."""
    import signal
    os.write(2, b"interrupted\n" if signum == signal.SIGINT else f"interrupted by {signal.Signals(signum).name}\n".encode())
    os._exit(128 + signum)


if __name__ == "__main__":  # (main() installs the handlers of a running command)
    import signal
    for _name in ("SIGINT", "SIGTERM", "SIGHUP"):
        with contextlib.suppress(AttributeError, ValueError, OSError):
            signal.signal(getattr(signal, _name), _stopped_while_starting)

import numpy as np

PROCESS_T0 = time.perf_counter()  # fallback origin for "time to first action"
HERE = Path(__file__).resolve().parent
BUNDLED_MODEL_DIR = HERE / "assets" / "ppo-Huggy-sample"
DEFAULT_REPO = "PaulVialard/ppo-Huggy"
DEFAULT_EXPORT = HERE / "assets" / "huggy_rebuilt.onnx"  # beside this file, as the original NPU adaptation writes it
BUNDLED_NOTE = ("bundled sample: an ML-Agents-format checkpoint with Huggy's architecture, "
                "written by the ML-Agents trainer code, NOT the trained Huggy weights")

try:  # the package itself: main() says how to install it when it is missing
    import torch
    from torch import nn
    Module = nn.Module
except ImportError:  # pragma: no cover - exercised by a fresh machine only
    torch = nn = None
    Module = object

GoalInput = Union[int, Sequence[int], None]  # load(goal_input=...): one input index or several


class UsageError(Exception):
    """Bad input or usage: one line on stderr, exit code 2."""


class CheckFailed(Exception):
    """A check did not hold: exit code 1."""


class NotThisPolicy(CheckFailed):
    """An ONNX that cannot be this checkpoint's (other inputs, other layer shapes): exit code 1,
    never read as "no ONNX" nor blamed on the checkpoint."""


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
    """The highest-step <Behavior>-<step>.pt, else checkpoint.pt (the original NPU adaptation loads Huggy-2000049.pt)."""
    ckpts = list_checkpoints(model_dir, behavior)
    stepped = [p for p, s in ckpts if s is not None]
    if stepped:
        return stepped[-1]
    if ckpts:
        return ckpts[0][0]
    raise UsageError(f"{model_dir / behavior}: folder holds no checkpoint (.pt)")


STATUS_MAX_BYTES = 64 << 20  # a run's training_status.json is a few kB; refuse to parse a huge one
_STATUS_WARNED: set = set()


def _status_warning(path: Path, problem: str) -> dict:
    """Status files are advisory: say once (per file and process) why one is ignored, go on."""
    if str(path) not in _STATUS_WARNED:
        _STATUS_WARNED.add(str(path))
        with contextlib.suppress(Exception):  # a closed stderr must not stop the run
            print(f"[warn] {short_path(path)}: {problem}; ignored", file=sys.stderr)
    return {}


def _status_record(entry) -> Optional[dict]:
    """One ML-Agents checkpoint record, reduced to plain fields; None when it has another shape."""
    if not isinstance(entry, dict):
        return None
    steps, file_path = entry.get("steps"), entry.get("file_path", "")
    aux, reward = entry.get("auxillary_file_paths", []), entry.get("reward")  # (sic: ML-Agents' spelling)
    if aux is None:
        aux = []
    if steps is not None and (type(steps) is not int or steps < 0):
        return None
    if not isinstance(file_path, str) or not isinstance(aux, list) or not all(isinstance(f, str) for f in aux):
        return None
    if reward is not None and (type(reward) not in (int, float)):
        return None
    if reward is not None and not math.isfinite(reward):
        reward = None  # ML-Agents writes NaN for "no episode finished yet"
    return {"steps": steps, "file_path": file_path, "auxillary_file_paths": list(aux), "reward": reward}


def training_status(model_dir: Optional[Path], behavior: Optional[str]) -> dict:
    """run_logs/training_status.json for this behaviour, reduced to {"checkpoints": [record],
    "final_checkpoint": record} (records: steps, file_path, auxillary_file_paths, reward). The file
    is advisory: {} when absent; unreadable, huge, nested too deep or of another shape -> one
    "[warn] ... ignored" line on stderr and {}."""
    if not model_dir or not behavior:
        return {}
    path = Path(model_dir) / "run_logs" / "training_status.json"
    try:
        if not path.exists():
            return {}
        if path.stat().st_size > STATUS_MAX_BYTES:
            return _status_warning(path, f"larger than {STATUS_MAX_BYTES >> 20} MiB")
        data = json.loads(path.read_bytes())
    except RecursionError:
        return _status_warning(path, "nested too deeply")
    except OSError as exc:
        return _status_warning(path, f"cannot read ({exc.strerror or exc})")
    except (ValueError, MemoryError) as exc:  # not JSON, not UTF-8, an integer of 5000 digits
        return _status_warning(path, f"not JSON ({str(exc).splitlines()[0][:80] if str(exc) else type(exc).__name__})")
    if not isinstance(data, dict):
        return _status_warning(path, f"holds a {type(data).__name__}, expected an object")
    section = data.get(behavior)
    if section is None:
        return {}
    if not isinstance(section, dict):
        return _status_warning(path, f"'{behavior}' is a {type(section).__name__}, expected an object")
    out = {}
    records = section.get("checkpoints", [])
    if records is not None:
        if not isinstance(records, list):
            return _status_warning(path, f"'{behavior}.checkpoints' is a {type(records).__name__}, expected a list")
        out["checkpoints"] = [_status_record(r) for r in records]
        if any(r is None for r in out["checkpoints"]):
            return _status_warning(path, f"'{behavior}.checkpoints' holds an entry of an unexpected shape")
    final = section.get("final_checkpoint")
    if final is not None:
        out["final_checkpoint"] = _status_record(final)
        if out["final_checkpoint"] is None:
            return _status_warning(path, f"'{behavior}.final_checkpoint' has an unexpected shape")
    return out


def status_entry(status: dict, ckpt: Path, step: Optional[int]) -> dict:
    """The training_status.json record of one checkpoint, matched by file name, then by step
    ({} when none matches; any shape of `status` is tolerated)."""
    records = status.get("checkpoints") if isinstance(status, dict) else None
    for entry in records if isinstance(records, list) else []:
        entry = _status_record(entry)
        if entry is None:
            continue
        files = [entry["file_path"]] + entry["auxillary_file_paths"]
        if any(Path(f).name == ckpt.name for f in files) or (step is not None and entry["steps"] == step):
            return entry
    return {}


def final_step(model_dir: Optional[Path], behavior: Optional[str]) -> Optional[int]:
    """The run's final step: training_status.json's final_checkpoint, else the highest file step."""
    final = training_status(model_dir, behavior).get("final_checkpoint")
    if isinstance(final, dict) and type(final.get("steps")) is int:
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


def _host_port(option: str, text: str, default_scheme: str = "https") -> tuple:
    """(scheme, host, port) of a URL from the environment; UsageError when it is not one."""
    from urllib.parse import urlparse
    try:
        url = urlparse(text if "://" in text else f"{default_scheme}://{text}")
        host, port = url.hostname, url.port  # (.port raises for a port out of range)
    except ValueError as exc:  # a port out of range, a broken IPv6 literal
        raise UsageError(f"{option} {text[:120]!r}: not a valid URL ({exc})")
    if not host:
        raise UsageError(f"{option} {text[:120]!r}: not a valid URL (no host)")
    return url.scheme, host, port or {"http": 80, "https": 443}.get(url.scheme, 1080)


def hub_endpoint() -> tuple:
    """(scheme, host, port) of $HF_ENDPOINT (default https://huggingface.co), checked before
    huggingface_hub, which raises a ValueError from deep inside on a malformed one."""
    return _host_port("HF_ENDPOINT", os.environ.get("HF_ENDPOINT") or "https://huggingface.co")


def hub_unreachable(timeout: float = 3.0) -> Optional[str]:
    """Why the Hub endpoint ($HF_ENDPOINT, default huggingface.co) cannot be reached, or None:
    a plain TCP connection, no HTTP, to the endpoint or to the proxy the environment puts in
    front of it (huggingface_hub would retry a dead one for ~25 s, a line on stderr each time)."""
    import socket
    import urllib.request
    scheme, host, port = hub_endpoint()
    proxies = urllib.request.getproxies_environment()
    proxy = proxies.get(scheme) or proxies.get("all")
    what = f"{host}:{port}"
    if proxy and not urllib.request.proxy_bypass_environment(host, proxies):
        _, host, port = _host_port("the proxy", proxy, "http")
        what = f"the proxy {host}:{port} (from the environment)"
    try:
        socket.create_connection((host, port), timeout=timeout).close()
        return None
    except OSError as exc:
        return f"{what} is unreachable ({exc.strerror or exc})"


def download_from_hub(repo_id: str) -> Path:
    """The repo's folder through huggingface_hub: its cache first, then the Hub (or HF_ENDPOINT's
    mirror) unless HF_HUB_OFFLINE is set. Raises UsageError with the reason when unavailable."""
    hub_endpoint()
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
    import logging
    hub_log = logging.getLogger("huggingface_hub")
    level = hub_log.level
    hub_log.setLevel(logging.ERROR)  # its "Retrying in 8s" lines (a proxy that answers, badly) would print beside ours
    try:
        files = HfApi().list_repo_files(repo_id)
        return Path(snapshot_download(repo_id, allow_patterns=pick_hub_files(files)))
    except Exception as exc:  # network, authentication, missing repo: all end the same way
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise UsageError(f"{repo_id}: could not download from the Hugging Face Hub ({reason[:200]})")
    finally:
        hub_log.setLevel(level)


def _path_kind(option: str, path: Path) -> Optional[str]:
    """'file', 'dir', 'other' or None (absent); any other failure (name too long, permission
    denied on a folder above, a symlink loop) is a UsageError naming the option and the reason."""
    import stat
    try:
        mode = os.stat(path).st_mode
    except (FileNotFoundError, NotADirectoryError):
        return None
    except (OSError, ValueError) as exc:  # ValueError: an embedded NUL byte
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise UsageError(f"{option} {short_path(path)}: {reason}")
    return "dir" if stat.S_ISDIR(mode) else "file" if stat.S_ISREG(mode) else "other"


def regular_file(option: str, path) -> Path:
    """`path` when it is a regular file; else a UsageError (never open a FIFO or a device: it may block)."""
    path = Path(path)
    kind = _path_kind(option, path)
    if kind != "file":
        raise UsageError(f"{option} {short_path(path)}: " + ("no such file" if kind is None else
                                                            "is a folder" if kind == "dir" else "not a regular file"))
    return path


def locate_model(checkpoint: Optional[str], model_dir: Optional[str], repo_id: Optional[str]) -> ModelSource:
    """--checkpoint, then --model-dir, then $HUGGY_MODEL_DIR, then the Hub, then the bundled sample.
    An empty option value is refused (never a silent fall-back to the sample); an empty
    $HUGGY_MODEL_DIR counts as unset."""
    for option, value, what in (("--checkpoint", checkpoint, "a checkpoint file"), ("--model-dir", model_dir, "a folder"),
                                ("--model", repo_id, f"a Hub repo id such as {DEFAULT_REPO}")):
        if value is not None and not str(value).strip():
            raise UsageError(f"{option}: empty value; give {what}")
    if checkpoint:
        path = Path(checkpoint)
        kind = _path_kind("--checkpoint", path)
        if kind == "dir":
            raise UsageError(f"--checkpoint {path}: is a folder; use --model-dir for a folder")
        if kind != "file":
            raise UsageError(f"--checkpoint {short_path(path)}: no such file" if kind is None else
                             f"--checkpoint {short_path(path)}: not a regular file")
        try:
            folder, behavior = path.resolve().parent.parent, path.resolve().parent.name
            if not list_checkpoints(folder, behavior):
                folder, behavior = None, None
        except OSError:  # the run folder around it cannot be listed: the file alone still loads
            folder, behavior = None, None
        return ModelSource(path, folder, behavior, "--checkpoint")
    for origin, value in (("--model-dir", model_dir), ("HUGGY_MODEL_DIR", os.environ.get("HUGGY_MODEL_DIR"))):
        if value:
            folder = Path(value)
            if _path_kind(origin, folder) != "dir":
                raise UsageError(f"{origin} {short_path(folder)}: no such folder")
            try:
                behavior = find_behavior(folder)
            except UsageError:  # a folder that holds only <Behavior>.onnx: the ONNX alone
                alone = sorted(folder.glob("*.onnx"))
                if len(alone) > 1 and not any(folder.glob("*/*.pt")):
                    raise UsageError(f"{origin} {short_path(folder)}: no checkpoint, and several ONNX files "
                                     f"({', '.join(p.name for p in alone[:4])}); choose one with --onnx FILE.onnx")
                if len(alone) != 1 or any(folder.glob("*/*.pt")):
                    raise
                return onnx_alone_source(origin, alone[0], folder)
            return ModelSource(default_checkpoint(folder, behavior), folder, behavior, origin)
    try:
        folder = download_from_hub(repo_id or DEFAULT_REPO)
        behavior = find_behavior(folder)
        return ModelSource(default_checkpoint(folder, behavior), folder, behavior, f"hub:{repo_id or DEFAULT_REPO}")
    except UsageError as exc:
        if repo_id:  # the user asked for this repo: no silent substitute
            raise
        if not BUNDLED_MODEL_DIR.is_dir():  # installed with pip, or copied alone
            raise UsageError(f"no model: {exc}; no bundled sample beside {short_path(HERE)}; pass --model-dir DIR")
        behavior = find_behavior(BUNDLED_MODEL_DIR)
        return ModelSource(default_checkpoint(BUNDLED_MODEL_DIR, behavior), BUNDLED_MODEL_DIR, behavior,
                           "bundled sample", f"{BUNDLED_NOTE} ({exc})")


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    try:
        with open(path, "rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                digest.update(block)
    except IsADirectoryError:
        raise UsageError(f"{short_path(path)}: is a folder, not a checkpoint file")
    except OSError as exc:  # permission denied, I/O error, name too long
        raise UsageError(f"{short_path(path)}: cannot read ({exc.strerror or exc})")
    return digest.hexdigest()


def check_sha256(path: Path, expected: Optional[str]) -> str:
    """The file's sha256; a UsageError when `expected` (--expect-sha256) is given and differs.
    Call it before the file is unpickled or listed as the one that will be used."""
    sha = file_sha256(path)
    want = expected.strip().lower() if expected else None
    if want and sha != want:
        raise UsageError(f"{short_path(path)}: sha256 is {sha}, not the expected {want}; refusing it")
    return sha


def read_checkpoint(path: Path) -> dict:
    """torch.load with weights_only=True: tensors and plain containers only, never code."""
    import pickle
    import torch
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            # Zip checkpoints (every torch.save since 1.6, so every ML-Agents one) are memory-mapped:
            # no tensor data is read or allocated before validate_tensors has looked at it.
            mmap = zipfile.is_zipfile(path)
            try:
                obj = torch.load(path, map_location="cpu", weights_only=True, mmap=mmap)
            except RuntimeError as exc:
                if not mmap or "mmap" not in str(exc).lower():
                    raise
                obj = torch.load(path, map_location="cpu", weights_only=True)  # a file system without mmap
            size = os.stat(path).st_size
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
    validate_tensors(obj, path, size)
    if not isinstance(obj, dict) or "Policy" not in obj or not isinstance(obj["Policy"], dict):
        raise UsageError(f"{path}: not an ML-Agents checkpoint (no 'Policy' state dict)")
    return obj


def validate_tensors(obj, path: Optional[Path] = None, max_storage_bytes: Optional[int] = None) -> None:
    """Refuse, before anything reads their data, tensors a trainer never writes: not dense
    (sparse, nested, quantized), not a plain dtype, not on the CPU, a storage larger than the
    file (`max_storage_bytes`), or more elements than their storage holds (stride-0 tricks that
    make 4 bytes look like 10^10 floats). Walks containers without recursion (any depth, cycles)."""
    import torch
    plain = {torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int8, torch.int16,
             torch.int32, torch.int64, torch.uint8, torch.bool}

    def bad(where: str, problem: str) -> UsageError:
        return UsageError(f"{short_path(path) + ': ' if path else ''}refused, nothing in it was run "
                          f"(tensor {where} {problem}); expected an ML-Agents .pt written by mlagents-learn")

    stack, seen, items = [("", obj)], set(), 0
    while stack:
        where, value = stack.pop()
        items += 1
        if items > 10_000_000:
            raise bad("", "in a structure of more than 10^7 items")
        if isinstance(value, torch.Tensor):
            where = repr(where[:80]) if where else "(top level)"
            if type(value) not in (torch.Tensor, torch.nn.Parameter):
                raise bad(where, f"is a {type(value).__name__}")
            if value.layout != torch.strided or value.is_nested:
                raise bad(where, f"is not dense ({str(value.layout).replace('torch.', '')})")
            if value.is_quantized or value.dtype not in plain:
                raise bad(where, f"has dtype {str(value.dtype).replace('torch.', '')}")
            if value.device.type != "cpu":
                raise bad(where, f"is on {value.device.type}")
            storage = value.untyped_storage().nbytes()
            if max_storage_bytes is not None and storage > max_storage_bytes:
                raise bad(where, f"declares a storage of {storage:,} bytes in a file of {max_storage_bytes:,}")
            if value.numel() and (value.numel() * value.element_size() > storage
                                  or value.storage_offset() * value.element_size() + value.element_size()
                                  + sum((n - 1) * s * value.element_size() for n, s in zip(value.shape, value.stride()))
                                  > storage):
                raise bad(where, f"declares {value.numel():,} elements over a storage of {storage:,} bytes")
            continue
        if isinstance(value, (dict, list, tuple, set, frozenset)):
            if id(value) in seen:
                continue
            seen.add(id(value))
            if isinstance(value, dict):
                for key, item in value.items():
                    name = key if isinstance(key, str) else repr(key)[:40]
                    stack.append((f"{where}.{name}" if where else name, item))
                    stack.append((where, key))
            else:
                stack.extend((where, item) for item in value)


def global_step(checkpoint: dict) -> Optional[int]:
    """The training step saved with a checkpoint ({"_GlobalSteps__global_step": tensor([600017])})."""
    step = checkpoint.get("global_step")
    if isinstance(step, dict):
        step = next(iter(step.values()), None)
    try:
        return int(step.reshape(-1)[0].item()) if hasattr(step, "reshape") else int(step) if step is not None else None
    except (TypeError, ValueError, IndexError, RuntimeError, OverflowError):  # NaN, inf, empty, text
        return None


# =========================================================================================
# ML-Agents' modules, under ML-Agents' own attribute names
#
# Mirrored from Unity ML-Agents 1.1.0, mlagents/trainers/torch_entities (encoders.py,
# layers.py, attention.py, conditioning.py, distributions.py, action_model.py, networks.py),
# Copyright Unity Technologies, Apache License 2.0. The attribute names ARE the checkpoint's
# state-dict keys, so a "Policy" state dict loads with load_state_dict(strict=True), and
# torch.onnx.export of SimpleActor writes the graph ML-Agents' ModelSerializer writes.
# Only inference is kept: no initialisers, no normaliser updates, no log-probabilities.
# =========================================================================================

NORMALIZER_CLIP = 5.0     # ML-Agents clamps normalized observations to [-5, 5]
ACTION_CLIP = 3.0         # ... and PPO/POCA continuous actions to [-3, 3], then divides by 3
ATTENTION_EMBEDDING = 128  # ObservationEncoder.ATTENTION_EMBEDDING_SIZE: fixed whatever hidden_units is
ENTITY_ABSENT = 0.01      # an entity row whose squared sum is below this is padding (get_zero_entities_mask)
MAX_ENTITIES = 4096       # a buffer sensor's largest entity count an ONNX may declare (attention is N x N per agent)


class Swish(Module):
    def forward(self, data):
        return torch.mul(data, torch.sigmoid(data))


class LayerNorm(Module):
    """No learned scale or shift; population variance; epsilon 1e-5."""
    def forward(self, layer_activations):
        mean = torch.mean(layer_activations, dim=-1, keepdim=True)
        var = torch.mean((layer_activations - mean) ** 2, dim=-1, keepdim=True)
        return (layer_activations - mean) / (torch.sqrt(var + 1e-5))


class LinearEncoder(Module):
    """num_layers x (Linear -> Swish), keys seq_layers.{0,2,4,...}."""
    def __init__(self, input_size: int, num_layers: int, hidden_size: int):
        super().__init__()
        layers = []
        for i in range(num_layers):
            layers += [nn.Linear(input_size if i == 0 else hidden_size, hidden_size), Swish()]
        self.seq_layers = nn.Sequential(*layers)

    def forward(self, input_tensor):
        return self.seq_layers(input_tensor)


class Normalizer(Module):
    """clamp((x - running_mean) / sqrt(running_variance / normalization_steps), -5, 5).
    running_variance is a running SUM of squared deviations (1e8 in Huggy): in float16 it
    overflows, so the engines keep this module float32 whatever --dtype says."""
    def __init__(self, vec_obs_size: int):
        super().__init__()
        self.register_buffer("normalization_steps", torch.tensor(1))
        self.register_buffer("running_mean", torch.zeros(vec_obs_size))
        self.register_buffer("running_variance", torch.ones(vec_obs_size))

    def forward(self, inputs):
        inputs = inputs.to(self.running_mean.dtype)
        return torch.clamp((inputs - self.running_mean)
                           / torch.sqrt(self.running_variance / self.normalization_steps),
                           -NORMALIZER_CLIP, NORMALIZER_CLIP)


class VectorInput(Module):
    def __init__(self, input_size: int, normalize: bool):
        super().__init__()
        self.normalizer = Normalizer(input_size) if normalize else None

    def forward(self, inputs):
        return self.normalizer(inputs) if self.normalizer is not None else inputs


def conv_side(side: int, kernel: int, stride: int = 1, padding: int = 0) -> int:
    return (side + 2 * padding - kernel) // stride + 1


def pool_side(side: int) -> int:
    return (side - 3) // 2 + 1


# Each visual encoder carries its geometry once: MIN_SIDE (ML-Agents' smallest image for it) and
# flat_size (the width of what its dense layer takes), used to build it and to read a checkpoint.

class _ConvEncoder(Module):
    """conv_layers (Conv2d -> LeakyReLU)* -> flatten (C, H, W order) -> dense (Linear -> LeakyReLU).
    Images are channel-first, as ML-Agents 1.1.0 feeds them (no permute)."""
    CONVS: tuple = ()  # (out channels, kernel, stride)
    MIN_SIDE = 1

    @classmethod
    def flat_size(cls, channels: int, height: int, width: int) -> int:
        for out, kernel, stride in cls.CONVS:
            height, width, channels = conv_side(height, kernel, stride), conv_side(width, kernel, stride), out
        return channels * height * width

    def __init__(self, height: int, width: int, initial_channels: int, output_size: int):
        super().__init__()
        layers, channels = [], initial_channels
        for out, kernel, stride in self.CONVS:
            layers += [nn.Conv2d(channels, out, [kernel, kernel], [stride, stride]), nn.LeakyReLU()]
            channels = out
        self.final_flat = self.flat_size(initial_channels, height, width)
        self.conv_layers = nn.Sequential(*layers)
        self.dense = nn.Sequential(nn.Linear(self.final_flat, output_size), nn.LeakyReLU())

    def forward(self, visual_obs):
        hidden = self.conv_layers(visual_obs)
        return self.dense(hidden.reshape([-1, self.final_flat]))


class SimpleVisualEncoder(_ConvEncoder):
    CONVS, MIN_SIDE = ((16, 8, 4), (32, 4, 2)), 20


class NatureVisualEncoder(_ConvEncoder):
    CONVS, MIN_SIDE = ((32, 8, 4), (64, 4, 2), (64, 3, 1)), 36


class SmallVisualEncoder(_ConvEncoder):  # vis_encode_type "match3"
    CONVS, MIN_SIDE = ((35, 3, 1), (144, 3, 1)), 5


class FullyConnectedVisualEncoder(Module):
    MIN_SIDE = 1

    @staticmethod
    def flat_size(channels: int, height: int, width: int) -> int:
        return channels * height * width

    def __init__(self, height: int, width: int, initial_channels: int, output_size: int):
        super().__init__()
        self.input_size = self.flat_size(initial_channels, height, width)
        self.dense = nn.Sequential(nn.Linear(self.input_size, output_size), nn.LeakyReLU())

    def forward(self, visual_obs):
        return self.dense(visual_obs.reshape(-1, self.input_size))


class ResNetBlock(Module):
    def __init__(self, channel: int):
        super().__init__()
        self.layers = nn.Sequential(Swish(), nn.Conv2d(channel, channel, [3, 3], [1, 1], padding=1),
                                    Swish(), nn.Conv2d(channel, channel, [3, 3], [1, 1], padding=1))

    def forward(self, input_tensor):
        return input_tensor + self.layers(input_tensor)


class ResNetVisualEncoder(Module):
    CHANNELS, MIN_SIDE = (16, 32, 32), 15

    @classmethod
    def flat_size(cls, channels: int, height: int, width: int) -> int:
        for _ in cls.CHANNELS:
            height, width = pool_side(height), pool_side(width)
        return cls.CHANNELS[-1] * height * width

    def __init__(self, height: int, width: int, initial_channels: int, output_size: int):
        super().__init__()
        layers, last = [], initial_channels
        for channel in self.CHANNELS:
            layers += [nn.Conv2d(last, channel, [3, 3], [1, 1], padding=1), nn.MaxPool2d([3, 3], [2, 2]),
                       ResNetBlock(channel), ResNetBlock(channel)]
            last = channel
        layers.append(Swish())
        self.final_flat_size = self.flat_size(initial_channels, height, width)
        self.dense = nn.Linear(self.final_flat_size, output_size)
        self.sequential = nn.Sequential(*layers)

    def forward(self, visual_obs):
        hidden = self.sequential(visual_obs)
        return torch.relu(self.dense(hidden.reshape(-1, self.final_flat_size)))


VISUAL_ENCODERS = {"simple": SimpleVisualEncoder, "nature_cnn": NatureVisualEncoder, "resnet": ResNetVisualEncoder,
                   "match3": SmallVisualEncoder, "fully_connected": FullyConnectedVisualEncoder}


def get_zero_entities_mask(entities: list):
    """1 for an absent entity row (squared sum < 0.01), 0 for a present one; [B, total rows]."""
    with torch.no_grad():
        return torch.cat([(torch.sum(ent ** 2, dim=2) < ENTITY_ABSENT).float() for ent in entities], dim=1)


class EntityEmbedding(Module):
    """Each entity row, with the agent's own encoding in front when there is one, through
    Linear -> Swish (self_ent_encoder)."""
    def __init__(self, entity_size: int, entity_num_max_elements: Optional[int], embedding_size: int):
        super().__init__()
        self.self_size = 0
        self.entity_size = entity_size
        self.entity_num_max_elements = entity_num_max_elements or -1
        self.embedding_size = embedding_size
        self.self_ent_encoder = LinearEncoder(entity_size, 1, embedding_size)

    def add_self_embedding(self, size: int) -> None:
        self.self_size = size
        self.self_ent_encoder = LinearEncoder(self.self_size + self.entity_size, 1, self.embedding_size)

    def forward(self, x_self, entities):
        if self.self_size > 0:
            expanded_self = x_self.reshape(-1, 1, self.self_size)
            expanded_self = torch.cat([expanded_self] * entities.shape[1], dim=1)
            entities = torch.cat([expanded_self, entities], dim=2)
        return self.self_ent_encoder(entities)


class MultiHeadAttention(Module):
    NEG_INF = -1e6

    def __init__(self, embedding_size: int, num_heads: int):
        super().__init__()
        self.n_heads, self.head_size, self.embedding_size = num_heads, embedding_size // num_heads, embedding_size

    def forward(self, query, key, value, n_q: int, n_k: int, key_mask):
        b = -1
        query = query.reshape(b, n_q, self.n_heads, self.head_size).permute([0, 2, 1, 3])
        key = key.reshape(b, n_k, self.n_heads, self.head_size).permute([0, 2, 1, 3]).permute([0, 1, 3, 2])
        qk = torch.matmul(query, key)  # (b, h, n_q, n_k)
        key_mask = key_mask.reshape(b, 1, 1, n_k)
        # scaled by the full embedding width (sqrt(128)), not the head width, as ML-Agents does
        qk = (1 - key_mask) * qk / (self.embedding_size ** 0.5) + key_mask * self.NEG_INF
        att = torch.softmax(qk, dim=3)
        value = value.reshape(b, n_k, self.n_heads, self.head_size).permute([0, 2, 1, 3])
        value_attention = torch.matmul(att, value).permute([0, 2, 1, 3])
        return value_attention.reshape(b, n_q, self.embedding_size), att


class ResidualSelfAttention(Module):
    EPSILON = 1e-7

    def __init__(self, embedding_size: int, entity_num_max_elements: Optional[int] = None, num_heads: int = 4):
        super().__init__()
        self.max_num_ent = entity_num_max_elements
        self.attention = MultiHeadAttention(embedding_size, num_heads)
        self.fc_q = nn.Linear(embedding_size, embedding_size)
        self.fc_k = nn.Linear(embedding_size, embedding_size)
        self.fc_v = nn.Linear(embedding_size, embedding_size)
        self.fc_out = nn.Linear(embedding_size, embedding_size)
        self.embedding_norm = LayerNorm()
        self.residual_norm = LayerNorm()

    def forward(self, inp, key_masks):
        inp = self.embedding_norm(inp)
        query, key, value = self.fc_q(inp), self.fc_k(inp), self.fc_v(inp)
        num_ent = inp.shape[1]
        output, _ = self.attention(query, key, value, num_ent, num_ent, key_masks)
        output = self.residual_norm(self.fc_out(output) + inp)  # the residual adds the normalised input
        numerator = torch.sum(output * (1 - key_masks).reshape(-1, num_ent, 1), dim=1)
        denominator = torch.sum(1 - key_masks, dim=1, keepdim=True) + self.EPSILON
        return numerator / denominator


class ObservationEncoder(Module):
    """One processor per input (keys processors.<i>), the entity attention block when there
    are buffer sensors (rsa, x_self_encoder), concatenated: [non-entity inputs..., attention]."""
    def __init__(self, inputs: list, h_size: int, normalize: bool):
        super().__init__()
        processors, sizes = [], []
        for spec in inputs:
            if spec.kind == "vector":
                processors.append(VectorInput(spec.shape[0], normalize))
                sizes.append(spec.shape[0])
            elif spec.kind == "visual":
                channels, height, width = spec.chw
                processors.append(VISUAL_ENCODERS[spec.encoder](height, width, channels, h_size))
                sizes.append(h_size)
            else:  # entities: (N, F)
                processors.append(EntityEmbedding(spec.shape[1], spec.shape[0], ATTENTION_EMBEDDING))
                sizes.append(0)
        self.processors = nn.ModuleList(processors)
        self.rsa, self.x_self_encoder = None, None
        if any(isinstance(p, EntityEmbedding) for p in processors):
            if sum(sizes):
                self.x_self_encoder = LinearEncoder(sum(sizes), 1, ATTENTION_EMBEDDING)
                for p in processors:
                    if isinstance(p, EntityEmbedding):
                        p.add_self_embedding(ATTENTION_EMBEDDING)
            self.rsa = ResidualSelfAttention(ATTENTION_EMBEDDING, sum(s.shape[0] for s in inputs if s.kind == "entities"))
        self.total_enc_size = sum(sizes) + (ATTENTION_EMBEDDING if self.rsa is not None else 0)
        self.goal_indices = [i for i, s in enumerate(inputs) if s.goal]
        self.channels_last = [s.channels_last for s in inputs]
        self.total_goal_enc_size = sum(sizes[i] for i in self.goal_indices)
        self.compute_dtype = torch.float32  # the engines' --dtype; normalizers stay float32

    def encode(self, index: int, obs):
        processor = self.processors[index]
        if isinstance(processor, VectorInput):
            return processor(obs).to(self.compute_dtype)
        if self.channels_last[index]:  # a 1.x file's [H, W, C] image, permuted as that ML-Agents did
            obs = obs.permute([0, 3, 1, 2])
        return processor(obs.to(self.compute_dtype))

    def forward(self, inputs: list):
        encodes = [self.encode(i, x) for i, (p, x) in enumerate(zip(self.processors, inputs))
                   if not isinstance(p, EntityEmbedding)]
        encoded_self = torch.cat(encodes, dim=1) if encodes else None
        entities = [(p, x.to(self.compute_dtype)) for p, x in zip(self.processors, inputs) if isinstance(p, EntityEmbedding)]
        if entities:
            masks = get_zero_entities_mask([x for _, x in entities]).to(self.compute_dtype)
            processed_self = self.x_self_encoder(encoded_self) if self.x_self_encoder is not None else None
            qkv = torch.cat([p(processed_self, x) for p, x in entities], dim=1)
            attention = self.rsa(qkv, masks)
            encoded_self = attention if encoded_self is None else torch.cat([encoded_self, attention], dim=1)
        return encoded_self

    def get_goal_encoding(self, inputs: list):
        return torch.cat([self.encode(i, inputs[i]) for i in self.goal_indices], dim=1)


class HyperNetwork(Module):
    """Generates a layer's weight matrix from the goal: hypernet = Linear, Swish, Linear, Swish,
    LayerNorm, Linear -> [input_size * output_size], read row-major as [input, output]."""
    def __init__(self, input_size: int, output_size: int, hyper_input_size: int, layer_size: int, num_layers: int):
        super().__init__()
        self.input_size, self.output_size = input_size, output_size
        layers, size = [], hyper_input_size
        for _ in range(num_layers):
            layers += [nn.Linear(size, layer_size), Swish()]
            size = layer_size
        self.hypernet = nn.Sequential(*layers, LayerNorm(), nn.Linear(layer_size, input_size * output_size))
        self.bias = nn.Parameter(torch.zeros(output_size))

    def forward(self, input_activation, hyper_input):
        output_weights = self.hypernet(hyper_input).view(-1, self.input_size, self.output_size)
        return torch.bmm(input_activation.unsqueeze(1), output_weights).squeeze(1) + self.bias


class ConditionalEncoder(Module):
    """The goal-conditioned body: layers.{0,2,...}; the last num_conditional_layers are HyperNetworks."""
    def __init__(self, input_size: int, goal_size: int, hidden_size: int, num_layers: int,
                 num_conditional_layers: int = 1):
        super().__init__()
        layers, size = [], input_size
        for i in range(num_layers):
            if num_layers - i <= num_conditional_layers:
                layers.append(HyperNetwork(size, hidden_size, goal_size, hidden_size, 2))
            else:
                layers.append(nn.Linear(size, hidden_size))
            layers.append(Swish())
            size = hidden_size
        self.layers = nn.ModuleList(layers)

    def forward(self, input_tensor, goal_tensor):
        activation = input_tensor
        for layer in self.layers:
            activation = layer(activation, goal_tensor) if isinstance(layer, HyperNetwork) else layer(activation)
        return activation


class LSTM(Module):
    """One LSTM step. The state travels as ML-Agents' ONNX has it, [batch, 1, memory_size] =
    [h, c]; torch's LSTM wants [1, batch, memory_size / 2] each, hence the transposes."""
    def __init__(self, input_size: int, memory_size: int):
        super().__init__()
        self.hidden_size = memory_size // 2
        self.lstm = nn.LSTM(input_size, self.hidden_size, 1, batch_first=True)

    def forward(self, input_tensor, memories):
        memories = torch.transpose(memories, 0, 1)
        h0 = memories[:, :, : self.hidden_size].contiguous()
        c0 = memories[:, :, self.hidden_size:].contiguous()
        lstm_out, hidden_out = self.lstm(input_tensor, (h0, c0))
        return lstm_out, torch.transpose(torch.cat(hidden_out, dim=-1), 0, 1)


class NetworkBody(Module):
    def __init__(self, settings: "PolicySettings"):
        super().__init__()
        self.h_size, self.m_size = settings.hidden_units, settings.memory_size
        self.observation_encoder = ObservationEncoder(settings.inputs, settings.hidden_units, settings.normalize)
        self.processors = self.observation_encoder.processors  # the same modules under a second name, as ML-Agents has them
        total = self.observation_encoder.total_enc_size
        if self.observation_encoder.total_goal_enc_size > 0 and settings.hyper:
            self._body_endoder = ConditionalEncoder(total, self.observation_encoder.total_goal_enc_size,
                                                    settings.hidden_units, settings.num_layers, 1)
        else:
            self._body_endoder = LinearEncoder(total, settings.num_layers, settings.hidden_units)  # sic: ML-Agents' spelling
        self.lstm = LSTM(settings.hidden_units, settings.memory_size) if settings.memory_size else None

    def forward(self, inputs: list, memories=None):
        encoded_self = self.observation_encoder(inputs)
        if isinstance(self._body_endoder, ConditionalEncoder):
            encoding = self._body_endoder(encoded_self, self.observation_encoder.get_goal_encoding(inputs))
        else:
            encoding = self._body_endoder(encoded_self)
        if self.lstm is not None:
            encoding, memories = self.lstm(encoding.reshape([-1, 1, self.h_size]), memories)
            encoding = encoding.reshape([-1, self.m_size // 2])
        return encoding, memories


class GaussianDistribution(Module):
    """mu, and log_sigma: a parameter [1, n] (PPO/POCA) or a layer (SAC: conditional sigma)."""
    def __init__(self, hidden_size: int, num_outputs: int, conditional_sigma: bool, tanh_squash: bool):
        super().__init__()
        self.conditional_sigma, self.tanh_squash = conditional_sigma, tanh_squash
        self.mu = nn.Linear(hidden_size, num_outputs)
        if conditional_sigma:
            self.log_sigma = nn.Linear(hidden_size, num_outputs)
        else:
            self.log_sigma = nn.Parameter(torch.zeros(1, num_outputs))

    def forward(self, inputs):
        """(mu, log_sigma) with log_sigma expanded to mu's batch, as ML-Agents computes them."""
        mu = self.mu(inputs)
        if self.conditional_sigma:
            return mu, torch.clamp(self.log_sigma(inputs), min=-20, max=2)
        return mu, mu * 0 + self.log_sigma


class MultiCategoricalDistribution(Module):
    def __init__(self, hidden_size: int, act_sizes: list):
        super().__init__()
        self.act_sizes = list(act_sizes)
        self.branches = nn.ModuleList([nn.Linear(hidden_size, size) for size in act_sizes])

    def probabilities(self, inputs, masks) -> list:
        """Per branch softmax(logits * mask - 1e8 * (1 - mask)); forbidden actions get 0."""
        out, start = [], 0
        for branch, size in zip(self.branches, self.act_sizes):
            allow = masks[:, start:start + size]
            block = -1.0 * allow + 1.0  # written as ML-Agents writes it (exported node for node)
            out.append(torch.softmax(branch(inputs) * allow - 1e8 * block, dim=-1))
            start += size
        return out


class ActionModel(Module):
    def __init__(self, hidden_size: int, settings: "PolicySettings"):
        super().__init__()
        self._continuous_distribution = GaussianDistribution(
            hidden_size, settings.continuous_size, settings.conditional_sigma, settings.tanh_squash) \
            if settings.continuous_size else None
        self._discrete_distribution = MultiCategoricalDistribution(hidden_size, settings.discrete_branches) \
            if settings.discrete_branches else None


class ValueHeads(Module):
    """A shared critic's value heads: loaded (strict) and never used for acting."""
    def __init__(self, stream_names: list, input_size: int):
        super().__init__()
        self.value_heads = nn.ModuleDict({name: nn.Linear(input_size, 1) for name in stream_names})


class SimpleActor(Module):
    """The policy. forward() is ML-Agents' export signature: (observations, action_masks,
    memories) -> version_number, memory_size, [continuous_actions, continuous_action_output_shape,
    deterministic_continuous_actions], [discrete_actions, discrete_action_output_shape,
    deterministic_discrete_actions], [recurrent_out]."""
    MODEL_EXPORT_VERSION = 3

    def __init__(self, settings: "PolicySettings"):
        super().__init__()
        self.settings = settings
        param = lambda values: nn.Parameter(torch.Tensor(values), requires_grad=False)
        branches = settings.discrete_branches
        self.version_number = param([self.MODEL_EXPORT_VERSION])
        self.is_continuous_int_deprecated = param([int(not branches)])
        self.continuous_act_size_vector = param([settings.continuous_size])
        self.discrete_act_size_vector = param([branches])
        self.act_size_vector_deprecated = param([settings.continuous_size + sum(branches)])
        self.network_body = NetworkBody(settings)
        self.encoding_size = settings.memory_size // 2 if settings.memory_size else settings.hidden_units
        self.memory_size_vector = param([settings.memory_size])
        self.action_model = ActionModel(self.encoding_size, settings)
        if settings.value_streams:
            self.value_heads = ValueHeads(settings.value_streams, self.encoding_size)

    def heads(self, inputs: list, masks=None, memories=None):
        """What acting needs, in the engines' precision: mu and log_sigma (continuous), the
        masked probabilities per branch (discrete), the next memory."""
        encoding, memories_out = self.network_body(inputs, memories=memories)
        continuous = self.action_model._continuous_distribution
        discrete = self.action_model._discrete_distribution
        mu, log_sigma = continuous(encoding) if continuous is not None else (None, None)
        probs = discrete.probabilities(encoding, masks) if discrete is not None else None
        return mu, log_sigma, probs, memories_out

    def forward(self, inputs: list, masks=None, memories=None):
        s = self.settings
        mu, log_sigma, probs, memories_out = self.heads(inputs, masks, memories)
        out = {"version_number": self.version_number, "memory_size": self.memory_size_vector}
        if mu is not None:
            sample = mu + torch.randn_like(mu) * torch.exp(log_sigma)
            out.update(continuous_actions=torch.tanh(sample) if s.tanh_squash else clipped_action(sample),
                       continuous_action_output_shape=self.continuous_act_size_vector,
                       deterministic_continuous_actions=deterministic_continuous(mu, s.tanh_squash))
        if probs is not None:
            out.update(discrete_actions=torch.cat([torch.multinomial(p, 1) for p in probs], dim=1),
                       discrete_action_output_shape=self.discrete_act_size_vector,
                       deterministic_discrete_actions=deterministic_discrete(probs))
        if s.memory_size:
            out["recurrent_out"] = memories_out
        return tuple(out[name] for name in mlagents_output_names(s))


class EngineHeads(Module):
    """The deterministic-only graph the engines run (torch eager, device graphs, or its ONNX
    export under onnxruntime): inputs obs_0..obs_k [, action_masks] [, recurrent_in];
    outputs [mu, deterministic_continuous_actions (, log_sigma for SAC)] [, probabilities,
    deterministic_discrete_actions] [, recurrent_out], float32 except the discrete actions (int64).
    The deterministic discrete action is each branch's argmax (first index on ties) inside the
    graph, as in ML-Agents' export, so a deterministic step needs no work on the host."""
    def __init__(self, actor: SimpleActor):
        super().__init__()
        self.actor = actor
        s = actor.settings
        self.n_inputs, self.discrete, self.memory = len(s.inputs), bool(s.discrete_branches), bool(s.memory_size)

    def forward(self, *flat):
        s = self.actor.settings
        dtype = self.actor.network_body.observation_encoder.compute_dtype
        inputs = list(flat[:self.n_inputs])
        masks = flat[self.n_inputs].to(dtype) if self.discrete else None
        memories = flat[-1].to(dtype) if self.memory else None
        mu, log_sigma, probs, memories_out = self.actor.heads(inputs, masks, memories)
        out = {}
        if mu is not None:
            out["mu"] = as_float32(mu)
            out["deterministic_continuous_actions"] = deterministic_continuous(out["mu"], s.tanh_squash)
            if s.tanh_squash:
                out["log_sigma"] = as_float32(log_sigma)
        if probs is not None:
            out["probabilities"] = as_float32(torch.cat(probs, dim=1))
            out["deterministic_discrete_actions"] = deterministic_discrete(probs)
        if memories_out is not None:
            out["recurrent_out"] = as_float32(memories_out)
        return tuple(out[name] for name in engine_output_names(s))


def as_float32(x: torch.Tensor) -> torch.Tensor:
    """x in float32 (no Cast node in an export where it already is)."""
    return x if x.dtype == torch.float32 else x.float()


def clipped_action(x):
    """ML-Agents' PPO/POCA continuous action from mu or a sample: clip(x, -3, 3) / 3 (a torch tensor
    or a numpy array)."""
    if isinstance(x, np.ndarray):
        return clipped_action(torch.from_numpy(x)).numpy()
    return torch.clamp(x, -ACTION_CLIP, ACTION_CLIP) / ACTION_CLIP


def deterministic_continuous(mu, tanh_squash: bool):
    """ML-Agents' deterministic continuous action: clip(mu, -3, 3) / 3 (PPO, POCA), or SAC's raw mu
    (tanh-squashed policies: what ML-Agents 1.1.0 exports)."""
    return mu if tanh_squash else clipped_action(mu)


def deterministic_discrete(probs):
    """Each branch's most likely allowed action (the first on ties, as torch.argmax and ONNX's ArgMax
    in ML-Agents' export): probs is one [rows, size] tensor per branch; int64 [rows, branches]."""
    return torch.cat([torch.argmax(p, dim=1, keepdim=True) for p in probs], dim=1)


# The graphs' interface, written once: ML-Agents' input and output names in its order. ML-Agents'
# export, the engines' graph, every feed and every fetch list come from these.

def input_names(s: "PolicySettings", exported: bool = False, declared: bool = False) -> list:
    """The policy's inputs (obs_0..obs_k; a 1.x ONNX-alone policy's own names), then action_masks
    (discrete actions) and recurrent_in (LSTM): the engines' inputs in order. exported: the names of
    ML-Agents 1.1.0's export, obs_0..obs_k always; it declares the last two always (declared=True)
    and the exporter drops them where the graph does not use them."""
    observations = [f"obs_{i}" if exported else spec.name for i, spec in enumerate(s.inputs)]
    return observations + (["action_masks"] if declared or s.discrete_branches else []) + \
        (["recurrent_in"] if declared or s.memory_size else [])


def mlagents_output_names(s: "PolicySettings") -> list:
    """ML-Agents' ModelSerializer outputs (SimpleActor.forward)."""
    return ["version_number", "memory_size"] + \
        (["continuous_actions", "continuous_action_output_shape", "deterministic_continuous_actions"]
         if s.continuous_size else []) + \
        (["discrete_actions", "discrete_action_output_shape", "deterministic_discrete_actions"]
         if s.discrete_branches else []) + (["recurrent_out"] if s.memory_size else [])


def step_outputs(s: "PolicySettings", deterministic: bool) -> list:
    """What one step copies back: the deterministic actions, or what sampling draws from (mu, SAC's
    log_sigma, the masked probabilities); and the next memory."""
    if deterministic:
        names = (["deterministic_continuous_actions"] if s.continuous_size else []) + \
            (["deterministic_discrete_actions"] if s.discrete_branches else [])
    else:
        names = ((["mu"] + (["log_sigma"] if s.tanh_squash else [])) if s.continuous_size else []) + \
            (["probabilities"] if s.discrete_branches else [])
    return names + (["recurrent_out"] if s.memory_size else [])


def engine_output_names(s: "PolicySettings") -> list:
    """The engines' graph (EngineHeads): everything a deterministic or a sampled step needs."""
    deterministic = step_outputs(s, True)
    return [n for n in ["mu", "deterministic_continuous_actions", "log_sigma", "probabilities",
                        "deterministic_discrete_actions", "recurrent_out"]
            if n in deterministic or n in step_outputs(s, False)]


# =========================================================================================
# Building: settings inferred from the checkpoint (the ONNX or configuration.yaml where the
# checkpoint is silent), one strict load
# =========================================================================================

ENCODER_KEYS = "network_body.observation_encoder."
PROCESSOR_KEY = re.compile(r"^network_body\.observation_encoder\.processors\.(\d+)\.(.+)$")


@dataclass
class InputSpec:
    """One input (sensor) of the policy, named as ML-Agents' ONNX names it."""
    name: str                      # obs_0, obs_1, ...
    kind: str                      # vector | visual | entities
    shape: tuple                   # (n,) | (channels, height, width) | (max entities, features)
    normalized: bool = False
    encoder: Optional[str] = None  # vis_encode_type of a visual input
    goal: bool = False             # the goal signal of a goal-conditioned (hypernetwork) body
    channels_last: bool = False    # an image taken as (height, width, channels): a 1.x ONNX that declares it so

    @property
    def chw(self) -> tuple:
        """An image's (channels, height, width), whatever layout the input takes."""
        return (self.shape[2], self.shape[0], self.shape[1]) if self.channels_last else tuple(self.shape)

    def describe(self) -> str:
        dims = "x".join(map(str, self.shape))
        if self.kind == "visual":
            return f"{self.name}: image {dims} ({'H x W x C' if self.channels_last else 'C x H x W'}, {self.encoder} encoder)"
        if self.kind == "entities":
            return f"{self.name}: up to {self.shape[0]} entities x {self.shape[1]} features (attention)"
        return (f"{self.name}: vector {dims}{', normalized' if self.normalized else ''}"
                f"{', goal signal' if self.goal else ''}")


@dataclass
class PolicySettings:
    """What ML-Agents' NetworkSettings, ActionSpec and ObservationSpecs say about a policy."""
    inputs: list
    hidden_units: int
    num_layers: int
    normalize: bool
    continuous_size: int = 0
    discrete_branches: list = field(default_factory=list)
    memory_size: int = 0
    conditional_sigma: bool = False  # SAC: log_sigma is a layer ...
    tanh_squash: bool = False        # ... and actions are tanh-squashed
    hyper: bool = False              # goal-conditioned body (HyperNetwork)
    value_streams: list = field(default_factory=list)  # shared critic's value heads in the policy
    trainer: Optional[str] = None    # ppo | sac | poca
    source: str = "checkpoint"       # where the input shapes came from


def _state_tensor(state: dict, key: str, bad: Callable[[str], Exception]):
    value = state.get(key)
    if not isinstance(value, torch.Tensor):
        raise bad(f"missing tensor '{key}'")
    return value


def check_state_dict(state: dict, bad: Callable[[str], Exception]) -> None:
    """The checks a strict load does not make: names are text, weights float32 and finite,
    normalisers plausible, declared action sizes whole numbers."""
    for key, value in state.items():
        if not isinstance(key, str):
            raise bad(f"non-text key {key!r}")
        if not isinstance(value, torch.Tensor):
            raise bad(f"'{key}' is a {type(value).__name__}, expected a tensor")
        if key.endswith("normalization_steps"):
            if value.numel() != 1 or value.dtype.is_floating_point or value.dtype == torch.bool or value.is_complex():
                raise bad(f"'{key}' must be one integer")
            if int(value.item()) < 1:
                raise bad(f"'{key}' is {int(value.item())}, expected >= 1")
            continue
        if value.dtype != torch.float32:
            raise bad(f"'{key}' is {str(value.dtype).replace('torch.', '')}, expected float32")
        if not bool(torch.isfinite(value).all()):
            raise bad(f"'{key}' holds NaN or infinite values")
        if key.endswith("running_variance") and bool((value <= 0).any()):
            raise bad(f"'{key}' has values <= 0")
        if key.endswith("_size_vector") or key.endswith("size_vector_deprecated"):
            if bool((value != torch.round(value)).any()) or bool((value < 0).any()) or bool((value > 1e6).any()):
                raise bad(f"'{key}' holds {value.reshape(-1)[:8].tolist()}, expected whole numbers")


def read_config(model_dir: Optional[Path], behavior: Optional[str]) -> dict:
    """behaviors.<behavior> of configuration.yaml (or config.json) beside the checkpoint, {} when
    absent or unreadable (advisory: the checkpoint decides)."""
    if not model_dir or not behavior:
        return {}
    for name in ("configuration.yaml", "config.json"):
        path = model_dir / name
        try:
            if not path.is_file() or path.stat().st_size > 1 << 20:
                continue
            text = path.read_text()
            if name.endswith(".json"):
                data = json.loads(text)
            else:
                try:
                    import yaml
                    data = yaml.safe_load(text)
                except ImportError:
                    continue
            entry = data.get("behaviors", {}).get(behavior) if isinstance(data, dict) else None
            if isinstance(entry, dict):
                return entry
        except Exception:  # advisory: unreadable, malformed (yaml's own errors too) or nested too deep
            continue
    return {}


@dataclass
class OnnxInterface:
    """The inputs and outputs of an ML-Agents ONNX file, read without running it."""
    path: Path
    inputs: dict             # name -> shape (dims as int, or None for the batch)
    outputs: list            # output names
    vector_slices: list      # legacy vector_observation: [(start, end)] per sensor, in order
    legacy: bool             # ML-Agents 1.x interface (vector_observation, no deterministic_* outputs)
    weights: dict = field(default_factory=dict)  # initializer name -> shape (names are state-dict keys)

    @property
    def legacy_inputs(self) -> bool:
        """Inputs as the serializer before obs_N wrote them (see legacy_input_shapes)."""
        return "vector_observation" in self.inputs or \
            any(re.fullmatch(r"visual_observation_\d+", name) for name in self.inputs)


def read_onnx_interface(path: Path) -> OnnxInterface:
    try:
        import onnx
    except ImportError:
        raise UsageError("onnx is not installed (pip install onnx)")
    try:
        if path.stat().st_size > 2 << 30:
            raise UsageError(f"{path}: larger than 2 GiB, not an ML-Agents policy ONNX")
        model = onnx.load(str(path), load_external_data=False)
    except UsageError:
        raise
    except OSError as exc:
        raise UsageError(f"{path}: cannot read ({exc.strerror or exc})")
    except Exception as exc:
        raise UsageError(f"{path}: not an ONNX file ({str(exc).splitlines()[0][:120] if str(exc) else type(exc).__name__})")
    initializers = {i.name for i in model.graph.initializer}
    inputs = {}
    for value in model.graph.input:
        if value.name not in initializers:
            dims = value.type.tensor_type.shape.dim
            inputs[value.name] = tuple(d.dim_value if d.HasField("dim_value") else None for d in dims)
    slices = []
    for node in model.graph.node:
        if node.op_type == "Slice" and list(node.input[:1]) == ["vector_observation"]:
            attrs = {a.name: list(onnx.helper.get_attribute_value(a)) for a in node.attribute}
            if attrs.get("axes", [1]) == [1] and len(attrs.get("starts", [])) == 1:
                slices.append((int(attrs["starts"][0]), int(attrs["ends"][0])))
    outputs = [o.name for o in model.graph.output]
    legacy = "vector_observation" in inputs or not any(o.startswith("deterministic_") for o in outputs)
    weights = {i.name: tuple(i.dims) for i in model.graph.initializer}
    return OnnxInterface(path, inputs, outputs, sorted(set(slices)), legacy, weights)


def onnx_difference(iface: OnnxInterface, state: dict, settings: "PolicySettings") -> Optional[str]:
    """How an ONNX shows it is not this checkpoint's, or None: its inputs' shapes differ from the
    policy's, or a weight it names as the checkpoint does has another shape. (Other weights of the
    same shapes are onnx-compare's business: a failed comparison, not another policy.)"""
    shapes = onnx_input_shapes(iface, dict(enumerate(settings.inputs)))
    if shapes is not None and [tuple(s) for s in shapes] != [tuple(i.shape) for i in settings.inputs]:
        return f"takes inputs {[list(s) for s in shapes]}, the checkpoint {[list(i.shape) for i in settings.inputs]}"
    for name, dims in iface.weights.items():
        if name in state and isinstance(state[name], torch.Tensor) and tuple(state[name].shape) != dims:
            return f"has {name} {list(dims)}, the checkpoint {list(state[name].shape)}"
    return None


def onnx_input_shapes(interface: OnnxInterface, seen: Optional[dict] = None) -> Optional[list]:
    """Per-input shapes (without the batch) in input order, from an ONNX interface; images as
    [C, H, W]. `seen` (input index -> InputSpec, from the checkpoint) places a 1.x file's inputs."""
    if interface.legacy_inputs:
        return legacy_input_shapes(interface, seen or {})
    obs = sorted((int(n[4:]), shape[1:]) for n, shape in interface.inputs.items() if re.fullmatch(r"obs_\d+", n))
    if not obs or [i for i, _ in obs] != list(range(len(obs))) or any(None in s for _, s in obs):
        return None
    return [tuple(s) for _, s in obs]


def legacy_input_shapes(interface: OnnxInterface, seen: dict) -> Optional[list]:
    """A 1.x file (ML-Agents' serializer before obs_N): every vector sensor concatenated in
    `vector_observation` (the graph slices it), the k-th image `visual_observation_k`, a buffer
    sensor `obs_i` at its own index i. The images go where the checkpoint has its image encoders
    (else after the vectors). Its serializer wrote images [C, H, W]; a file whose image is
    [H, W, C] by the checkpoint's channel count is read as such (MLAgentsOnnx.feed transposes)."""
    names = interface.inputs
    vectors = []
    if "vector_observation" in names:
        width = names["vector_observation"][1:]
        if None in width or len(width) != 1:
            return None
        vectors = [(end - start,) for start, end in interface.vector_slices] if interface.vector_slices else \
            [tuple(width)] if width[0] else []
    images = [s[1:] for _, s in sorted((int(n.rsplit("_", 1)[1]), s) for n, s in names.items()
                                       if re.fullmatch(r"visual_observation_\d+", n))]
    entities = {int(n[4:]): s[1:] for n, s in names.items() if re.fullmatch(r"obs_\d+", n)}
    if any(len(s) != 3 or None in s for s in images) or any(len(s) != 2 or None in s for s in entities.values()):
        return None
    total = len(vectors) + len(images) + len(entities)
    if any(i >= total for i in entities):
        return None
    image_at = [i for i in range(total) if i in seen and seen[i].kind == "visual" and i not in entities]
    if len(image_at) != len(images):
        free = [i for i in range(total) if i not in entities]
        image_at = free[len(vectors):]
    out, vectors, images = [], iter(vectors), iter(images)
    for i in range(total):
        if i in entities:
            out.append(tuple(entities[i]))
        elif i in image_at:
            a, b, c = next(images)
            channels = seen[i].shape[0] if i in seen and seen[i].kind == "visual" else None
            out.append((c, a, b) if channels is not None and a != channels and c == channels else (a, b, c))
        else:
            out.append(next(vectors))
    return out


def infer_settings(state: dict, path: Path, onnx_iface: Optional[OnnxInterface], config: dict,
                   trainer_hint: Optional[str], goal_input: GoalInput) -> PolicySettings:
    """The policy's settings from its tensor shapes, the ONNX interface where shapes are silent."""
    def bad(problem: str) -> UsageError:
        return UsageError(f"{path}: not a usable ML-Agents policy: {problem}")

    check_state_dict(state, bad)
    shape = lambda key: tuple(_state_tensor(state, key, bad).shape)
    body = "network_body._body_endoder."
    linear = sorted(int(m.group(1)) for k in state for m in [re.match(re.escape(body) + r"seq_layers\.(\d+)\.weight$", k)] if m)
    hyper_layers = sorted(int(m.group(1)) for k in state for m in [re.match(re.escape(body) + r"layers\.(\d+)\.(?:weight|bias)$", k)] if m)
    if linear:
        if linear != list(range(0, 2 * len(linear), 2)):
            raise bad(f"network-body layers {linear} are not Linear layers 0, 2, 4, ... with Swish between")
        hidden, num_layers, body_in = shape(f"{body}seq_layers.0.weight")[0], len(linear), shape(f"{body}seq_layers.0.weight")[1]
        hyper = False
    elif hyper_layers:
        hyper_layers = sorted(set(hyper_layers))
        last = hyper_layers[-1]
        hidden, num_layers, hyper = shape(f"{body}layers.{last}.bias")[0], len(hyper_layers), True
        generated = shape(f"{body}layers.{last}.hypernet.5.weight")[0]
        body_in = shape(f"{body}layers.0.weight")[1] if num_layers > 1 else generated // max(hidden, 1)
    else:
        raise bad("no network body ('network_body._body_endoder.seq_layers.N.weight')")

    # -- inputs the checkpoint shows: normalisers, image encoders, entity embeddings
    seen: dict[int, InputSpec] = {}
    for key in state:
        m = PROCESSOR_KEY.match(key)
        if not m or int(m.group(1)) in seen:
            continue
        i, rest, prefix = int(m.group(1)), m.group(2), f"{ENCODER_KEYS}processors.{m.group(1)}."
        if i > 1000:
            raise bad(f"processor index {i} is implausible")
        if rest.startswith("normalizer."):
            seen[i] = InputSpec(f"obs_{i}", "vector", shape(prefix + "normalizer.running_mean"), normalized=True)
        elif rest.startswith("self_ent_encoder."):
            width = shape(prefix + "self_ent_encoder.seq_layers.0.weight")[1]
            self_part = ATTENTION_EMBEDDING if f"{ENCODER_KEYS}x_self_encoder.seq_layers.0.weight" in state else 0
            seen[i] = InputSpec(f"obs_{i}", "entities", (None, width - self_part))
        elif rest.startswith(("conv_layers.", "dense.", "sequential.")):
            seen[i] = visual_input_spec(state, prefix, i, hidden, bad)
        else:
            raise bad(f"unsupported part '{key}'")
    normalize = any(s.normalized for s in seen.values())

    # -- shapes the checkpoint cannot tell: unnormalised vectors, image sides, entity counts
    onnx_shapes = onnx_input_shapes(onnx_iface, seen) if onnx_iface else None
    if onnx_shapes is not None:
        check_onnx_shapes(onnx_shapes, onnx_iface.path)
    fits = onnx_shapes is not None and onnx_shapes_agree(onnx_shapes, seen)
    source, no_onnx = "checkpoint", "no ML-Agents ONNX beside it"
    if onnx_iface is not None and not fits:  # say why the ONNX found was not used
        no_onnx = f"{onnx_iface.path.name} not used: its inputs " + (
            "are not ML-Agents' (obs_N, or vector_observation and visual_observation_N)" if onnx_shapes is None
            else f"{[list(d) for d in onnx_shapes]} do not fit the checkpoint's")
    if fits:
        inputs = []
        for i, dims in enumerate(onnx_shapes):
            known = seen.get(i)
            if known is None:
                inputs.append(InputSpec(f"obs_{i}", "vector", tuple(dims)))
            else:
                inputs.append(InputSpec(f"obs_{i}", known.kind, tuple(dims), known.normalized, known.encoder))
        needs = any(i not in seen for i in range(len(onnx_shapes))) or any(s.kind != "vector" for s in seen.values())
        source = f"checkpoint + {onnx_iface.path.name}" if needs else "checkpoint"
    else:
        hint = ("put its ML-Agents ONNX beside it or pass --onnx FILE" if onnx_iface is None else
                f"{no_onnx}; pass the policy's own ML-Agents ONNX with --onnx FILE")
        inputs = inputs_from_checkpoint(seen, body_in, hidden, bad, hint)
        if any(s.kind == "visual" for s in inputs):
            source = f"checkpoint (square images assumed: {no_onnx})"
        elif len(inputs) > len(seen):
            source = f"checkpoint (unnormalised inputs taken as one: {no_onnx})"
        inputs = [InputSpec(s.name, s.kind, s.shape if s.kind != "entities" else (s.shape[0] or 0, s.shape[1]),
                            s.normalized, s.encoder) for s in inputs]

    # -- the goal signal of a hypernetwork body: named nowhere in the files
    if hyper:
        goal_width = shape(f"{body}layers.{hyper_layers[-1]}.hypernet.0.weight")[1]
        pick_goal(inputs, goal_width, goal_input, hidden, path)
    elif goal_input is not None:
        raise UsageError(f"--goal-input {','.join(map(str, goal_indices(goal_input)))}: {path.name} has no "
                         f"goal-conditioned (hypernetwork) body")

    # -- memory, actions, trainer
    memory = shape("network_body.lstm.lstm.weight_hh_l0")[1] * 2 if "network_body.lstm.lstm.weight_hh_l0" in state else 0
    mu_key = "action_model._continuous_distribution.mu.weight"
    continuous = shape(mu_key)[0] if mu_key in state else 0
    conditional = "action_model._continuous_distribution.log_sigma.weight" in state
    branches = []
    while f"action_model._discrete_distribution.branches.{len(branches)}.weight" in state:
        branches.append(shape(f"action_model._discrete_distribution.branches.{len(branches)}.weight")[0])
    if not continuous and not branches:
        raise bad("no action head (action_model._continuous_distribution.mu or _discrete_distribution.branches)")
    declared_c = state.get("continuous_act_size_vector")
    if isinstance(declared_c, torch.Tensor) and declared_c.numel() == 1 and int(declared_c.item()) != continuous:
        raise bad(f"continuous_act_size_vector says {int(declared_c.item())} actions but the heads give {continuous}")
    declared_d = state.get("discrete_act_size_vector")
    if isinstance(declared_d, torch.Tensor) and [int(v) for v in declared_d.reshape(-1).tolist()] != branches:
        raise bad(f"discrete_act_size_vector says {declared_d.reshape(-1).tolist()} but the branches give {branches}")
    streams = sorted({m.group(1) for k in state for m in [re.match(r"^value_heads\.value_heads\.([^.]+)\.weight$", k)] if m})
    trainer = trainer_hint or (str(config.get("trainer_type")) if config.get("trainer_type") in ("ppo", "sac", "poca")
                               else None)  # the checkpoint's optimizer entries decide; the config only fills a gap
    return PolicySettings(inputs, hidden, num_layers, normalize, continuous, branches, memory, conditional, conditional,
                          hyper, streams, trainer, source)


def visual_input_spec(state: dict, prefix: str, i: int, hidden: int, bad) -> InputSpec:
    """Which of ML-Agents' five encoders, and the image's channels, from the processor's keys
    (the image side is set later from the ONNX, or solved for a square image)."""
    convs = sorted(int(m.group(1)) for k in state for m in [re.match(re.escape(prefix) + r"conv_layers\.(\d+)\.weight$", k)] if m)
    kernels = [tuple(state[f"{prefix}conv_layers.{c}.weight"].shape) for c in convs]
    if f"{prefix}sequential.0.weight" in state:
        encoder, channels = "resnet", state[f"{prefix}sequential.0.weight"].shape[1]
    elif not convs:
        encoder, channels = "fully_connected", None
    else:
        found = {tuple((out, kernel) for out, kernel, _ in cls.CONVS): name
                 for name, cls in VISUAL_ENCODERS.items() if getattr(cls, "CONVS", None)}
        encoder = found.get(tuple((k[0], k[2]) for k in kernels))
        if encoder is None:
            raise bad(f"processor {i}: convolutions {[list(k) for k in kernels]} match none of ML-Agents' visual encoders")
        channels = kernels[0][1]
    dense = state.get(f"{prefix}dense.weight" if encoder == "resnet" else f"{prefix}dense.0.weight")
    if not isinstance(dense, torch.Tensor) or dense.dim() != 2:
        raise bad(f"processor {i}: a {encoder} encoder without its dense layer")
    sides = [s for s in range(VISUAL_ENCODERS[encoder].MIN_SIDE, 1025)
             if channels and VISUAL_ENCODERS[encoder].flat_size(channels, s, s) == dense.shape[1]]
    side = sides[0] if sides else None  # the smallest square image that fits; only used when no ONNX tells
    return InputSpec(f"obs_{i}", "visual", (channels, side, side), encoder=encoder)


def check_onnx_shapes(shapes: list, path: Path) -> None:
    """Refuse input sizes that no ML-Agents sensor has (before anything is allocated for them):
    a size below 1 (an empty vector_observation slice, a negative dimension), or more than
    MAX_ENTITIES entities in a buffer sensor."""
    for i, dims in enumerate(shapes):
        problem = ("a size below 1" if any(d < 1 for d in dims) else
                   f"more than {MAX_ENTITIES} entities" if len(dims) == 2 and dims[0] > MAX_ENTITIES else None)
        if problem:
            raise UsageError(f"{short_path(path)}: input {i} is declared {list(dims)}, {problem}; "
                             f"not a usable ML-Agents policy ONNX")


def onnx_shapes_agree(shapes: list, seen: dict) -> bool:
    """Whether the ONNX's inputs can be this checkpoint's: same count reach, same kinds and sizes."""
    if seen and max(seen) >= len(shapes):
        return False
    for i, spec in seen.items():
        dims = tuple(shapes[i])
        if spec.kind == "vector" and dims != spec.shape:
            return False
        if spec.kind == "visual" and (len(dims) != 3 or (spec.shape[0] is not None and dims[0] != spec.shape[0])
                                      or not all(isinstance(d, int) and d > 0 for d in dims)):
            return False
        if spec.kind == "entities" and (len(dims) != 2 or dims[1] != spec.shape[1]):
            return False
    return all(len(s) == 1 for i, s in enumerate(shapes) if i not in seen)


def inputs_from_checkpoint(seen: dict, body_in: int, hidden: int, bad,
                           hint: str = "put its ML-Agents ONNX beside it or pass --onnx FILE") -> list:
    """Without an ONNX: every visible input, and the unexplained body width as ONE unnormalised
    vector input in the first gap (or last). Images are taken as square. `hint` ends the
    refusals that an ONNX would have avoided."""
    explained = 0
    for spec in seen.values():
        if spec.kind == "vector":
            explained += spec.shape[0]
        elif spec.kind == "visual":
            explained += hidden
    if any(s.kind == "entities" for s in seen.values()):
        explained += ATTENTION_EMBEDDING
    rest = body_in - explained
    if rest < 0:
        raise bad(f"the inputs' encodings are {explained} wide but the body's first layer takes {body_in}")
    count = (max(seen) + 1) if seen else 0
    gaps = [i for i in range(count) if i not in seen]
    if rest and not gaps:
        gaps = [count]
    # Unnormalised vectors leave no keys: their total width is known, not where they sit. After
    # every visible input they concatenate the same whether they are one input or several; a
    # gap among the visible inputs could hold any part of that width.
    if len(gaps) > 1 or (gaps and not rest) or (gaps and gaps[0] < count):
        raise bad("cannot tell the policy's inputs from the checkpoint alone (inputs without weights of their "
                  f"own sit among the others); {hint}")
    if any(spec.kind == "entities" for spec in seen.values()):
        raise bad(f"the largest entity count of a buffer-sensor input is not in the checkpoint; {hint}")
    inputs = dict(seen)
    if gaps:
        inputs[gaps[0]] = InputSpec(f"obs_{gaps[0]}", "vector", (rest,))
    out = []
    for i in sorted(inputs):
        spec = inputs[i]
        if spec.kind == "visual" and spec.shape[1] is None:
            raise bad(f"{spec.name}: the image size of this visual input cannot be told from the checkpoint; {hint}")
        out.append(spec)
    return out


def pick_goal(inputs: list, goal_width: int, goal_input: GoalInput, hidden: int, path: Path) -> None:
    """Mark the goal signal: the inputs named by --goal-input, else the only set of inputs whose
    encodings (a vector's width; a camera's encoder output, `hidden` wide) together are as wide as
    the hypernetwork's input -- ML-Agents concatenates several goal signals in input order; refuse
    when no set or more than one fits."""
    width = lambda i: inputs[i].shape[0] if inputs[i].kind == "vector" else hidden
    eligible = [i for i, s in enumerate(inputs) if s.kind in ("vector", "visual")]
    if goal_input is not None:
        named = goal_indices(goal_input)
        label = f"--goal-input {','.join(map(str, named))}"
        wrong = [i for i in named if i not in eligible]
        if wrong or not named:
            problem = f"input {wrong[0]} is not a vector or camera input of this policy" if wrong else "no inputs named"
            raise UsageError(f"{label}: {problem} (inputs: {', '.join(s.describe() for s in inputs)})")
        if sum(map(width, named)) != goal_width:
            widths = f"{inputs[named[0]].name} is {width(named[0])}" if len(named) == 1 else \
                " + ".join(f"{inputs[i].name} ({width(i)})" for i in named) + f" = {sum(map(width, named))}"
            raise UsageError(f"{label}: {widths} wide, but the hypernetwork takes a {goal_width}-wide goal")
        chosen = named
    else:
        sizes = range(1, len(eligible) + 1) if len(eligible) <= 16 else (1,)  # (2^16 sets at most)
        fits = [c for k in sizes for c in itertools.combinations(eligible, k) if sum(map(width, c)) == goal_width]
        if len(fits) != 1:
            found = "; ".join("+".join(inputs[i].name for i in c) for c in fits[:4]) + (" ..." if len(fits) > 4 else "")
            raise UsageError(f"{path.name}: a goal-conditioned policy whose goal input cannot be told from the shapes "
                             f"({'these fit: ' + found if fits else 'no input or set of inputs is'} {goal_width} wide); "
                             f"name it with --goal-input N[,N...]")
        chosen = fits[0]
    for i in chosen:
        inputs[i].goal = True


def goal_indices(goal_input: GoalInput) -> tuple:
    """--goal-input / load(goal_input=...): one input index or several, as a sorted tuple."""
    try:
        values = (goal_input,) if isinstance(goal_input, (int, np.integer)) else tuple(goal_input)
    except TypeError:
        values = (goal_input,)
    if not all(isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in values):
        raise UsageError(f"goal_input {goal_input!r}: expected an input index or a list of them")
    return tuple(sorted(set(int(v) for v in values)))


def trainer_of(checkpoint: dict) -> Optional[str]:
    """ppo | sac | poca from the optimizer entries saved beside the policy."""
    keys = set(checkpoint)
    if "Optimizer:q_network" in keys or "Optimizer:entropy_optimizer" in keys:
        return "sac"
    critic = checkpoint.get("Optimizer:critic")
    if isinstance(critic, dict) and "network_body._current_max_agents" in critic:
        return "poca"
    if "Optimizer:value_optimizer" in keys or "Optimizer:critic" in keys:
        return "ppo"
    return None


def build_actor(settings: PolicySettings, state: dict, path: Path) -> "SimpleActor":
    """ML-Agents' module tree for these settings, loaded with load_state_dict(strict=True)."""
    for spec in settings.inputs:
        if spec.kind == "visual":
            side = min(spec.chw[1:])
            if side < VISUAL_ENCODERS[spec.encoder].MIN_SIDE:
                raise UsageError(f"{path}: {spec.name} is {spec.chw[1]}x{spec.chw[2]}, smaller than the "
                                 f"{spec.encoder} encoder accepts ({VISUAL_ENCODERS[spec.encoder].MIN_SIDE})")
    try:
        # Built on the meta device (no memory) and given the checkpoint's own tensors: sizes that
        # the ONNX or a crafted file claims never allocate anything before the strict load
        # has checked every shape against the checkpoint.
        with torch.device("meta"):
            actor = SimpleActor(settings)
        actor.load_state_dict({k: v.clone() for k, v in state.items()}, strict=True, assign=True)
    except RuntimeError as exc:  # missing, unexpected or mis-shaped keys: the checkpoint is not this policy
        lines = [l.strip() for l in str(exc).splitlines() if l.strip()]
        detail = next((l for l in lines[1:] if l), lines[0] if lines else "")
        raise UsageError(f"{path}: not a usable ML-Agents policy: {detail[:300]}")
    except (ValueError, TypeError, IndexError, ZeroDivisionError) as exc:
        raise UsageError(f"{path}: not a usable ML-Agents policy: {str(exc).splitlines()[0][:200] if str(exc) else exc}")
    return actor.eval().requires_grad_(False)


# =========================================================================================
# Export, as ML-Agents' ModelSerializer does it
# =========================================================================================

def dummy_inputs(settings: PolicySettings, rows: int = 1):
    """ModelSerializer's dummy input: zeros per observation, all-allowed masks, zero memories."""
    obs = [torch.zeros((rows, *spec.shape)) for spec in settings.inputs]
    return obs, torch.ones(rows, sum(settings.discrete_branches)), torch.zeros(rows, 1, settings.memory_size)


def _quiet_onnx_export(module, args: tuple, file, **kwargs) -> None:
    """torch.onnx.export with the TorchScript exporter (ML-Agents' own), its warnings silenced."""
    import logging
    previous = logging.getLogger("torch.onnx").level
    logging.getLogger("torch.onnx").setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
            warnings.simplefilter("ignore")
            try:
                torch.onnx.export(module, args, file, dynamo=False, **kwargs)
            except TypeError:  # a torch without the dynamo switch: the TorchScript exporter is the only one
                torch.onnx.export(module, args, file, **kwargs)
    finally:
        logging.getLogger("torch.onnx").setLevel(previous)


def export_mlagents_onnx(actor: "SimpleActor") -> bytes:
    """The policy with ML-Agents' ONNX interface (opset 9, its input and output names), exactly
    as mlagents-learn writes <Behavior>.onnx; unused inputs are dropped as there."""
    s = actor.settings
    names = input_names(s, exported=True, declared=True)
    dynamic_axes = {name: {0: "batch"} for name in names + ["continuous_actions", "discrete_actions"]}
    buffer = io.BytesIO()
    _quiet_onnx_export(actor, dummy_inputs(s), buffer, opset_version=9, input_names=names,
                       output_names=mlagents_output_names(s), dynamic_axes=dynamic_axes)
    return buffer.getvalue()


def export_engine_onnx(heads: "EngineHeads") -> bytes:
    """The deterministic-only graph of the same modules, for the onnxruntime engine."""
    s = heads.actor.settings
    obs, masks, memories = dummy_inputs(s)
    args = tuple(obs) + ((masks,) if s.discrete_branches else ()) + ((memories,) if s.memory_size else ())
    names, outputs = input_names(s), engine_output_names(s)
    buffer = io.BytesIO()
    _quiet_onnx_export(heads, args, buffer, opset_version=13, input_names=names, output_names=outputs,
                       dynamic_axes={name: {0: "batch"} for name in names + outputs})
    return buffer.getvalue()


# =========================================================================================
# Policies from an ML-Agents ONNX alone (no checkpoint): the same modules, weights read from the graph
#
# Unity's example models and many shared ones are ONNX files only. The file is read, never run
# (onnxruntime runs it only as the reference). The settings come from its structure: the inputs,
# the convolutions behind each image, the layers between the encoders and the action heads, the
# LSTM, the mask slices. A template of ML-Agents' modules with those settings, every parameter
# given its own random values, is exported as ML-Agents exports it; both graphs are reduced to
# their weight-bearing nodes (Linear as Gemm or MatMul + Add, Conv, LSTM in ONNX gate order, the
# normaliser's Sub and Div, log_sigma's Add), paired by kind, shape and the sensors they depend
# on, and the template's values say which parameter each holds. Every other operator on the way
# to the actions must be the template's too; anything else is refused, naming the node.
# =========================================================================================

ONNX_ONLY_SOURCE = "settings and weights from the ONNX (no checkpoint)"
ONNX_PLUMBING = {"Identity", "Cast", "Constant", "Shape", "Gather", "Unsqueeze", "Squeeze", "Flatten", "Reshape",
                 "Concat", "Slice", "Transpose"}  # moves data about (exporters differ); the weights' shapes check it
ONNX_FOLD = {"Identity": lambda x: x, "Sqrt": np.sqrt, "Div": np.divide, "Mul": np.multiply, "Add": np.add,
             "Sub": np.subtract}   # constant subgraphs (an unfolded normaliser: sqrt(running_variance / steps))
SETTINGS_KEYS = ("version_number", "memory_size_vector", "is_continuous_int_deprecated", "continuous_act_size_vector",
                 "discrete_act_size_vector", "act_size_vector_deprecated")  # derived from the settings, not weights


def onnx_attrs(node) -> dict:
    import onnx
    return {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}


@dataclass
class WeightNode:
    """A node that holds weights, in the form torch's modules keep them: linear (weight [out, in],
    bias), conv (weight, bias), lstm (weight_ih, weight_hh, bias_ih, bias_hh in torch's gate
    order), or '<Op><slot>' for an elementwise op with a weight operand (Sub1: the running mean)."""
    kind: str
    values: tuple
    node: object
    deps: frozenset
    output: str

    @property
    def signature(self) -> tuple:
        return self.kind, tuple(v.shape for v in self.values)


class OnnxGraph:
    """An ONNX graph read as data: its constants (initializers, Constant nodes, and what folds from
    them), who produces and who consumes each tensor, and which sensors each tensor depends on."""

    def __init__(self, model, name: str):
        from onnx import numpy_helper
        self.name, self.nodes = name, []
        self.consts = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
        self.inputs = {i.name: tuple(d.dim_value if d.HasField("dim_value") else None
                                     for d in i.type.tensor_type.shape.dim)
                       for i in model.graph.input if i.name not in self.consts}
        self.outputs = [o.name for o in model.graph.output]
        self.producer, self.consumers, alias, seen = {}, {}, {}, {}
        scalar = lambda name: float(self.consts[name]) if name in self.consts and self.consts[name].size == 1 else None
        minus = {}  # x - c, for ML-Agents' attention's "key -= 1; key += 1" (a Barracuda work-around): x again
        for original in model.graph.node:  # Identity and Cast looked through, a repeated computation read once
            ins = [alias.get(i, i) for i in original.input]
            if original.op_type == "Constant" and "value" in onnx_attrs(original):
                self.consts[original.output[0]] = numpy_helper.to_array(onnx_attrs(original)["value"])
            if original.op_type in ("Identity", "Cast") and len(ins) == 1 and original.output[0] not in self.outputs:
                alias[original.output[0]] = ins[0]
                continue
            if original.op_type == "Sub" and len(ins) == 2 and scalar(ins[1]) is not None:
                minus[original.output[0]] = (ins[0], scalar(ins[1]))
            if original.op_type == "Add" and len(ins) == 2 and ins[0] in minus and minus[ins[0]][1] == scalar(ins[1]):
                alias[original.output[0]] = minus[ins[0]][0]
                continue
            key = (original.op_type, tuple(ins), repr(sorted(onnx_attrs(original).items())))
            if key in seen and original.op_type not in ("RandomNormalLike", "Multinomial") and \
                    not set(original.output) & set(self.outputs):
                alias.update(zip(original.output, seen[key].output))
                continue
            node = type(original)()
            node.CopyFrom(original)
            del node.input[:]
            node.input.extend(ins)
            seen[key] = node
            self.nodes.append(node)
        for node in self.nodes:
            self.producer.update({name: node for name in node.output})
            for name in node.input:
                self.consumers.setdefault(name, []).append(node)
            if node.op_type in ONNX_FOLD and node.input and all(i in self.consts for i in node.input):
                with np.errstate(all="ignore"):
                    self.consts[node.output[0]] = np.asarray(ONNX_FOLD[node.op_type](*(self.consts[i] for i in node.input)))
            elif node.op_type == "Transpose" and node.input[0] in self.consts:
                self.consts[node.output[0]] = np.transpose(self.consts[node.input[0]], onnx_attrs(node).get("perm"))

    def refuse(self, node, problem: str) -> UsageError:
        label = f"node '{node.name or node.output[0]}' ({node.op_type})" if node is not None else "the graph"
        return UsageError(f"{self.name}: {label} {problem}; not an ML-Agents policy this program can rebuild exactly")

    def weight(self, name: str) -> bool:
        value = self.consts.get(name)
        return value is not None and value.dtype.kind == "f" and value.ndim >= 1

    def data_inputs(self, node) -> list:
        return [i for i in node.input if i and i not in self.consts]

    def dependencies(self, sources: dict) -> dict:
        """tensor -> the sources (sensor index, 'action_masks', 'recurrent_in') it depends on."""
        deps = {name: frozenset([key]) for name, key in sources.items()}
        for node in self.nodes:
            found = frozenset().union(*(deps.get(i, frozenset()) for i in node.input))
            for name in node.output:
                deps.setdefault(name, found)
        return deps

    def weight_nodes(self, deps: dict) -> list:
        out, self.absorbed = [], set()  # absorbed: a MatMul's bias Add, part of its linear layer
        for node in self.nodes:
            op, ins, a = node.op_type, list(node.input), onnx_attrs(node)
            if id(node) in self.absorbed:
                continue
            if op == "Gemm" and len(ins) > 1 and self.weight(ins[1]):
                if a.get("alpha", 1.0) != 1.0 or a.get("beta", 1.0) != 1.0 or a.get("transA", 0):
                    raise self.refuse(node, f"has attributes {a}")
                w = self.consts[ins[1]] if a.get("transB", 0) else self.consts[ins[1]].T
                bias = (self.consts[ins[2]].reshape(-1),) if len(ins) > 2 and self.weight(ins[2]) else ()
                out.append(WeightNode("linear", (w, *bias), node, deps.get(node.output[0], frozenset()), node.output[0]))
            elif op == "MatMul" and self.weight(ins[1]) and self.consts[ins[1]].ndim == 2:  # a 3-D input's Linear
                other = lambda add: add.input[add.input[0] == node.output[0]]
                adds = [c for c in self.consumers.get(node.output[0], []) if c.op_type == "Add" and len(c.input) == 2
                        and self.weight(other(c)) and self.consts[other(c)].ndim == 1][:1]
                self.absorbed.update(id(c) for c in adds)
                output = adds[0].output[0] if adds else node.output[0]
                out.append(WeightNode("linear", (self.consts[ins[1]].T, *(self.consts[other(c)] for c in adds)), node,
                                      deps.get(output, frozenset()), output))
            elif op == "Conv" and self.weight(ins[1]):
                bias = (self.consts[ins[2]],) if len(ins) > 2 and self.weight(ins[2]) else ()
                kind = "conv" + repr((a.get("strides"), a.get("pads", [0] * 4), a.get("group", 1), a.get("dilations", [1, 1])))
                out.append(WeightNode(kind, (self.consts[ins[1]], *bias), node, deps.get(node.output[0], frozenset()),
                                      node.output[0]))
            elif op == "LSTM":
                out.append(self.lstm_node(node, deps))
            elif op not in ONNX_PLUMBING and any(self.weight(i) for i in ins):
                slots = [k for k, i in enumerate(ins) if self.weight(i)]
                if len(slots) != 1 or len(ins) != 2:
                    raise self.refuse(node, "holds weights in a form ML-Agents does not write")
                out.append(WeightNode(f"{op}{slots[0]}", (self.consts[ins[slots[0]]],), node,
                                      deps.get(node.output[0], frozenset()), node.output[0]))
        return out

    def lstm_node(self, node, deps: dict) -> WeightNode:
        """ONNX's W [1, 4h, in], R [1, 4h, h], B [1, 8h] (gates i, o, f, c) as torch's weight_ih_l0,
        weight_hh_l0, bias_ih_l0, bias_hh_l0 (gates i, f, c, o)."""
        ins, a = list(node.input) + [""] * 8, onnx_attrs(node)
        if not (self.weight(ins[1]) and self.weight(ins[2]) and self.weight(ins[3])) or ins[4] or \
                a.get("direction", b"forward") not in (b"forward", "forward") or \
                set(a) - {"hidden_size", "direction"}:
            raise self.refuse(node, "is not the one-layer forward LSTM with biases ML-Agents writes")
        order = lambda x: np.concatenate([np.split(x, 4)[i] for i in (0, 2, 3, 1)])
        w, r, b = self.consts[ins[1]][0], self.consts[ins[2]][0], self.consts[ins[3]][0]
        half = b.shape[0] // 2
        return WeightNode("lstm", (order(w), order(r), order(b[:half]), order(b[half:])), node,
                          deps.get(node.output[0], frozenset()), node.output[0])

    def op_signatures(self, anchors: list, weights: dict) -> dict:
        """How many of each computing operator (with its attributes and scalar constants) the
        anchors depend on, and a node of each: two graphs computing the same thing agree."""
        seen, stack, count, first = set(), list(anchors), {}, {}
        while stack:
            node = self.producer.get(stack.pop())
            if node is None or id(node) in seen:
                continue
            seen.add(id(node))
            stack.extend(i for i in node.input if i)
            if node.op_type in ONNX_PLUMBING or id(node) in self.absorbed:
                continue
            if id(node) in weights:
                key = (weights[id(node)].kind,)
            else:
                scalars = tuple(float(np.round(self.consts[i], 6)) for i in node.input if i in self.consts
                                and self.consts[i].ndim == 0 and self.consts[i].dtype.kind == "f")
                attrs = tuple(sorted((k, tuple(v) if isinstance(v, list) else v) for k, v in onnx_attrs(node).items()
                                     if not hasattr(v, "dims")))
                key = (node.op_type, attrs, scalars)
            count[key] = count.get(key, 0) + 1
            first.setdefault(key, node)
        return count, first


@dataclass
class OnnxSensor:
    """One sensor as an ML-Agents ONNX feeds it: the tensor its processor reads (a graph input, a
    slice of a 1.x file's vector_observation, a 1.x channels-last image after its Transpose)."""
    tensor: str
    kind: str        # vector | visual | entities
    shape: tuple     # without the batch; images (C, H, W)
    feed: str        # the graph input that carries it


def onnx_slices(g: OnnxGraph, name: str, width: int) -> list:
    """(start, end, output) of the Slice nodes that cut input `name` along its features, which
    must be consecutive parts of all of it (1.x sensors of vector_observation, mask branches)."""
    cuts = sorted((a["starts"][0], min(a["ends"][0], width or 0), n.output[0]) for n in g.consumers.get(name, [])
                  for a in [onnx_attrs(n)] if n.op_type == "Slice" and a.get("axes", [0]) in ([1], [-1])
                  and len(a.get("starts", [])) == 1)
    if cuts and ([c[0] for c in cuts] != [0] + [c[1] for c in cuts[:-1]] or cuts[-1][1] != width):
        raise g.refuse(None, f"slices {name} as {[c[:2] for c in cuts]}, not into consecutive parts")
    return cuts


def onnx_sensors(g: OnnxGraph) -> list:
    """The sensors in ML-Agents' processor order: obs_0..obs_k (2.x and 1.1.0 files); for 1.x
    files the slices of vector_observation, the visual_observation_k and buffer obs_i, ordered as
    the observation encoder concatenates them (a buffer sensor sits at its own index i)."""
    kinds = {1: "vector", 2: "entities", 3: "visual"}
    entities, others = {}, []
    for name, dims in g.inputs.items():
        if name in ("action_masks", "recurrent_in"):
            continue
        shape = tuple(dims[1:])
        if None in shape or not shape or len(shape) not in kinds:
            raise g.refuse(None, f"has input {name} of shape {list(dims)}, which no ML-Agents sensor has")
        if re.fullmatch(r"obs_\d+", name):
            entities[int(name[4:])] = OnnxSensor(name, kinds[len(shape)], shape, name)
        elif name == "vector_observation" and len(shape) == 1:
            cuts = onnx_slices(g, name, shape[0]) or ([(0, shape[0], name)] if shape[0] else [])
            others += [OnnxSensor(t, "vector", (end - start,), name) for start, end, t in cuts]
        elif re.fullmatch(r"visual_observation_\d+", name) and len(shape) == 3:
            users = g.consumers.get(name, [])
            if len(users) == 1 and users[0].op_type == "Transpose" and list(onnx_attrs(users[0]).get("perm", [])) == [0, 3, 1, 2]:
                others.append(OnnxSensor(users[0].output[0], "visual", (shape[2], shape[0], shape[1]), name))
            else:
                others.append(OnnxSensor(name, "visual", shape, name))
        else:
            raise g.refuse(None, f"has input {name}, which no ML-Agents serializer writes")
    if others and entities and any(s.kind != "entities" for s in entities.values()):
        raise g.refuse(None, "mixes obs_N inputs with vector_observation / visual_observation_N")
    if len(others) > 1:  # 1.x: the encoder's Concat says the sensor order
        deps = g.dependencies({s.tensor: i for i, s in enumerate(others)})
        concat = next((n for n in g.nodes if n.op_type == "Concat" and sorted(
            i for t in g.data_inputs(n) for i in deps.get(t, ())) == list(range(len(others)))
            and all(len(deps.get(t, ())) == 1 for t in g.data_inputs(n))), None)
        if concat is None:
            raise g.refuse(None, "has no Concat of its sensors' encodings")
        others = [others[next(iter(deps[t]))] for t in g.data_inputs(concat)]
    total = len(entities) + len(others)
    if any(i >= total for i in entities):
        raise g.refuse(None, f"has inputs {sorted(f'obs_{i}' for i in entities)} with gaps in their numbering")
    rest = iter(others)
    return [entities[i] if i in entities else next(rest) for i in range(total)]


def onnx_settings(g: OnnxGraph, sensors: list, goal_input: GoalInput) -> PolicySettings:
    """ML-Agents' settings from the graph's structure (the template's export must then match it)."""
    deps = g.dependencies({s.tensor: i for i, s in enumerate(sensors)})
    weights = g.weight_nodes(deps)
    linears = [w for w in weights if w.kind == "linear"]
    if not linears:
        raise g.refuse(None, "has no Linear layer")
    normalize = any(c.op_type == "Sub" and len(c.input) == 2 and g.weight(c.input[1])
                    for s in sensors if s.kind == "vector" for c in g.consumers.get(s.tensor, []))
    inputs = []
    for i, s in enumerate(sensors):
        encoder = None
        if s.kind == "visual":
            own = [w for w in weights if w.kind.startswith("conv") and w.deps == {i}]
            kernels = list(dict.fromkeys((w.values[0].shape[0], w.values[0].shape[2]) for w in own))
            pooled = any(n.op_type == "MaxPool" and deps.get(n.output[0]) == {i} for n in g.nodes)
            found = {((16, 8), (32, 4)): "simple", ((32, 8), (64, 4), (64, 3)): "nature_cnn", ((35, 3), (144, 3)): "match3",
                     (): "fully_connected"}
            encoder = "resnet" if pooled else found.get(tuple(kernels))
            if encoder is None:
                raise g.refuse(own[0].node, f"starts convolutions {kernels} that match none of ML-Agents' visual encoders")
        inputs.append(InputSpec(f"obs_{i}", s.kind, s.shape, normalize and s.kind == "vector", encoder))
    memory = int(g.inputs["recurrent_in"][-1] or 0) if "recurrent_in" in g.inputs else 0
    shape_out = lambda name: g.consts.get(g.producer[name].input[0] if name in g.producer and
                                          g.producer[name].op_type == "Identity" else name)
    continuous = shape_out("continuous_action_output_shape") if "continuous_action_output_shape" in g.outputs else None
    continuous = int(continuous.reshape(-1)[0]) if continuous is not None and continuous.size == 1 else 0
    branches = [end - start for start, end, _ in onnx_slices(g, "action_masks", (g.inputs.get("action_masks") or [0])[-1])]
    sac = any(n.op_type == "Tanh" for n in g.nodes)
    # -- the body: from the last action head back to the encoders' Concat
    head = linears[-1]
    layers, hyper, lstm, tensor = 0, None, None, g.data_inputs(head.node)[0]
    by_node = {id(w.node): w for w in linears}
    while tensor in g.producer:
        node = g.producer[tensor]
        data = g.data_inputs(node)
        if id(node) in by_node:
            layers += 1
        elif node.op_type == "MatMul" and len(data) == 2:  # x @ the weights a hypernetwork generated
            if layers:
                raise g.refuse(node, "is a generated (hypernetwork) layer before the body's last layer")
            hyper, layers = node, 1
        elif node.op_type == "LSTM":
            lstm = node
        elif not (node.op_type in ("Mul", "Sigmoid", "Reshape", "Transpose", "Squeeze", "Unsqueeze", "Add", "Identity")
                  or node.op_type == "Concat" and len(data) == 1):
            break
        tensor = data[0]
    if not layers:
        raise g.refuse(head.node, "is an action head with no body layer before it")
    hidden = head.values[0].shape[1]
    if memory or lstm is not None:
        cell = next((w for w in weights if w.node is lstm), None)
        if cell is None or cell.values[1].shape[1] * 2 != memory:
            raise g.refuse(lstm, f"is not an LSTM over a memory of {memory}")
        hidden = cell.values[0].shape[1]
    if hyper is not None:
        goal = sorted(i for i in deps.get(hyper.input[1], ()) if isinstance(i, int))
        if goal_input is not None and goal_indices(goal_input) != tuple(goal):
            raise UsageError(f"--goal-input {','.join(map(str, goal_indices(goal_input)))}: in {g.name} the "
                             f"hypernetwork reads {', '.join(f'input {i}' for i in goal) or 'no input'}")
        for i in goal:
            inputs[i].goal = True
    elif goal_input is not None:
        raise UsageError(f"--goal-input {','.join(map(str, goal_indices(goal_input)))}: {g.name} has no "
                         f"goal-conditioned (hypernetwork) body")
    return PolicySettings(inputs, int(hidden), layers, normalize, continuous, branches, memory, sac, sac,
                          hyper is not None, [], "sac" if sac else None, ONNX_ONLY_SOURCE)


def onnx_state_dict(g: OnnxGraph, sensors: list, settings: PolicySettings) -> dict:
    """The file's weights as the state dict of SimpleActor(settings): paired with a tagged
    template's export (see the section's head)."""
    import onnx
    with torch.device("meta"):
        wanted = sum(v.numel() for v in SimpleActor(settings).state_dict().values())
    if wanted > 2 * sum(v.size for v in g.consts.values()) + 4096:
        raise g.refuse(None, f"declares inputs that need {wanted:,} weights, more than the file holds")
    template = SimpleActor(settings).eval()
    generator, canonical, tags = torch.Generator().manual_seed(0), {}, {}
    with torch.no_grad():
        for key, value in template.state_dict(keep_vars=True).items():
            first = canonical.setdefault(value.data_ptr(), key)  # processors.<i> is observation_encoder.processors.<i>
            if first == key and key.rsplit(".", 1)[-1] not in SETTINGS_KEYS and value.is_floating_point():
                value.copy_(torch.rand(value.shape, generator=generator) + 0.5)
                tags[key] = value.detach().numpy().copy()
    t = OnnxGraph(onnx.load_from_string(export_mlagents_onnx(template)), "template")
    extra = {"action_masks": "action_masks", "recurrent_in": "recurrent_in"}
    t_deps = t.dependencies({**{f"obs_{i}": i for i in range(len(sensors))}, **extra})
    f_deps = g.dependencies({**{s.tensor: i for i, s in enumerate(sensors)}, **extra})
    t_weights, f_weights = t.weight_nodes(t_deps), g.weight_nodes(f_deps)

    def which(value: np.ndarray) -> tuple:
        """(parameter, True when the graph holds sqrt(running_variance / normalization_steps), steps 1 here)."""
        for key, tag in tags.items():
            if tag.shape == value.shape and np.array_equal(tag, value):
                return key, False
        for key, tag in tags.items():
            if key.endswith("running_variance") and tag.shape == value.shape and \
                    np.allclose(np.sqrt(tag), value, rtol=1e-6, atol=0):
                return key, True
        raise g.refuse(None, "cannot be paired with ML-Agents' modules (a template weight is unaccounted for)")

    groups = {}
    for side, nodes in ((0, t_weights), (1, f_weights)):
        for w in nodes:
            groups.setdefault((w.signature, w.deps), ([], []))[side].append(w)
    for (signature, _), (mine, theirs) in groups.items():
        if len(theirs) > len(mine):
            raise g.refuse(theirs[len(mine)].node, f"holds weights {[list(s) for s in signature[1]]} that no "
                                                   f"ML-Agents module of these settings has there")
    found, anchors = {}, ([], [])
    for (signature, _), (mine, theirs) in groups.items():
        if len(mine) > len(theirs):
            key = which(mine[len(theirs)].values[0])[0]
            raise g.refuse(None, f"has no node for ML-Agents' {key} {list(tags[key].shape)}")
        for a, b in zip(mine, theirs):
            for tag, value in zip(a.values, b.values):
                key, rooted = which(tag)
                if not np.isfinite(value).all():
                    raise g.refuse(b.node, "holds NaN or infinite weights")
                value = np.square(value.astype(np.float64)).astype(np.float32) if rooted else value.astype(np.float32)
                if key in found and not np.array_equal(found[key], value):
                    raise g.refuse(b.node, f"gives {key} a second, different value")
                found[key] = value
                if key.startswith("action_model."):
                    anchors[0].append(a.output), anchors[1].append(b.output)
    for graph, names in zip((t, g), anchors):
        names += [n.output[0] for n in graph.nodes if n.op_type in ("Softmax", "LSTM")] + \
                 [n.output[-1] for n in graph.nodes if n.op_type == "LSTM"]
    (mine, _), (theirs, nodes) = [graph.op_signatures(names, {id(w.node): w for w in weights}) for graph, names, weights
                                  in ((t, anchors[0], t_weights), (g, anchors[1], f_weights))]
    if mine != theirs:
        extra = next((k for k in theirs if theirs[k] > mine.get(k, 0)), None)
        missing = next((k for k in mine if mine[k] > theirs.get(k, 0)), None)
        label = lambda k: k and k[0] + (f"({', '.join([f'{a}={v}' for a, v in k[1]] + [str(x) for x in k[2]])})" if len(k) > 1 else "")
        raise g.refuse(nodes.get(extra), f"computes {label(extra) or 'less'} where ML-Agents' modules compute "
                                         f"{label(missing) or 'nothing'}")
    missing = [key for key in tags if key not in found]
    if missing:
        raise g.refuse(None, f"has no weights for ML-Agents' {missing[0]}")
    state = {}
    for key, value in template.state_dict().items():
        first = canonical[value.data_ptr()] if value.numel() else key
        state[key] = torch.from_numpy(found[first].copy()) if first in found else value.clone()
    return state


def file_named_inputs(g: OnnxGraph, sensors: list, settings: PolicySettings, state: dict) -> tuple:
    """The policy takes the file's own inputs. A 1.x file's vector sensors arrive concatenated in
    vector_observation: one input whose normaliser is theirs side by side (it works elementwise),
    the body's first layer taking its columns in the file's order (the same sums)."""
    if all(s.feed == s.tensor for s in sensors):
        return settings, state
    if settings.hyper:
        raise g.refuse(None, "is a 1.x file with a goal signal, which ML-Agents' 1.x serializer never wrote")
    feeds = list(dict.fromkeys(s.feed for s in sorted(sensors, key=lambda s: list(g.inputs).index(s.feed))))
    vectors = sorted((i for i, s in enumerate(sensors) if s.feed == "vector_observation"),
                     key=lambda i: onnx_attrs(g.producer[sensors[i].tensor]).get("starts", [0])[0]
                     if sensors[i].tensor in g.producer else 0)
    groups = [vectors if feed == "vector_observation" else [next(i for i, s in enumerate(sensors) if s.feed == feed)]
              for feed in feeds]
    old = settings.inputs
    width = lambda i: old[i].shape[0] if old[i].kind == "vector" else settings.hidden_units if old[i].kind == "visual" else 0
    starts = np.cumsum([0] + [width(i) for i in range(len(old))])
    columns = [c for group in groups for i in group for c in range(starts[i], starts[i + 1])]
    inputs, out = [], {}
    for k, (feed, group) in enumerate(zip(feeds, groups)):
        spec = old[group[0]]
        if feed == "vector_observation":
            spec = InputSpec(feed, "vector", (sum(old[i].shape[0] for i in group),), settings.normalize)
            if settings.normalize:
                for prefix in ("network_body.processors", "network_body.observation_encoder.processors"):
                    part = lambda name: torch.cat([state[f"{prefix}.{i}.normalizer.{name}"] for i in group])
                    out.update({f"{prefix}.{k}.normalizer.running_mean": part("running_mean"),
                                f"{prefix}.{k}.normalizer.running_variance": part("running_variance"),
                                f"{prefix}.{k}.normalizer.normalization_steps": torch.tensor(1)})
        else:
            last = spec.kind == "visual" and sensors[group[0]].tensor != feed  # read through a Transpose
            spec = InputSpec(feed, spec.kind, tuple(g.inputs[feed][1:]) if last else spec.shape, spec.normalized,
                             spec.encoder, channels_last=last)
            for key, value in state.items():
                m = re.match(r"^(network_body\.(?:observation_encoder\.)?processors)\.(\d+)\.(.+)$", key)
                if m and int(m.group(2)) == group[0]:
                    out[f"{m.group(1)}.{k}.{m.group(3)}"] = value
        inputs.append(spec)
    for key, value in state.items():
        if re.match(r"^network_body\.(?:observation_encoder\.)?processors\.", key):
            continue
        if key in ("network_body._body_endoder.seq_layers.0.weight", "network_body.observation_encoder.x_self_encoder.seq_layers.0.weight"):
            value = value[:, columns + list(range(len(columns), value.shape[1]))]
        out[key] = value.contiguous()
    return PolicySettings(**{**settings.__dict__, "inputs": inputs}), out


def onnx_alone_source(option: str, path: Path, folder: Optional[Path] = None) -> ModelSource:
    """A model given as its ML-Agents ONNX alone (--onnx with no checkpoint, a folder holding
    only <Behavior>.onnx)."""
    if _path_kind(option, path) != "file":
        raise UsageError(f"{option} {short_path(path)}: no such file")
    return ModelSource(path, folder, path.stem, option)


def load_onnx_alone(path: Path, expect_sha256: Optional[str] = None, goal_input: GoalInput = None) -> LoadedCheckpoint:
    """A policy from its ML-Agents ONNX alone: ML-Agents' modules with the file's weights, built
    and loaded (strict) as a checkpoint's are."""
    import onnx
    t0 = time.perf_counter()
    sha = check_sha256(path, expect_sha256)
    interface = read_onnx_interface(path)
    model = onnx.load(str(path), load_external_data=False)
    if any(t.data_location == onnx.TensorProto.EXTERNAL for t in model.graph.initializer):
        raise UsageError(f"{path}: keeps weights in external files; refused (ML-Agents writes them inside)")
    try:
        g = OnnxGraph(model, path.name)
        sensors = onnx_sensors(g)
        settings = onnx_settings(g, sensors, goal_input)
        settings, state = file_named_inputs(g, sensors, settings, onnx_state_dict(g, sensors, settings))
    except (KeyError, IndexError, ValueError, TypeError, AttributeError) as exc:  # a structure none of the above knows
        raise UsageError(f"{path}: its graph is not one ML-Agents writes ({type(exc).__name__}: "
                         f"{str(exc).splitlines()[0][:120] if str(exc) else ''}); not rebuilt")
    check_state_dict(state, lambda problem: UsageError(f"{path}: not a usable ML-Agents policy: {problem}"))
    return LoadedCheckpoint(path, settings, build_actor(settings, state, path), interface, None, sha,
                            time.perf_counter() - t0)


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
    """Import torch_npu quietly, as the original NPU adaptation does; None when it is not installed."""
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
    try:
        return torch.npu.device_count() if torch.npu.is_available() else 0
    except Exception:
        return 0


def cuda_count() -> int:
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
    return "a CPU-only torch build" if torch.version.cuda is None else f"CUDA {torch.version.cuda} build sees no GPU"


def resolve_device(text: str):
    """A torch.device for --device, checking that it exists."""
    device = torch.device(select_device(text, npu_count, cuda_count))
    full_float32(device)
    return device


def full_float32(device) -> None:
    """Parity within 1e-5 needs float32 to mean float32: no TF32 on CUDA (cuDNN convolutions
    default to it) and no HF32 on Ascend (torch_npu's convolutions default to it; its matmuls
    do not, but a host may have switched them on). Without these, every camera policy's
    convolutions would round their inputs to a shortened mantissa on the accelerator."""
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
    elif device.type == "npu":
        for group in ("conv", "matmul", "aclnn"):  # torch.npu.<group>.allow_hf32, where this torch_npu has it
            flags = getattr(torch.npu, group, None)
            if flags is not None and hasattr(flags, "allow_hf32"):
                flags.allow_hf32 = False


def synchronize(device) -> None:
    """Wait for the device, so that a clock read afterwards sees finished work."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    elif device.type == "npu":
        torch.npu.synchronize(device)


def cast_actor(actor: "SimpleActor", dtype) -> "SimpleActor":
    """The actor in `dtype`, its normalisers kept float32 (their variance sums overflow float16);
    float64 (the precision reference) converts everything."""
    for module in actor.modules():
        if dtype == torch.float64 or not isinstance(module, Normalizer):
            module._apply(lambda t: t.to(dtype) if t.is_floating_point() else t, recurse=False)
    actor.network_body.observation_encoder.compute_dtype = dtype
    return actor


class TorchEngine:
    """The policy's modules on cpu/cuda/npu. On CUDA (and on NPU where torch_npu has graph
    capture: not yet run on hardware) each batch size is captured once as a device graph."""
    name = "torch"

    def __init__(self, actor: "SimpleActor", device, dtype: str, graphs: bool = True):
        self.device, self.dtype = device, getattr(torch, dtype)
        self.heads = EngineHeads(cast_actor(copy.deepcopy(actor), self.dtype).to(device)).eval()
        self.output_names = engine_output_names(actor.settings)
        self.graphs: dict = {}
        api = torch.cuda if device.type == "cuda" else getattr(torch, "npu", None) if device.type == "npu" else None
        graph_cls = getattr(api, "CUDAGraph" if device.type == "cuda" else "NPUGraph", None) if api else None
        self.graph_api = api if graphs and graph_cls is not None and hasattr(api, "graph") else None
        self.graph_cls = graph_cls

    def _forward(self, tensors: list):
        return self.heads(*tensors)

    def _captured(self, shapes: tuple):
        """(static inputs, static outputs, graph) for one set of input shapes, captured on first use."""
        if shapes not in self.graphs and len(self.graphs) < 8:
            static_in = [torch.zeros(shape, device=self.device) for shape in shapes]
            if self.heads.discrete:
                static_in[self.heads.n_inputs] += 1.0  # all allowed while warming up
            stream = self.graph_api.Stream(device=self.device)
            stream.wait_stream(self.graph_api.current_stream(self.device))
            with self.graph_api.stream(stream), torch.inference_mode():
                for _ in range(3):
                    self._forward(static_in)
            self.graph_api.current_stream(self.device).wait_stream(stream)
            graph = self.graph_cls()
            with torch.inference_mode(), self.graph_api.graph(graph):
                static_out = self._forward(static_in)
            self.graphs[shapes] = (static_in, static_out, graph)
        return self.graphs.get(shapes)

    def run(self, flat: list, names: Optional[list] = None) -> dict:
        """Engine inputs (float32 numpy, in input_names order) -> the outputs `names` (all
        by default) as numpy; only those are copied to the host."""
        names = self.output_names if names is None else names
        host = [torch.from_numpy(x if x.flags.writeable else x.copy()) for x in flat]  # e.g. a read-only memory map
        if self.graph_api is not None:
            try:
                captured = self._captured(tuple(tuple(x.shape) for x in flat))
            except Exception:  # capture unsupported here: stay eager from now on
                self.graph_api, captured = None, None
            if captured:
                static_in, static_out, graph = captured
                for dst, src in zip(static_in, host):
                    dst.copy_(src, non_blocking=False)
                graph.replay()
                return self._to_host(static_out, names)
        with torch.inference_mode():
            return self._to_host(self._forward([x.to(self.device) for x in host]), names)

    def _to_host(self, outs, names: list) -> dict:
        """The outputs `names` as numpy (.cpu() waits for the device)."""
        return {name: out.cpu().numpy() for name, out in zip(self.output_names, outs) if name in names}


class OnnxRuntimeEngine:
    """The same modules exported (deterministic outputs only) and run by onnxruntime on the CPU.
    float32 only."""
    name = "onnxruntime"

    def __init__(self, actor: "SimpleActor"):
        heads = EngineHeads(actor)
        self.output_names, self.input_names = engine_output_names(actor.settings), input_names(actor.settings)
        self.session = onnx_session(export_engine_onnx(heads))
        # InferenceSession.run re-checks on every call what is fixed here (input names, OrtValue
        # ownership, graph capture) through pybind properties: 5-10 µs a call once a run has left the
        # caches cold, a tenth of a small visual policy's batch-1 call. The binding's run skips that.
        binding = getattr(self.session, "_sess", None)
        self._run = binding.run if callable(getattr(binding, "run", None)) else self.session.run

    def run(self, flat: list, names: Optional[list] = None) -> dict:
        names = self.output_names if names is None else names
        return dict(zip(names, self._run(names, dict(zip(self.input_names, flat)), None)))


def onnx_session(model_or_path, tuned: bool = True, threads: Optional[int] = None):
    """An onnxruntime CPU session; `tuned` enables every graph optimisation."""
    try:
        import onnxruntime as ort
    except ImportError:
        raise UsageError("onnxruntime is not installed (pip install onnxruntime)")
    options = ort.SessionOptions()
    options.log_severity_level = 4  # its warnings and errors would print beside ours (its errors raise, and are told)
    if tuned:
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    if threads:
        options.intra_op_num_threads = threads
    source = model_or_path if isinstance(model_or_path, bytes) else str(model_or_path)
    try:
        return ort.InferenceSession(source, options, providers=["CPUExecutionProvider"])
    except Exception as exc:
        raise UsageError(f"{model_or_path if isinstance(model_or_path, (str, Path)) else 'model'}: "
                         f"onnxruntime cannot load it ({str(exc).splitlines()[0][:160] if str(exc) else type(exc).__name__})")


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
    if name != "auto":
        raise UsageError(f"engine {name!r}: expected one of {', '.join(ENGINES)}")
    return "onnxruntime" if device.type == "cpu" and dtype == "float32" and has_ort else "torch"


# =========================================================================================
# The policy: load once, act many times (the Python API; every mode goes through it)
# =========================================================================================

@dataclass
class LoadedCheckpoint:
    path: Path
    settings: PolicySettings
    actor: "SimpleActor"                 # float32, CPU, as loaded
    onnx: Optional[OnnxInterface]        # the ML-Agents ONNX that belongs to it, when found
    global_step: Optional[int] = None
    sha256: str = ""
    load_s: float = 0.0

    @property
    def parameters(self) -> int:
        """Weights and biases of the acting network (566,805 for Huggy), normalisers and value heads excluded."""
        return sum(p.numel() for name, p in self.actor.named_parameters()
                   if not name.endswith("_vector") and not name.endswith("_deprecated")
                   and not name.startswith("value_heads.") and name != "version_number"
                   and not (name.endswith("log_sigma") and p.dim() == 2 and not name.endswith("weight")))


def load_checkpoint(path: Path, onnx_path: Optional[Path] = None, model_dir: Optional[Path] = None,
                    behavior: Optional[str] = None, expect_sha256: Optional[str] = None,
                    goal_input: GoalInput = None) -> LoadedCheckpoint:
    """Read, validate and rebuild one checkpoint (sha256 checked before unpickling)."""
    t0 = time.perf_counter()
    path = Path(path)
    if not path.is_file():
        raise UsageError(f"{path}: no such checkpoint file")
    if path.suffix.lower() == ".onnx":  # no checkpoint: the ONNX alone
        return load_onnx_alone(path, expect_sha256, goal_input)
    sha = check_sha256(path, expect_sha256)
    obj = read_checkpoint(path)
    state = obj["Policy"]
    step = global_step(obj)
    given = onnx_path is not None  # named by the user: it must be this policy's (NotThisPolicy)
    onnx_path = onnx_path or find_checkpoint_onnx(path, model_dir, behavior, step)
    needs = onnx_path is not None and policy_needs_onnx(state)
    onnx_iface = read_onnx_interface(onnx_path) if needs or given else None
    needed = onnx_iface if needs else None

    def rebuild(iface):
        settings = infer_settings(state, path, iface, read_config(model_dir, behavior), trainer_of(obj), goal_input)
        return settings, build_actor(settings, state, path)
    try:
        settings, actor = rebuild(needed)
    except UsageError:
        if not given or needed is None:
            raise
        rebuild(None)  # the checkpoint stands without that ONNX: the ONNX is what does not fit
        shapes = onnx_input_shapes(onnx_iface)
        raise NotThisPolicy(f"{onnx_path.name} takes inputs {[list(s) for s in shapes or []]}, which the checkpoint's "
                            f"layers do not fit: not this policy")
    difference = onnx_difference(onnx_iface, state, settings) if given else None
    if difference:
        raise NotThisPolicy(f"{onnx_path.name} {difference}: not this policy")
    return LoadedCheckpoint(path, settings, actor, onnx_iface if needed is not None else None, step, sha,
                            time.perf_counter() - t0)


def policy_needs_onnx(state: dict) -> bool:
    """Whether the checkpoint leaves input shapes open: inputs without keys (unnormalised vectors),
    images, entity buffers. Huggy-like policies (every input normalised) skip reading the ONNX."""
    seen = {int(m.group(1)) for k in state for m in [PROCESSOR_KEY.match(k)] if m}
    if any(not PROCESSOR_KEY.match(k).group(2).startswith("normalizer.") for k in state if PROCESSOR_KEY.match(k)):
        return True
    if not seen or sorted(seen) != list(range(len(seen))):
        return True
    widths = sum(int(state[f"{ENCODER_KEYS}processors.{i}.normalizer.running_mean"].shape[0]) for i in seen
                 if f"{ENCODER_KEYS}processors.{i}.normalizer.running_mean" in state)
    first = state.get("network_body._body_endoder.seq_layers.0.weight")
    return not (isinstance(first, torch.Tensor) and first.dim() == 2 and first.shape[1] == widths)


def mlagents_onnx_files(path: Path, model_dir: Optional[Path], behavior: Optional[str],
                       step: Optional[int]) -> list:
    """Where ML-Agents writes a checkpoint's ONNX, existing or not: <Behavior>-<step>.onnx beside
    it (when the step is known), then <Behavior>.onnx of its run folder."""
    name = behavior or path.parent.name
    step = _step_of(path.name, name) or step
    return ([path.parent / f"{name}-{step}.onnx"] if step is not None else []) + \
        [(model_dir or path.parent.parent) / f"{name}.onnx"]


def find_checkpoint_onnx(path: Path, model_dir: Optional[Path], behavior: Optional[str],
                         step: Optional[int]) -> Optional[Path]:
    """The ML-Agents ONNX that belongs to a checkpoint: <Behavior>-<step>.onnx beside it, else
    <Behavior>.onnx of its run folder when the checkpoint is the final one (or the only one)."""
    if path.suffix.lower() == ".onnx":  # a policy loaded from its ONNX alone
        return path
    *beside, top = mlagents_onnx_files(path, model_dir, behavior, step)
    if beside and beside[0].is_file():
        return beside[0]
    if top.is_file():
        name = behavior or path.parent.name
        final = final_step(model_dir, name) if model_dir else None
        step = _step_of(path.name, name) or step
        if step is None or final is None or step == final:
            return top
    return None


MEMORIES_LIMIT = 100_000  # agent ids whose memory get_action keeps (the stream: AgentMemories)
FLOAT32 = np.dtype(np.float32)


@dataclass
class Actions:
    """mlagents_envs' ActionTuple where mlagents_envs is not installed: the same fields, continuous
    float32 [agents, continuous size] and discrete int32 [agents, branches] (zero-width when none)."""
    continuous: np.ndarray
    discrete: np.ndarray


_ACTION_TUPLE: list = []


def action_tuple(continuous: np.ndarray, discrete: np.ndarray):
    """mlagents_envs' ActionTuple when it is installed (what env.set_actions takes), else Actions."""
    if not _ACTION_TUPLE:
        try:
            from mlagents_envs.base_env import ActionTuple
        except Exception:  # not installed, or not importable with this numpy/python
            ActionTuple = Actions
        _ACTION_TUPLE.append(ActionTuple)
    return _ACTION_TUPLE[0](continuous=continuous, discrete=discrete)


class Policy:
    """A loaded ML-Agents policy on one device and engine (docs/python-api.md drives it from
    mlagents_envs and from gymnasium-style loops).

        policy = inference.load("ppo-Huggy", device="cpu")
        out = policy.act(obs)                      # {"continuous_actions": ..., "discrete_actions": ..., "memory": ...}
        actions = policy.get_action(decision_steps, terminal_steps)   # mlagents_envs: an ActionTuple

    Observations are float32 as ML-Agents hands them to a policy: a camera channel-first
    [C, H, W] with values in [0, 1]; a uint8 camera frame is pixels, scaled by 1/255 as image files
    are (other dtypes are taken as given). Action masks: numbers are 1 = allowed (gymnasium's
    convention), one array [sum(branches)] or [rows, sum(branches)], or a per-branch list (gymnasium's
    MultiDiscrete masks); a per-branch list of bool arrays is ML-Agents' DecisionSteps.action_mask,
    True = masked; a single bool array is refused (the two conventions read it oppositely).
    Sampling draws fresh noise on every call from the policy's own generator (load(seed=...));
    seed= on a call reproduces that call alone.
    """

    def __init__(self, checkpoint: LoadedCheckpoint, device="cpu", dtype: str = "float32", engine: str = "auto",
                 graphs: bool = True, seed: Optional[int] = None):
        self.checkpoint, self.settings = checkpoint, checkpoint.settings
        self.device = device if isinstance(device, torch.device) else resolve_device(str(device))
        if dtype not in DTYPES:
            raise UsageError(f"dtype {dtype!r}: expected one of {', '.join(DTYPES)}")
        if seed is not None and (not isinstance(seed, (int, np.integer)) or isinstance(seed, bool)
                                 or not 0 <= seed < 2**63):
            raise UsageError(f"seed {seed!r}: expected a non-negative integer (or None: from the OS)")
        self.dtype = dtype
        self.engine_name = choose_engine(engine, self.device, dtype)
        self.engine = (OnnxRuntimeEngine(checkpoint.actor) if self.engine_name == "onnxruntime"
                       else TorchEngine(checkpoint.actor, self.device, dtype, graphs))
        # the engine outputs each kind of step needs (no host copy of the others)
        self.fetch = {deterministic: step_outputs(self.settings, deterministic) for deterministic in (True, False)}
        continuous = checkpoint.actor.action_model._continuous_distribution
        self.sigma = (torch.exp(continuous.log_sigma.detach()).reshape(-1).numpy()
                      if continuous is not None and not self.settings.conditional_sigma else None)
        # sampling noise when a call names no seed: fresh on every call, reproducible through load(seed=)
        self.generator = torch.Generator().manual_seed(int.from_bytes(os.urandom(8), "little") >> 1
                                                       if seed is None else int(seed))
        self.memories: dict = {}         # get_action: agent id -> its LSTM memory [memory_size]
        self._shapes = [tuple(i.shape) for i in self.settings.inputs]
        self._checked_masks: dict = {}   # small masks already checked (their bytes) -> the engine's array
        self._zeros: dict = {}           # (shape) -> read-only float32 zeros

    # -- what the policy is
    @property
    def info(self) -> dict:
        s, c = self.settings, self.checkpoint
        return {"behavior": c.path.stem if c.path.suffix.lower() == ".onnx" else c.path.parent.name, "trainer": s.trainer, "shared_critic": bool(s.value_streams),
                "inputs": [{"name": i.name, "kind": i.kind, "shape": list(i.shape), "normalized": i.normalized,
                            "encoder": i.encoder, "goal": i.goal} for i in s.inputs],
                "continuous_size": s.continuous_size, "discrete_branches": list(s.discrete_branches),
                "memory_size": s.memory_size, "hidden_units": s.hidden_units, "num_layers": s.num_layers,
                "body": "hypernetwork (goal-conditioned)" if s.hyper else "mlp",
                "continuous_head": None if not s.continuous_size else
                ("state-dependent sigma, tanh squash (SAC)" if s.tanh_squash else "fixed log_sigma, clip(±3)/3"),
                "parameters": c.parameters, "settings_source": s.source, "checkpoint": str(c.path),
                "sha256": c.sha256, "global_step": c.global_step, "device": str(self.device), "dtype": self.dtype,
                "engine": self.engine_name}

    # -- inputs
    def prepare(self, observations, action_masks=None, memory=None) -> tuple:
        """Check and batch the inputs: (engine inputs, rows, batched). UsageError names what is wrong."""
        ready = self._ready(observations, action_masks, memory)
        if ready is not None:
            return ready
        s = self.settings
        arrays, rows, batched = self.observation_arrays(observations)
        if s.discrete_branches:
            arrays.append(self.mask_array(action_masks, rows, batched))
        elif action_masks is not None:
            raise UsageError("action masks given, but this policy has no discrete actions")
        if s.memory_size:
            arrays.append(self.memory_array(memory, rows, batched))
        elif memory is not None:
            raise UsageError("a memory given, but this policy has no memory (LSTM)")
        self._remember_sizes(arrays)
        return arrays, rows, batched

    def _ready(self, observations, masks, memory) -> Optional[tuple]:
        """The fast path, the same checks made cheaply (one function: at batch 1 each call costs):
        observations that already are what the engine takes (float32, C-contiguous, [rows, *shape] or
        one observation [*shape]) with every value finite (x * 0 is 0 for a finite x, nan for nan or
        ±inf: one dot product with zeros tells), a mask this policy has checked before (its bytes), a
        memory float32 [rows, memory_size] with finite values: (arrays, rows, batched), nothing
        copied. None sends anything else (and anything wrong) through the full checks and their
        messages, which also make the zeros this path needs for those sizes."""
        if type(observations) is np.ndarray:
            observations = (observations,)
        elif type(observations) not in (list, tuple) or len(observations) != len(self._shapes):
            return None
        zeros, arrays, rows, batched = self._zeros, [], None, None
        for x, shape in zip(observations, self._shapes):
            if type(x) is not np.ndarray or x.dtype is not FLOAT32 or not x.flags.c_contiguous:
                return None
            one = x.shape == shape
            if not one and x.shape[1:] != shape or batched is not None and batched == one:
                return None
            batched = not one
            x = x[None] if one else x
            rows = x.shape[0] if rows is None else rows
            z = zeros.get(x.size)
            if x.shape[0] != rows or z is None or np.vdot(x, z) != 0:
                return None
            arrays.append(x)
        s = self.settings
        if s.discrete_branches:
            key = (rows, None, masks.dtype, masks.shape, masks.tobytes()) \
                if type(masks) is np.ndarray and masks.nbytes <= MASK_KEY_BYTES else mask_key(masks, rows)
            checked = self._checked_masks.get(key) if key is not None else None
            if checked is None:
                return None
            arrays.append(checked)
        elif masks is not None:
            return None
        if s.memory_size:
            if memory is None:
                memory = zeros.get((rows, 1, s.memory_size))
                if memory is None:
                    return None
                arrays.append(memory)
            else:
                z = zeros.get(memory.size) if type(memory) is np.ndarray else None
                if z is None or memory.dtype is not FLOAT32 or memory.shape != (rows, s.memory_size) or \
                        not memory.flags.c_contiguous or np.vdot(memory, z) != 0:
                    return None
                arrays.append(memory[:, None])
        elif memory is not None:
            return None
        return arrays, rows, batched

    def observation_arrays(self, observations) -> tuple:
        """The observations as float32 [rows, *shape] in input order: (arrays, rows, batched)."""
        s = self.settings
        if isinstance(observations, dict):
            unknown = sorted(set(observations) - {i.name for i in s.inputs})
            if unknown:
                raise UsageError(f"unknown input {unknown[0]!r}; this policy takes {', '.join(i.name for i in s.inputs)}")
            missing = [i.name for i in s.inputs if i.name not in observations]
            if missing:
                raise UsageError(f"input {missing[0]} is missing; this policy takes {', '.join(i.name for i in s.inputs)}")
            observations = [observations[i.name] for i in s.inputs]
        elif not isinstance(observations, (list, tuple)) or (len(s.inputs) == 1 and not _is_array_list(observations)):
            observations = [observations]
        if len(observations) != len(s.inputs):
            raise UsageError(f"expected {len(s.inputs)} input(s) ({', '.join(i.name for i in s.inputs)}), "
                             f"got {len(observations)}")
        arrays, rows, batched = [], None, None
        for spec, value in zip(s.inputs, observations):
            array, is_batch = shape_input(spec, value)
            if rows is not None and (array.shape[0] != rows or is_batch != batched):
                raise UsageError(f"{spec.name}: {array.shape[0] if is_batch else 'one'} observation(s), but "
                                 f"{s.inputs[0].name} has {rows if batched else 'one'}")
            rows, batched = array.shape[0], is_batch
            arrays.append(array)
        return arrays, rows, batched

    def _remember_sizes(self, arrays: list) -> None:
        """The zeros the fast path's finite-values check needs to take arrays of these sizes next time
        (small ones only: beyond, the call's own work dwarfs the full check)."""
        for array in arrays:
            if array.size <= 4096:
                self._zeros_of(array.size)

    def _zeros_of(self, shape) -> np.ndarray:
        """Read-only float32 zeros of a size (the fast path's finite-values check) or shape (memories)."""
        zeros = self._zeros.get(shape)
        if zeros is None:
            if len(self._zeros) >= 64:
                self._zeros.clear()
            zeros = self._zeros[shape] = np.zeros(shape, np.float32)
            zeros.flags.writeable = False
        return zeros

    def mask_array(self, masks, rows: int, batched: bool) -> np.ndarray:
        """The action masks as the engine takes them, float32 [rows, sum(branches)], 1 = allowed, from
        any form the class docstring lists (shape_masks). A small mask is checked once: a later call
        with the same bytes reuses the checked array."""
        key = mask_key(masks, rows)
        checked = self._checked_masks.get(key) if key is not None else None
        if checked is None:
            checked = shape_masks(masks, self.settings.discrete_branches, rows, batched)
            if key is not None:
                if len(self._checked_masks) >= 1024:  # (at most ~2 MB of keys and arrays)
                    self._checked_masks.clear()
                checked.flags.writeable = False  # (prepare() hands it out)
                self._checked_masks[key] = checked
        return checked

    def memory_array(self, memory, rows: int, batched: bool) -> np.ndarray:
        """An LSTM memory as the engine takes it, [rows, 1, memory_size]; zeros when None."""
        size = self.settings.memory_size
        if memory is None:
            return self._zeros_of((rows, 1, size))
        return shape_memory(memory, size, rows, batched)

    # -- acting
    def act(self, observations, action_masks=None, deterministic: bool = True, seed: Optional[int] = None,
            memory=None, generator=None) -> dict:
        """Actions for one observation or a batch (see the class docstring for the conventions).
        `action_masks`: 1 = allowed (numbers), or ML-Agents' per-branch bool list (True = masked).
        Sampling draws its noise on the CPU: from torch.Generator().manual_seed(seed) when a seed is
        given (that call alone reproduces), from `generator` when one is given (sequences), else
        from the policy's own generator (fresh noise on every call): randn(rows, continuous size),
        then rand(rows, branches) — so the same seed gives the same actions on every device."""
        observations, action_masks, memory = check_act_arguments(observations, action_masks, memory, deterministic,
                                                                 seed, generator)
        flat, rows, batched = self.prepare(observations, action_masks, memory)
        if not rows:  # a batch of 0 observations (an environment step where no agent decides): 0 actions
            return self.no_actions()
        out = self.decide(self.engine.run(flat, self.fetch[deterministic]), rows, deterministic, seed, generator)
        return out if batched else {k: v[0] for k, v in out.items()}

    def no_actions(self) -> dict:
        """act()'s answer for 0 observations: each output with 0 rows and its width."""
        s, out = self.settings, {}
        if s.continuous_size:
            out["continuous_actions"] = np.zeros((0, s.continuous_size), np.float32)
        if s.discrete_branches:
            out["discrete_actions"] = np.zeros((0, len(s.discrete_branches)), np.int64)
        if s.memory_size:
            out["memory"] = np.zeros((0, s.memory_size), np.float32)
        return out

    def get_action(self, decision_steps, terminal_steps=None, deterministic: bool = True):
        """ML-Agents' Python API: actions for exactly the agents of `decision_steps` (mlagents_envs'
        DecisionSteps, or anything with its `obs`, `agent_id` and `action_mask`), in their order, as
        mlagents_envs' ActionTuple (Actions, with the same fields, where it is not installed).
        The mask is ML-Agents' (True = masked). An LSTM policy keeps each agent's memory here: zeros
        for a new id, forgotten for the ids in `terminal_steps` before acting (their next episode
        starts from zeros, as in ML-Agents)."""
        s = self.settings
        if terminal_steps is not None and self.memories:
            for agent in np.asarray(terminal_steps.agent_id).reshape(-1).tolist():
                self.memories.pop(agent, None)
        ids = np.asarray(decision_steps.agent_id).reshape(-1).tolist()
        rows = len(ids)
        if not rows:  # (get_steps often holds no agent)
            return self._action_tuple(self.no_actions(), 0)
        masks = decision_steps.action_mask if s.discrete_branches else None
        if masks is not None and not (type(masks) in (list, tuple) and masks and
                                      all(type(m) is np.ndarray and m.dtype == bool for m in masks)):
            raise UsageError("decision_steps.action_mask: expected ML-Agents' list of per-branch bool arrays "
                             "(True = masked) or None")
        memory = None  # (zeros)
        if s.memory_size and rows == 1:
            known = self.memories.get(ids[0])
            memory = None if known is None else known[None]
        elif s.memory_size:
            memory = np.zeros((rows, s.memory_size), np.float32)
            for row, agent in enumerate(ids):
                known = self.memories.get(agent)
                if known is not None:
                    memory[row] = known
        flat, got, _ = self.prepare(list(decision_steps.obs), masks, memory)
        if got != rows:
            raise UsageError(f"decision_steps: {rows} agent id(s) but {got} observation(s)")
        out = self.run(flat, rows, deterministic)
        if s.memory_size:
            self.memories.update(zip(ids, out["memory"]))
            while len(self.memories) > MEMORIES_LIMIT:  # agents gone without a terminal step: the oldest goes
                self.memories.pop(next(iter(self.memories)))
        return self._action_tuple(out, rows)

    def _action_tuple(self, out: dict, rows: int):
        """act()'s answer as ML-Agents' ActionTuple: continuous float32, discrete int32, zero-width when none."""
        s = self.settings
        return action_tuple(out["continuous_actions"] if s.continuous_size else np.zeros((rows, 0), np.float32),
                            out["discrete_actions"].astype(np.int32) if s.discrete_branches else
                            np.zeros((rows, 0), np.int32))

    def reset(self, agent_ids=None) -> None:
        """Forget the LSTM memories get_action keeps: every agent's, or those of `agent_ids`."""
        if agent_ids is None:
            self.memories.clear()
        else:
            for agent in np.asarray(agent_ids).reshape(-1).tolist():
                self.memories.pop(agent, None)

    def check_spec(self, behavior_spec) -> None:
        """UsageError naming the first difference between mlagents_envs' BehaviorSpec (or anything
        with its `observation_specs` and `action_spec`) and this policy: the number of observations,
        an observation's shape, the continuous size, the discrete branches. Returns None when they agree."""
        s = self.settings
        specs = list(behavior_spec.observation_specs)
        names = ", ".join(f"{i.name} {list(i.shape)}" for i in s.inputs)
        if len(specs) != len(s.inputs):
            raise UsageError(f"the behavior has {len(specs)} observation(s), this policy takes {len(s.inputs)} ({names})")
        for i, (spec, obs) in enumerate(zip(s.inputs, specs)):
            shape = tuple(int(d) for d in obs.shape)
            if shape != tuple(spec.shape):
                label = f" ({obs.name})" if getattr(obs, "name", None) else ""
                raise UsageError(f"observation {i}{label} has shape {list(shape)}, this policy's {spec.name} "
                                 f"takes {list(spec.shape)}")
        actions = behavior_spec.action_spec
        if int(actions.continuous_size) != s.continuous_size:
            raise UsageError(f"the behavior has {int(actions.continuous_size)} continuous action(s), this policy "
                             f"{s.continuous_size}")
        if [int(b) for b in actions.discrete_branches] != list(s.discrete_branches):
            raise UsageError(f"the behavior has discrete branches {[int(b) for b in actions.discrete_branches]}, "
                             f"this policy {list(s.discrete_branches)}")

    def run(self, flat: list, rows: int, deterministic: bool = True, seed: Optional[int] = None,
            generator=None) -> dict:
        """act() for inputs prepare() has already checked: one engine call, then decide()."""
        return self.decide(self.engine.run(flat, self.fetch[deterministic]), rows, deterministic, seed, generator)

    def decide(self, raw: dict, rows: int, deterministic: bool = True, seed: Optional[int] = None,
               generator=None) -> dict:
        """ML-Agents' action from the engine's outputs: deterministic, or sampled (noise as act() says)."""
        s, out = self.settings, {}
        if not deterministic and generator is None:
            generator = self.generator if seed is None else torch.Generator().manual_seed(int(seed))
        if s.continuous_size:
            if deterministic:
                out["continuous_actions"] = raw["deterministic_continuous_actions"]
            else:
                z = torch.randn((rows, s.continuous_size), generator=generator).numpy()
                mu = raw["mu"]
                if s.tanh_squash:  # SAC: tanh(mu + exp(clamp(log_sigma, -20, 2)) * z)
                    out["continuous_actions"] = np.tanh(mu + z * np.exp(raw["log_sigma"]))
                else:              # PPO/POCA: clip(mu + exp(log_sigma) * z, -3, 3) / 3
                    out["continuous_actions"] = clipped_action(mu + z * self.sigma)
        if s.discrete_branches:
            if deterministic:
                out["discrete_actions"] = raw["deterministic_discrete_actions"]
            else:
                u = torch.rand((rows, len(s.discrete_branches)), generator=generator, dtype=torch.float64).numpy()
                out["discrete_actions"] = branch_draw(raw["probabilities"], s.discrete_branches, u)
        if s.memory_size:
            out["memory"] = raw["recurrent_out"].reshape(rows, s.memory_size)
        return out

    def reference(self, flat: list) -> dict:
        """The float64 CPU computation of the same modules (the precision reference)."""
        actor = cast_actor(copy.deepcopy(self.checkpoint.actor), torch.float64)
        with torch.inference_mode():  # (EngineHeads returns float32 by design: the heads themselves here)
            inputs = [torch.from_numpy(np.asarray(x, np.float64)) for x in flat]
            n = len(self.settings.inputs)
            masks = inputs[n] if self.settings.discrete_branches else None
            memories = inputs[-1] if self.settings.memory_size else None
            mu, log_sigma, probs, memories_out = actor.heads(inputs[:n], masks, memories)
        out = {}
        if mu is not None:
            out["mu"] = mu.numpy()
            out["deterministic_continuous_actions"] = deterministic_continuous(mu, self.settings.tanh_squash).numpy()
        if probs is not None:
            out["probabilities"] = torch.cat(probs, dim=1).numpy()
            out["deterministic_discrete_actions"] = deterministic_discrete(probs).numpy()
        if memories_out is not None and self.settings.memory_size:
            out["recurrent_out"] = memories_out.numpy()
        return out


def _host_array(value):
    """A torch tensor as a CPU numpy array (detached: one that requires grad is fine); else `value`."""
    if torch is not None and isinstance(value, torch.Tensor):
        value = value.detach().cpu()
        return (value.float() if value.dtype == torch.bfloat16 else value).numpy()
    return value


def check_act_arguments(observations, action_masks, memory, deterministic, seed, generator) -> tuple:
    """act()'s arguments, each checked (UsageError naming it) before any work; torch tensors
    come back as CPU numpy arrays: (observations, action_masks, memory)."""
    if not isinstance(deterministic, (bool, np.bool_)):
        raise UsageError(f"deterministic={deterministic!r}: expected True or False")
    if seed is not None and (not isinstance(seed, (int, np.integer)) or isinstance(seed, (bool, np.bool_))
                             or not -2**63 <= int(seed) < 2**64):
        raise UsageError(f"seed={seed!r}: expected a whole number within 64 bits (what torch.Generator takes), or None")
    if generator is not None and (not isinstance(generator, torch.Generator) or generator.device.type != "cpu"):
        raise UsageError(f"generator={generator!r}: expected a CPU torch.Generator (the noise is drawn on the CPU), or None")
    if isinstance(observations, dict):
        wrong = next((k for k in observations if not isinstance(k, str)), None)
        if wrong is not None:
            raise UsageError(f"observations: input names are text such as 'obs_0', not {wrong!r}")
        observations = {k: _host_array(v) for k, v in observations.items()}
    elif isinstance(observations, (list, tuple)) and any(isinstance(v, torch.Tensor) for v in observations):
        observations = [_host_array(v) for v in observations]
    return _host_array(observations), _host_array(action_masks), _host_array(memory)


ENGINES = ("auto", "torch", "onnxruntime")
SHA256_HEX = re.compile(r"[0-9a-fA-F]{64}")


def check_load_arguments(path, device, dtype, engine, expect_sha256):
    """load()'s arguments, each checked (UsageError naming it) before the checkpoint is read;
    returns the torch.device (checked to exist) for `device`."""
    if not isinstance(path, (str, os.PathLike)) or not str(path).strip():
        raise UsageError(f"path {path!r}: expected an ML-Agents run folder or a .pt checkpoint (a str or Path)")
    if engine not in ENGINES:
        raise UsageError(f"engine {engine!r}: expected one of {', '.join(ENGINES)}")
    if dtype not in DTYPES:
        raise UsageError(f"dtype {dtype!r}: expected one of {', '.join(DTYPES)}")
    if expect_sha256 is not None and not (isinstance(expect_sha256, str) and SHA256_HEX.fullmatch(expect_sha256.strip())):
        raise UsageError(f"expect_sha256 {expect_sha256!r}: expected 64 hexadecimal digits")
    if not isinstance(device, (str, torch.device)):
        raise UsageError(f"device {device!r}: expected a str such as 'cpu', 'cuda:0', 'npu:0', or a torch.device")
    return resolve_device(str(device))  # (a torch.device too: 'meta' or an absent GPU is refused)


def _is_array_list(value) -> bool:
    return isinstance(value, (list, tuple)) and len(value) > 0 and all(isinstance(v, np.ndarray) for v in value)


def load(path, device="cpu", dtype: str = "float32", engine: str = "auto", goal_input: GoalInput = None,
         onnx: Optional[str] = None, expect_sha256: Optional[str] = None, graphs: bool = True,
         seed: Optional[int] = None) -> Policy:
    """An ML-Agents run folder (or one .pt checkpoint) as a Policy. UsageError says what is wrong.
    `seed` seeds the policy's own sampling generator (None: from the OS); `onnx` names the
    checkpoint's ML-Agents ONNX (NotThisPolicy, a CheckFailed, when it belongs to another policy)."""
    device = check_load_arguments(path, device, dtype, engine, expect_sha256)
    path = Path(path)
    if path.is_dir():
        source = locate_model(None, str(path), None)
    else:
        source = locate_model(str(path), None, None)
    onnx = regular_file("onnx", onnx) if onnx else None
    checkpoint = load_checkpoint(source.checkpoint, onnx, source.model_dir, source.behavior, expect_sha256, goal_input)
    return Policy(checkpoint, device, dtype, engine, graphs, seed)


# =========================================================================================
# Inputs: observations, masks and memories from every source (flags, files, stream lines)
# =========================================================================================

def shape_input(spec: InputSpec, value) -> tuple:
    """One input as float32 [rows, *shape] (entity buffers padded with absent rows), and whether it
    came batched; UsageError naming the input, the expected and the given shape. A uint8 array for
    a camera is pixels: scaled by 1/255 as image_pixels scales a file; other numbers are taken as given."""
    try:
        array = np.asarray(value)
    except (ValueError, TypeError):
        raise UsageError(f"{spec.name}: not an array of numbers (ragged or mixed values)")
    if array.dtype.kind not in "fiub" or array.dtype.kind == "b" and spec.kind != "vector":
        raise UsageError(f"{spec.name}: holds {array.dtype} values, expected numbers")
    if spec.kind == "visual" and array.dtype == np.uint8:  # pixels, read as image files are read
        array = array.astype(np.float32) / np.float32(255)
    want = tuple(spec.shape)
    if spec.kind == "entities":
        n, f = want
        if array.ndim == 2 and array.shape[1] == f or array.ndim == 1 and array.size == 0:
            array, batched = array.reshape(1, -1, f), False
        elif array.ndim == 3 and array.shape[2] == f:
            batched = True
        else:
            raise UsageError(f"{spec.name}: expected up to {n} entities of {f} features ([entities, {f}] or "
                             f"[batch, entities, {f}]), got shape {list(array.shape)}")
        if n and array.shape[1] > n:
            raise UsageError(f"{spec.name}: {array.shape[1]} entities, this policy takes at most {n}")
        if n and array.shape[1] < n:  # absent entities are zero rows, as Unity's buffer sensor pads them
            array = np.concatenate([array, np.zeros((array.shape[0], n - array.shape[1], f), array.dtype)], axis=1)
    elif array.shape == want:
        array, batched = array[None], False
    elif array.ndim == len(want) + 1 and array.shape[1:] == want:
        batched = True
    else:
        raise UsageError(f"{spec.name}: expected shape [{', '.join(map(str, want))}] "
                         f"(or [batch, {', '.join(map(str, want))}]), got {list(array.shape)}")
    with np.errstate(over="ignore", invalid="ignore"):
        out = np.ascontiguousarray(array, np.float32)
    finite = np.isfinite(out.reshape(out.shape[0], int(np.prod(out.shape[1:])))).all(axis=1)
    if not finite.all():
        raise UsageError(f"{spec.name}: observation {int(np.argmin(finite))} holds nan, inf or values beyond float32")
    return out, batched


BOOL_MASK = ("a single bool array is ambiguous (ML-Agents' masks are True = masked, gymnasium's 1 = "
             "allowed): give ML-Agents' DecisionSteps.action_mask as its list of per-branch bool arrays, or "
             "0/1 numbers with 1 = allowed (e.g. mask.astype(np.int8))")


def shape_masks(masks, branches: list, rows: int, batched: bool) -> np.ndarray:
    """Action masks as float32 [rows, sum(branches)] of 0/1 (1 = allowed); all allowed when None.
    Numbers are gymnasium's convention, 1 = allowed: one array [sum(branches)] or [rows, sum(branches)],
    or a per-branch list ([size] or [rows, size] each; gymnasium's MultiDiscrete masks). A per-branch
    list of bool arrays is ML-Agents' DecisionSteps.action_mask: True = masked. A single bool array is
    refused, the two conventions reading it oppositely. A branch that allows nothing is refused."""
    width = sum(branches)
    if masks is None:
        return np.ones((rows, width), np.float32)
    masked_is_true = False
    if isinstance(masks, (list, tuple)) and len(masks) == len(branches) and _is_array_list(masks) and (
            any(m.dtype == bool for m in masks) or all(m.shape[-1:] == (size,) for m, size in zip(masks, branches))):
        masked_is_true = masks[0].dtype == bool
        if any((m.dtype == bool) != masked_is_true for m in masks):
            raise UsageError("action_masks: the per-branch arrays mix bool (ML-Agents: True = masked) and "
                             "numbers (1 = allowed)")
        parts = []
        for b, (part, size) in enumerate(zip(masks, branches)):
            if part.ndim not in (1, 2) or part.shape[-1] != size or part.ndim == 2 and part.shape[0] != rows:
                raise UsageError(f"action_masks: branch {b} has shape {list(part.shape)}, expected [{size}] or "
                                 f"[{rows}, {size}] (branches {branches})")
            parts.append(np.broadcast_to(part.reshape(-1, size), (rows, size)))
        array = np.concatenate(parts, axis=1)
        if masked_is_true:
            array = ~array
        masks = array
    try:
        array = np.asarray(masks)
        if array.dtype == bool and not masked_is_true:
            raise UsageError(f"action_masks: {BOOL_MASK}")
        array = array.astype(np.float64)
    except (ValueError, TypeError):
        raise UsageError(f"action_masks: expected {width} values of 0 or 1 per observation")
    if array.ndim == 1 and array.shape[0] == width:
        array = np.broadcast_to(array, (rows, width))
    if array.shape != (rows, width):
        raise UsageError(f"action_masks: expected shape [{rows}, {width}] (branches {branches}), got {list(array.shape)}")
    if not np.isin(array, (0.0, 1.0)).all():
        raise UsageError("action_masks: values must be 0 (forbidden) or 1 (allowed)")
    start = 0
    for b, size in enumerate(branches):
        empty = ~array[:, start:start + size].any(axis=1)
        if empty.any():
            raise UsageError(f"action_masks: branch {b} allows no action (row {int(np.argmax(empty))}"
                             f"{', ML-Agents mask: True = masked' if masked_is_true else ''}); "
                             f"at least one action per branch must be allowed")
        start += size
    return np.ascontiguousarray(array, np.float32)


MASK_KEY_BYTES = 1024  # masks up to this size are checked once per distinct value (a batch-1 mask: a few bytes)


def mask_key(masks, rows: int) -> Optional[tuple]:
    """A small mask's identity (rows, form, and each array's dtype, shape and bytes), for checking it
    once (Policy.mask_array); None for a large one or one not made of numpy arrays."""
    if type(masks) is np.ndarray:  # (Policy._ready makes this key itself, the same way)
        return (rows, None, masks.dtype, masks.shape, masks.tobytes()) if masks.nbytes <= MASK_KEY_BYTES else None
    if masks is None:
        return (rows,)
    parts = masks if type(masks) in (list, tuple) else ()
    key, size = [rows], 0
    for part in parts:
        size += part.nbytes if type(part) is np.ndarray else MASK_KEY_BYTES + 1
        if size > MASK_KEY_BYTES:
            return None
        key += (part.dtype, part.shape, part.tobytes())
    return tuple(key) if parts else None


def shape_memory(memory, size: int, rows: int, batched: bool) -> np.ndarray:
    """An LSTM memory [rows, size] = [h, c] as the engine wants it, [rows, 1, size]; zeros when None."""
    if memory is None:
        return np.zeros((rows, 1, size), np.float32)
    try:
        array = np.asarray(memory, dtype=np.float64)
    except (ValueError, TypeError):
        raise UsageError(f"memory: expected {size} numbers per observation")
    if array.ndim == 1 and array.shape[0] == size and rows == 1:
        array = array[None]
    if array.ndim == 3 and array.shape[1] == 1:
        array = array[:, 0]
    if array.shape != (rows, size):
        want = f"[{size}] or [1, {size}]" if rows == 1 and not batched else f"[{rows}, {size}]"
        raise UsageError(f"memory: expected shape {want} ([h, c], {size // 2} each), got {list(array.shape)}")
    if not np.isfinite(array).all() or np.abs(array).max(initial=0) > np.finfo(np.float32).max:
        raise UsageError("memory: values must be finite numbers within float32 range")
    return np.ascontiguousarray(array[:, None, :], np.float32)


def branch_draw(probs: np.ndarray, branches: list, u: np.ndarray) -> np.ndarray:
    """One draw per branch from its masked probabilities by inverse CDF with uniforms u [rows, branches];
    a forbidden action (probability 0) is never drawn."""
    out, start = np.empty((probs.shape[0], len(branches)), np.int64), 0
    for b, size in enumerate(branches):
        p = probs[:, start:start + size].astype(np.float64)
        cdf = np.cumsum(p, axis=1)
        target = u[:, b] * cdf[:, -1]
        pick = (cdf <= target[:, None]).sum(axis=1)
        last_allowed = size - 1 - np.argmax(p[:, ::-1] > 0, axis=1)
        out[:, b] = np.minimum(pick, last_allowed)
        start += size
    return out


def random_inputs(settings: PolicySettings, seed: int, rows: Optional[int] = None) -> list:
    """One np.random.RandomState(seed) for all inputs, in input order: randn(*shape) for vectors
    and entity buffers, rand(*shape) for images (uniform in [0, 1), the range camera pixels have).
    A one-input vector policy gets RandomState(seed).randn(n). In an entity buffer each observation
    keeps its first k rows, k uniform in 0..N from RandomState(seed + 104729), and the rest are zero
    (absent), so that the attention's padding is exercised too."""
    rng, counts = np.random.RandomState(seed), np.random.RandomState(seed + 104729)
    lead = () if rows is None else (rows,)
    out = []
    for spec in settings.inputs:
        x = (rng.rand(*lead, *spec.shape) if spec.kind == "visual" else rng.randn(*lead, *spec.shape)).astype(np.float32)
        if spec.kind == "entities":
            present = counts.randint(0, spec.shape[0] + 1, size=1 if rows is None else rows)
            x.reshape(-1, *spec.shape)[np.arange(spec.shape[0])[None, :] >= present[:, None]] = 0.0
        out.append(x)
    return out


def random_masks(settings: PolicySettings, seed: int, rows: int) -> Optional[np.ndarray]:
    """Random action masks (each action allowed with probability 0.7, at least one per branch)."""
    if not settings.discrete_branches:
        return None
    rng = np.random.RandomState(seed + 7919)
    masks = (rng.rand(rows, sum(settings.discrete_branches)) < 0.7).astype(np.float32)
    start = 0
    for size in settings.discrete_branches:
        block = masks[:, start:start + size]
        empty = np.flatnonzero(~block.any(axis=1))
        block[empty, rng.randint(size, size=len(empty))] = 1.0
        start += size
    return masks


OBS_WORDS = ("random", "zeros", "ones", "ones_neg", "boundary")
IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg")


def boundary_input(spec: InputSpec, processor) -> np.ndarray:
    """Every feature on the normaliser's clip edge, running_mean ± 5 standard deviations (+ for
    even and − for odd features), so the normalised input is ±5; ±5 without a normaliser;
    images alternate 0 and 1."""
    count = int(np.prod(spec.shape))
    signs = np.where(np.arange(count) % 2 == 0, 1.0, -1.0)
    if spec.kind == "visual":
        return ((signs + 1) / 2).reshape(spec.shape).astype(np.float32)
    normalizer = getattr(processor, "normalizer", None)
    if normalizer is None:
        return (NORMALIZER_CLIP * signs).reshape(spec.shape).astype(np.float32)
    variance = normalizer.running_variance.double().numpy()
    std = np.sqrt(variance / int(normalizer.normalization_steps))
    return (normalizer.running_mean.double().numpy() + NORMALIZER_CLIP * signs * std).astype(np.float32)


def parse_obs(text: str, policy: "Policy", seed: int) -> list:
    """--obs for every input: random | zeros | ones | ones_neg | boundary | <number> |
    <comma-separated numbers> (one input) | per input 'obs_0=VALUE;obs_1=VALUE' where VALUE is
    any of those or a file (.npy; .png/.jpg for an image)."""
    s = policy.settings
    parts = [p.strip() for p in text.split(";") if p.strip()] if (";" in text or re.match(r"^\s*obs_\d+\s*=", text)) else None
    if parts is None:
        if len(s.inputs) > 1 and text.strip().lower() not in OBS_WORDS and not _is_float(text.strip()):
            raise UsageError(f"--obs: this policy has {len(s.inputs)} inputs ({', '.join(i.name for i in s.inputs)}); "
                             f"give one value per input as 'obs_0=...;obs_1=...'")
        values = {spec.name: text for spec in s.inputs}
    else:
        values = {}
        for part in parts:
            name, eq, value = part.partition("=")
            name = name.strip()
            if not eq or name not in {i.name for i in s.inputs}:
                raise UsageError(f"--obs: {part[:40]!r} does not name an input ({', '.join(i.name for i in s.inputs)})")
            if name in values:
                raise UsageError(f"--obs: {name} is given twice")
            values[name] = value
        missing = [i.name for i in s.inputs if i.name not in values]
        if missing:
            raise UsageError(f"--obs: no value for {', '.join(missing)}; give 'NAME=VALUE' for every input")
    randoms = random_inputs(s, seed)
    processors = policy.checkpoint.actor.network_body.processors
    return [parse_one_input(values[spec.name], spec, randoms[i], processors[i]) for i, spec in enumerate(s.inputs)]


def parse_one_input(text: str, spec: InputSpec, random_value: np.ndarray, processor) -> np.ndarray:
    word = text.strip().lower()
    count = int(np.prod(spec.shape))
    named = {"random": lambda: random_value, "zeros": lambda: np.zeros(spec.shape, np.float32),
             "ones": lambda: np.ones(spec.shape, np.float32), "ones_neg": lambda: -np.ones(spec.shape, np.float32),
             "boundary": lambda: boundary_input(spec, processor)}
    if word in named:
        return named[word]()
    if word.endswith(IMAGE_SUFFIXES + (".npy",)):
        return read_input_file(Path(text.strip()), spec)
    items = [p.strip() for p in text.split(",")]
    if len(items) > 1 and items[-1] == "":
        items.pop()  # tolerate one trailing comma
    bad = next((p for p in items if not _is_float(p)), None)
    if bad is not None:
        raise UsageError(f"--obs {spec.name}: {bad[:40]!r} is not a number; expected random, zeros, ones, ones_neg, "
                         f"boundary, one number, {count} comma-separated numbers, or a file")
    values = np.asarray([float(p) for p in items], np.float64)
    if not np.isfinite(values).all() or np.abs(values).max() > np.finfo(np.float32).max:
        raise UsageError(f"--obs {spec.name}: values must be finite numbers within float32 range (no nan, inf)")
    if values.size == 1:
        return np.full(spec.shape, values[0], np.float32)
    if spec.kind == "entities" and values.size % spec.shape[1] == 0 and values.size <= count:
        return values.reshape(-1, spec.shape[1]).astype(np.float32)  # fewer entities: padded later
    if values.size != count:
        raise UsageError(f"--obs {spec.name}: expected {count} numbers (or one), got {values.size}")
    return values.reshape(spec.shape).astype(np.float32)


def read_input_file(path: Path, spec: InputSpec) -> np.ndarray:
    """One observation of one input from a file: .npy, or .png/.jpg for an image (channel-first,
    values in [0, 1], no resizing)."""
    if not path.is_file():
        raise UsageError(f"--obs {spec.name}: {path}: no such file")
    if path.suffix.lower() == ".npy":
        try:
            array = np.load(path, allow_pickle=False)
        except (ValueError, OSError, EOFError) as exc:
            raise UsageError(f"--obs {spec.name}: {path}: not a readable .npy ({str(exc).splitlines()[0][:100]})")
        if not isinstance(array, np.ndarray):
            array.close()
            raise UsageError(f"--obs {spec.name}: {path}: a .npz archive named .npy; give one .npy array")
        return array
    if spec.kind != "visual":
        raise UsageError(f"--obs {spec.name}: an image file for a {spec.kind} input")
    try:
        from PIL import Image
    except ImportError:
        raise UsageError("reading images needs Pillow (pip install Pillow)")
    channels, height, width = spec.chw
    try:
        with Image.open(path) as image:
            problem = image_refusal(image)
            if problem:
                raise UsageError(f"--obs {spec.name}: {path.name} {problem}")
            if image.size != (width, height):
                raise UsageError(f"--obs {spec.name}: {path.name} is {image.size[0]}x{image.size[1]} (W x H), the "
                                 f"policy takes {width}x{height}; resize it yourself (nothing is resized silently)")
            pixels = image_pixels(image, channels, f"--obs {spec.name}: {path.name}")
    except UsageError:
        raise
    except (OSError, ValueError, Image.DecompressionBombError) as exc:
        raise UsageError(f"--obs {spec.name}: {path}: not a readable image ({str(exc).splitlines()[0][:100]})")
    return pixels if spec.channels_last else pixels.transpose(2, 0, 1).copy()


def image_refusal(image) -> Optional[str]:
    """Why an opened image file cannot be read as one camera frame as it is, or None: several
    frames (an animation, a multi-page file: which one?), 16 bits per channel (Pillow would cut
    them to 8), an EXIF orientation other than 1 (stored turned or mirrored: upright for a photo
    viewer, as stored for a Unity frame)."""
    frames = getattr(image, "n_frames", 1)
    if frames != 1:
        return f"holds {frames} frames (an animation or a multi-page file); give one frame"
    rawmodes = [t[3] if isinstance(t[3], str) else t[3][0] if t[3] and isinstance(t[3][0], str) else "" for t in image.tile]
    if image.mode in ("L", "LA", "P", "RGB", "RGBA") and any(";16" in mode for mode in rawmodes):  # (shown as 8-bit)
        return "has 16 bits per channel; only 8-bit files are read (for other data use .npy)"
    with contextlib.suppress(Exception):  # (an unreadable EXIF block says nothing about orientation)
        orientation = image.getexif().get(0x0112)
        if orientation not in (None, 1):
            return (f"has EXIF orientation {orientation} (stored turned or mirrored), ambiguous for a camera "
                    f"frame; save it upright without the orientation tag")
    return None


def image_pixels(image, channels: int, what: str) -> np.ndarray:
    """An 8-bit image as [H, W, channels] float32 in [0, 1], read as ML-Agents' camera sensor reads
    a frame: colour as r/255, g/255, b/255 with any alpha left out, and for a grayscale camera
    (r + g + b) / 3 / 255 (ML-Agents' own rule, not Pillow's weighted luma). A 4-channel input
    (grid sensors, match3 boards) takes an RGBA file only; nothing else is made up or dropped."""
    kind = {"1": "grey", "L": "grey", "LA": "grey", "P": "colour", "RGB": "colour", "RGBA": "colour"}.get(image.mode)
    if kind is None:
        raise UsageError(f"{what}: Pillow reads it as mode {image.mode}; only 8-bit grey, palette, RGB or RGBA "
                         f"files are read (for other data use .npy)")
    if channels == 4:
        if image.mode != "RGBA":
            raise UsageError(f"{what} is {kind} ({image.mode}); this 4-channel input takes an RGBA file "
                             f"(or a .npy [4, H, W])")
        return np.asarray(image, np.float32) / np.float32(255)
    if channels == 1:
        if kind == "grey":
            return np.asarray(image.convert("L"), np.float32)[..., None] / np.float32(255)
        rgb = np.asarray(image.convert("RGB"), np.int32)
        return (rgb.sum(axis=2, keepdims=True).astype(np.float32) / np.float32(3)) / np.float32(255)
    if channels == 3:
        if kind == "grey":
            raise UsageError(f"{what} is a grey image; this camera takes colour (3 channels, RGB)")
        return np.asarray(image.convert("RGB"), np.float32) / np.float32(255)
    raise UsageError(f"{what}: a {channels}-channel input cannot come from an image file; use .npy")


def parse_numbers(text: str, what: str, count: int) -> np.ndarray:
    """Comma-separated numbers (exactly `count`), or 'zeros'."""
    if text.strip().lower() == "zeros":
        return np.zeros(count, np.float32)
    items = [p.strip() for p in text.split(",")]
    if len(items) > 1 and items[-1] == "":
        items.pop()  # tolerate one trailing comma (as --obs does); an empty item elsewhere is refused
    if "" in items:
        raise UsageError(f"{what}: an empty item (item {items.index('') + 1}); expected {count} comma-separated numbers")
    bad = next((p for p in items if not _is_float(p)), None)
    if bad is not None or len(items) != count:
        raise UsageError(f"{what}: expected {count} comma-separated numbers, got "
                         f"{repr(bad[:40]) + ' (not a number)' if bad is not None else len(items)}")
    return np.asarray([float(p) for p in items], np.float64)


def _is_float(text: str) -> bool:
    try:
        float(text)
        return True
    except ValueError:
        return False


NPZ_EXTRAS = ("action_masks", "memory")


def read_npz(path: Path, names: list) -> dict:
    """The arrays of an --obs-file .npz: {"inputs": [...], "action_masks": ..., "memory": ...},
    every member read (and CRC-checked) now. Names other than the inputs' and NPZ_EXTRAS are
    refused (a misspelt action_mask must not be ignored), and so is a name held twice."""
    archive = np.load(path, allow_pickle=False)
    if not isinstance(archive, np.lib.npyio.NpzFile):
        raise UsageError(f"--obs-file {path}: a .npy file named .npz; rename it .npy")
    with archive:
        members = archive.zip.namelist()
        twice = sorted(m for m, n in collections.Counter(members).items() if n > 1)
        if twice:
            raise UsageError(f"--obs-file {path}: holds {twice[0][:60]!r} more than once")
        keys = list(archive.keys())
        if not keys:
            raise UsageError(f"--obs-file {path}: holds no arrays")
        inputs = list(names)
        if len(names) == 1 and names[0] not in keys:  # one input: obs, or the archive's only array
            alone = [k for k in keys if k not in NPZ_EXTRAS]
            inputs = ["obs"] if "obs" in keys else alone if len(keys) == 1 and alone else inputs
        accepted = names + (["obs"] if len(names) == 1 else []) + list(NPZ_EXTRAS)
        unknown = [k for k in keys if k not in inputs and k not in NPZ_EXTRAS]
        if unknown:
            raise UsageError(f"--obs-file {path}: unknown array{'s' * (len(unknown) > 1)} "
                             f"{', '.join(repr(k[:60]) for k in unknown[:4])}; it may hold {', '.join(accepted)}")
        missing = [n for n in inputs if n not in keys]
        if missing:
            raise UsageError(f"--obs-file {path}: no array {missing[0]}; it holds {', '.join(keys[:6])} "
                             f"and the policy takes {', '.join(names)}")
        out = {name: archive[key] for name, key in [*zip(names, inputs), *((e, e) for e in NPZ_EXTRAS if e in keys)]}
    bad = next((k for k, v in out.items() if not isinstance(v, np.ndarray)), None)
    if bad is not None:  # a member not stored as .npy comes back as bytes
        raise UsageError(f"--obs-file {path}: member {bad!r} is not a .npy array")
    return {"inputs": [out[n] for n in names], **{e: out.get(e) for e in NPZ_EXTRAS}}


def open_obs_file(path: Path, settings: PolicySettings) -> dict:
    """Observation arrays for a file batch: .npy (one input, memory-mapped), .csv (one vector
    input), or .npz with obs_0 ... obs_k (or 'obs' for one input) and optional action_masks and
    memory. Returns {"inputs": [...], "action_masks": ..., "memory": ..., "rows": N}."""
    if not path.exists():
        raise UsageError(f"--obs-file {path}: no such file")
    if not path.is_file():
        raise UsageError(f"--obs-file {path}: not a regular file")
    suffix = path.suffix.lower()
    names = [i.name for i in settings.inputs]
    out = {"action_masks": None, "memory": None}
    try:
        if suffix == ".npy":
            out["inputs"] = [np.load(path, mmap_mode="r", allow_pickle=False)]
            if not isinstance(out["inputs"][0], np.ndarray):
                raise UsageError(f"--obs-file {path}: a .npz archive named .npy; rename it .npz")
        elif suffix == ".csv":
            out["inputs"] = [np.loadtxt(path, delimiter=",", dtype=np.float64, ndmin=2)]
        elif suffix == ".npz":
            out.update(read_npz(path, names))
        else:
            raise UsageError(f"--obs-file {path}: expected a .npy, .npz or .csv file")
    except UsageError:
        raise
    except (ValueError, OSError, EOFError, RuntimeError, NotImplementedError, zipfile.BadZipFile, zlib.error) as exc:
        # a damaged, truncated or encrypted archive, a member's bad CRC or unknown compression
        raise UsageError(f"--obs-file {path}: not a readable array "
                         f"({str(exc).splitlines()[0][:120] if str(exc) else type(exc).__name__})")
    if suffix != ".npz" and len(names) != 1:
        raise UsageError(f"--obs-file {path}: this policy has {len(names)} inputs; give a .npz with {', '.join(names)}")
    rows = None
    for spec, array in zip(settings.inputs, out["inputs"]):
        if array.dtype.kind not in "fiu":
            raise UsageError(f"--obs-file {path}: {spec.name} holds {array.dtype} values, expected numbers")
        if array.ndim == len(spec.shape) and spec.kind != "entities":
            array = array[None]
        want = len(spec.shape) + 1
        if array.ndim != want or (spec.kind != "entities" and tuple(array.shape[1:]) != tuple(spec.shape)):
            raise UsageError(f"--obs-file {path}: {spec.name} has shape {list(array.shape)}, expected "
                             f"[rows, {', '.join(map(str, spec.shape))}]")
        if rows is not None and array.shape[0] != rows:
            raise UsageError(f"--obs-file {path}: {spec.name} has {array.shape[0]} rows, {names[0]} has {rows}")
        rows = array.shape[0]
    if not rows:
        raise UsageError(f"--obs-file {path}: holds no rows")
    out["inputs"] = [a[None] if a.ndim == len(s.shape) and s.kind != "entities" else a
                     for s, a in zip(settings.inputs, out["inputs"])]
    out["rows"] = rows
    return out


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


def short_path(path) -> str:
    """A path for a one-line message: control characters escaped, the middle of a very long
    one elided."""
    text = "".join(c if c.isprintable() else repr(c)[1:-1] for c in str(path))
    return text if len(text) <= 160 else f"{text[:60]}...{text[-80:]} ({len(text)} characters)"


def describe_os_error(exc: OSError, skip: Optional[str] = None) -> str:
    """'<path>: <reason>' (both paths for a rename), or the reason alone; names whose last part
    starts with `skip` (temporary files the user never named) are left out."""
    reason = exc.strerror or str(exc) or type(exc).__name__
    names = [short_path(f) for f in (exc.filename, exc.filename2)
             if f is not None and not (skip and os.path.basename(os.fsdecode(f)).startswith(skip))]
    return f"{' -> '.join(names)}: {reason}" if names else reason


class Interrupted(KeyboardInterrupt):
    """SIGTERM or SIGHUP turned into an exception, so that cleanup (atomic_write) runs as for
    Ctrl-C; main() ends with 128 + signal number."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


HANDLED_SIGNALS = ("SIGINT", "SIGTERM", "SIGHUP")
_SIGNAL_STATE = {"deferred": 0, "pending": None, "stopping": False}


def _on_signal(signum, frame) -> None:
    state = _SIGNAL_STATE
    if state["deferred"] or state["stopping"]:  # inside a critical step, or already on the way out
        state["pending"] = state["pending"] or signum
        return
    state["stopping"] = True
    raise Interrupted(signum)


def install_signal_handlers() -> dict:
    """SIGINT, SIGTERM and SIGHUP raise Interrupted (main thread only); returns the handlers
    they replace, for restore_signal_handlers."""
    import signal
    _SIGNAL_STATE.update(deferred=0, pending=None, stopping=False)
    previous = {}
    for name in HANDLED_SIGNALS:
        signum = getattr(signal, name, None)
        if signum is None:
            continue
        try:
            previous[signum] = signal.signal(signum, _on_signal)
        except (ValueError, OSError):  # not the main thread: leave the signals alone
            break
    return previous


def restore_signal_handlers(previous: dict) -> None:
    import signal
    for signum, handler in previous.items():
        with contextlib.suppress(ValueError, OSError, TypeError):
            signal.signal(signum, handler if handler is not None else signal.SIG_DFL)


@contextlib.contextmanager
def signals_deferred():
    """A signal arriving inside is raised when the block ends, so a step such as "create the
    temporary file and remember its name" is never cut in half."""
    state = _SIGNAL_STATE
    state["deferred"] += 1
    try:
        yield
    finally:
        state["deferred"] -= 1
    if not state["deferred"] and state["pending"] and not state["stopping"]:
        signum, state["pending"], state["stopping"] = state["pending"], None, True
        raise Interrupted(signum)


def _new_file_mode(path: Path) -> tuple[int, Optional[os.stat_result]]:
    """The mode `path` must end with: that of the file it replaces, else what open(path, "w")
    would give under the umask (0666 & ~umask)."""
    try:
        st = os.stat(path)
        return st.st_mode & 0o7777, st
    except OSError:
        pass
    umask = None
    with contextlib.suppress(OSError, ValueError, IndexError, StopIteration):
        line = next(l for l in Path("/proc/self/status").read_text().splitlines() if l.startswith("Umask:"))
        umask = int(line.split()[1], 8)
    if umask is None:
        umask = os.umask(0o022)
        os.umask(umask)
    return 0o666 & ~umask, None


def reserve_space(fd: int, size: int) -> None:
    """Allocate `size` bytes for an open file now (posix_fallocate), so that a full disk or an
    exhausted quota is an OSError here, not a SIGBUS in a memory-mapped write later. File
    systems without fallocate are left to fail, if they do, at write time."""
    import errno
    if size <= 0:
        return
    try:
        os.posix_fallocate(fd, 0, size)
    except OSError as exc:
        if exc.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EIO):
            raise
    except AttributeError:  # not on Linux
        pass


def open_npy_memmap(path: Path, shape: tuple[int, ...], dtype=np.float32) -> np.memmap:
    """A writable memory-mapped .npy of `shape` at `path` (an existing, e.g. atomic_write's
    temporary, file), its whole size allocated first: unlike np.lib.format.open_memmap, which
    makes a sparse file, a full disk is an OSError here and never a SIGBUS mid-write."""
    dtype = np.dtype(dtype)
    header = {"descr": np.lib.format.dtype_to_descr(dtype), "fortran_order": False, "shape": tuple(shape)}
    with open(path, "r+b") as fh:  # no truncation: space reserved by atomic_write(size=...) stays
        np.lib.format.write_array_header_1_0(fh, header)
        offset = fh.tell()
        nbytes = offset + int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        reserve_space(fh.fileno(), nbytes)
        fh.truncate(nbytes)
    if nbytes == offset:  # no rows: nothing to map
        return np.empty(shape, dtype)
    return np.memmap(path, dtype=dtype, mode="r+", offset=offset, shape=tuple(shape))


def npy_size(shape: tuple[int, ...], dtype=np.float32) -> int:
    """Bytes of a .npy file of this shape and dtype (header included), for atomic_write(size=)."""
    import io
    buffer = io.BytesIO()
    header = {"descr": np.lib.format.dtype_to_descr(np.dtype(dtype)), "fortran_order": False, "shape": tuple(shape)}
    np.lib.format.write_array_header_1_0(buffer, header)
    return buffer.tell() + int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize


def atomic_write(path: Path, write: Callable[[Path], None], size: Optional[int] = None) -> None:
    """Write through a temporary file beside `path`, then rename: never a half-written file, and
    an existing file stays as it was when anything fails (error, full disk, signal).

    The temporary name ends in the target's suffix in lower case, so writers that add a missing
    ".npy" (np.save, given "out.NPY") write where they are told. `size` (bytes, when known) is
    allocated first, so a full disk is refused before any work; writers that open the file
    without truncating it (open_npy_memmap) keep that space. The file is flushed to disk before
    the rename. It gets the mode of the file it replaces, else that of open(path, "w") under the
    umask (not mkstemp's 0600). A symlink is written through, not replaced. Any OSError (no
    space, quota, permission, read-only or special file system) is a UsageError naming `path`;
    the temporary file is gone in every case."""
    import errno
    path = Path(path)
    with contextlib.suppress(OSError):
        if path.is_symlink():
            path = Path(os.path.realpath(path))
    mode, existing = _new_file_mode(path)
    tmp = handle = None
    try:
        with signals_deferred():  # created and remembered as one step
            handle, name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name[:64]}.",
                                            suffix=f".tmp{path.suffix.lower()}")
            tmp = Path(name)
        os.fchmod(handle, mode)
        if existing is not None and os.geteuid() == 0:  # root rewriting a user's file keeps its owner
            with contextlib.suppress(OSError):
                os.fchown(handle, existing.st_uid, existing.st_gid)
        if size:
            reserve_space(handle, size)
        handle = os.close(handle)  # (None)
        write(tmp)
        fd = os.open(tmp, os.O_RDONLY)
        try:
            os.fsync(fd)  # a delayed write error (NFS, quota) surfaces here, before the rename
        finally:
            os.close(fd)
        os.replace(tmp, path)
        tmp = None
    except BaseException as exc:
        if isinstance(exc, OSError) and exc.errno is None:  # numpy's short write: "N requested and M written"
            with contextlib.suppress(OSError, ValueError):
                fs = os.statvfs(path.parent)  # (looked at before the temporary file frees its space)
                if fs.f_bavail * fs.f_frsize < (1 << 20):
                    exc = OSError(errno.ENOSPC, f"{os.strerror(errno.ENOSPC)}: {exc}")
        if tmp is not None:
            with signals_deferred():
                if handle is not None:
                    with contextlib.suppress(OSError):
                        os.close(handle)
                with contextlib.suppress(OSError):
                    tmp.unlink()
        if isinstance(exc, OSError):
            raise UsageError(f"{short_path(path)}: not written ({describe_os_error(exc, skip=f'.{path.name[:64]}.')}); "
                             f"{'the existing file is unchanged' if existing is not None else 'nothing was left behind'}") from exc
        raise


def check_output_path(path, suffixes: tuple[str, ...], option: str = "--output") -> Path:
    """Refuse, before any work, an --output that cannot be written (given as typed: a name that
    ends in "/" means a folder, which Path() would silently drop)."""
    if str(path).endswith(("/", os.sep)):
        raise UsageError(f"{option} {short_path(path)}: names a folder (it ends in /); give a file name")
    path = Path(path)
    if path.suffix.lower() not in suffixes:
        raise UsageError(f"{option} {short_path(path)}: expected a {' or '.join(suffixes)} file")
    parent = path.parent if str(path.parent) else Path(".")
    try:
        if path.is_dir():
            raise UsageError(f"{option} {path}: is a folder")
        if parent.exists() and not parent.is_dir():
            raise UsageError(f"{option} {path}: {parent} is a file, not a folder")
        if not parent.is_dir():
            raise UsageError(f"{option} {path}: folder {parent} does not exist")
        if not os.access(parent, os.W_OK):
            raise UsageError(f"{option} {path}: folder {parent} is not writable")
        if path.exists() and not path.is_file():
            raise UsageError(f"{option} {path}: exists and is not a regular file")
        if path.exists() and not os.access(path, os.W_OK):
            raise UsageError(f"{option} {path}: the existing file is read-only")
    except OSError as exc:  # a name too long, permission denied on a folder above, a symlink loop
        raise UsageError(f"{option} {short_path(path)}: {exc.strerror or exc}")
    except ValueError as exc:  # an embedded NUL byte
        raise UsageError(f"{option} {short_path(path)}: {exc}")
    return path


def refuse_same_file(output: Optional[Path], inputs: list) -> None:
    """Refuse an output that is one of the inputs: the same path, or the same file through a
    symlink or a hard link (st_dev/st_ino). Writing it would destroy the input being read."""
    if output is None:
        return
    for source in inputs:
        if source is None:
            continue
        same = False
        with contextlib.suppress(OSError, ValueError):
            a, b = os.stat(output), os.stat(source)
            same = (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)
        with contextlib.suppress(OSError, ValueError):
            same = same or os.path.realpath(output) == os.path.realpath(source)
        if same:
            raise UsageError(f"--output {short_path(output)}: is the input file {short_path(source)}; "
                             f"writing it would destroy the input; choose another output name")


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

    def cached(self, key, make):
        if key not in self._cache:
            self._cache[key] = make()
        return self._cache[key]

    @property
    def source(self) -> ModelSource:
        a = self.args
        if a.onnx and not (a.checkpoint or a.model_dir or a.model or os.environ.get("HUGGY_MODEL_DIR")):
            return self.cached("source", lambda: onnx_alone_source("--onnx", Path(a.onnx)))
        return self.cached("source", lambda: locate_model(a.checkpoint, a.model_dir, a.model))

    @property
    def checkpoint(self) -> LoadedCheckpoint:
        def load():
            src = self.source
            if src.note:
                machine_readable = self.args.json or self.args.mode == "stream"  # stdout is JSON only
                print(f"[note] {src.note}", file=sys.stderr if machine_readable else sys.stdout)
            onnx = regular_file("--onnx", self.args.onnx) if self.args.onnx else None
            return load_checkpoint(src.checkpoint, onnx, src.model_dir, src.behavior, self.args.expect_sha256,
                                   self.args.goal_input)
        return self.cached("checkpoint", load)

    @property
    def settings(self) -> PolicySettings:
        return self.checkpoint.settings

    @property
    def device(self):
        return self.cached("device", lambda: resolve_device(self.args.device))

    @property
    def engine_name(self) -> str:
        return self.cached("engine_name", lambda: choose_engine(self.args.engine, self.device, self.args.dtype))

    @property
    def policy(self) -> Policy:
        return self.cached("policy", lambda: Policy(self.checkpoint, self.device, self.args.dtype, self.engine_name,
                                                    self.args.graphs == "on"))

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
        return parse_numbers(self.args.mask, "--mask", sum(self.settings.discrete_branches))

    def memory(self) -> Optional[np.ndarray]:
        if self.args.memory is None:
            return None
        if not self.settings.memory_size:
            raise UsageError("--memory: this policy has no memory (LSTM)")
        return parse_numbers(self.args.memory, "--memory", self.settings.memory_size)


def continuous_only(settings: PolicySettings) -> bool:
    return bool(settings.continuous_size) and not settings.discrete_branches and not settings.memory_size


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


def header(r: dict, title: str) -> str:
    return f"===== {title} (device={r['device']}, dtype={r['dtype']}, engine={r['engine']}) ====="


def action_lines(r: dict, prefix: str = "", label: str = "action") -> list:
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


def kind_fields(s: PolicySettings) -> dict:
    """What the renderers need to know about the policy's actions."""
    return {"discrete_branches": list(s.discrete_branches), "sac": s.tanh_squash}


def mode_info(ctx: Context):
    """Environment, model and one deterministic action (the original adaptation's case 1)."""
    import shutil
    import subprocess
    v, npus, cudas, health = versions(), npu_count(), cuda_count(), None
    if shutil.which("npu-smi"):
        try:
            text = subprocess.run(["npu-smi", "info"], capture_output=True, text=True, timeout=10).stdout
            health = next((l.strip() for l in text.splitlines() if re.search(r"\|\s*(OK|Warning|Alarm|Critical)\s*\|", l)),
                          "no health line found")
        except (OSError, subprocess.SubprocessError):
            health = "no health line found"
    ckpt, src, s = ctx.checkpoint, ctx.source, ctx.settings
    norms = [p.normalizer for p in ckpt.actor.network_body.processors if getattr(p, "normalizer", None) is not None]
    log_sigma = None
    if s.continuous_size and not s.conditional_sigma:
        log_sigma = ckpt.actor.action_model._continuous_distribution.log_sigma.detach().reshape(-1).numpy()
    obs = random_inputs(s, ctx.args.seed)
    out = ctx.policy.act(obs)
    first_action_s = time.time() - process_start_time()
    result = {**ctx.policy.info, "obs_dim": sum(int(np.prod(i.shape)) for i in s.inputs), "action_dim": s.continuous_size,
              "normalize": s.normalize, "normalization_steps": int(norms[0].normalization_steps) if norms else None,
              "log_sigma": floats(log_sigma) if log_sigma is not None else None, **ctx.base(), "versions": v,
              "load_s": ckpt.load_s, "note": src.note, "devices": {"npu": npus, "cuda": cudas}, "npu_smi": health,
              "architecture": architecture(s), "inputs_described": [i.describe() for i in s.inputs],
              "seed": ctx.args.seed, "obs": floats(obs[0].reshape(-1)[:6]),
              **({"deterministic_actions": floats(out["continuous_actions"])} if "continuous_actions" in out else {}),
              **action_fields(s, out), "time_to_first_action_s": first_action_s}
    return result, actions_ok(s, out)


def show_info(r: dict) -> list:
    v = r["versions"]
    lines = [f"[env] torch {v['torch']} | torch_npu {v['torch_npu'] or 'not installed'} | numpy {v['numpy']} | python {v['python']}",
             f"[env] onnxruntime {v['onnxruntime'] or 'not installed'} | onnx {v['onnx'] or 'not installed'}",
             f"[env] device {r['device']} | NPU available: {bool(r['devices']['npu'])} ({r['devices']['npu']}) | "
             f"CUDA available: {bool(r['devices']['cuda'])} ({r['devices']['cuda']})"]
    if r["npu_smi"] is not None:
        lines.append(f"[npu-smi] {r['npu_smi']}")
    lines += [f"[load] source = {r['source']}", f"[load] checkpoint = {r['checkpoint']}", f"[load] sha256 = {r['sha256']}",
              f"[load] parameters = {r['parameters']:,} | load time {r['load_s']:.3f}s",
              f"[load] dtype = {r['dtype']} | architecture = {r['architecture']}",
              f"[load] trainer = {r['trainer'] or 'unknown'}"
              f"{' (shared critic: value heads in the policy, unused)' if r['shared_critic'] else ''}"
              f" | {'' if r['settings_source'] == ONNX_ONLY_SOURCE else 'settings from '}{r['settings_source']}"]
    lines += [f"[load] input {text}" for text in r["inputs_described"]]
    lines.append(f"[load] obs normalizer steps = {r['normalization_steps'] or 'none (normalize: false)'}")
    if r["log_sigma"] is not None:
        lines.append(f"[load] log_sigma[:6] = {fmt(r['log_sigma'][:6], 4)}")
    lines.append(f"[policy] obs(random,seed={r['seed']})[:6] = {fmt(r['obs'], 4)}")
    if "continuous_actions" in r:
        lines.append(f"[policy] deterministic_actions[:6] = {fmt(r['continuous_actions'][:6])}")
    if "discrete_actions" in r:
        lines.append(f"[policy] deterministic_discrete_actions = {r['discrete_actions']}")
    lines.append(f"[policy] engine = {r['engine']} | process start to first action = {r['time_to_first_action_s']:.2f}s")
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
    body = (f"hypernetwork({s.hidden_units}) x{s.num_layers}" if s.hyper else f"Linear({s.hidden_units})->SiLU x{s.num_layers}")
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
                step = global_step(read_checkpoint(path))
            except UsageError:
                step = None
        entry = status_entry(status, path, step)
        rows.append({"file": path.name, "steps": step, "reward": entry.get("reward")})
    top = src.model_dir / f"{src.behavior}.onnx"
    return {"model_dir": str(src.model_dir), "behavior": src.behavior, "checkpoints": rows, "default": default.name,
            "source": src.origin, "note": src.note, "top_onnx": top.name if top.is_file() else None}, bool(rows)


def show_checkpoints(r: dict) -> list:
    lines = [f"[files] {r['model_dir']} (behaviour {r['behavior']}, {r['source']})"]
    if r["note"]:
        lines.append(f"[note] {r['note']}")
    lines.append(f"[files] {len(r['checkpoints'])} PyTorch checkpoint(s):")
    for row in r["checkpoints"]:
        mark = "    <- default (highest step)" if row["file"] == r["default"] else ""
        reward = f"reward {row['reward']}" if row["reward"] is not None else "reward n/a"
        lines.append(f"  - {row['file']:<24} steps {row['steps'] if row['steps'] is not None else 'n/a':>9} | {reward}{mark}")
    lines += [f"[files] top-level ONNX: {r['top_onnx'] or 'none'}", f"[load] default checkpoint: {r['default']}"]
    return lines


def obs_label(ctx: Context) -> str:
    return ctx.args.obs if len(ctx.args.obs) < 24 else "custom"


def mode_action(ctx: Context):
    """Deterministic action for one observation (ML-Agents' deterministic_* outputs)."""
    obs, masks, memory, s = ctx.obs(), ctx.masks(), ctx.memory(), ctx.settings
    out = ctx.policy.act(obs, masks, memory=memory)
    obs_json = floats(obs[0].reshape(-1)) if len(obs) == 1 and obs[0].ndim == 1 else \
        {spec.name: np.asarray(v, np.float32).astype(np.float64).tolist() for spec, v in zip(s.inputs, obs)}
    return {"obs": obs_json, "obs_label": obs_label(ctx), "seed": ctx.args.seed, **action_fields(s, out),
            **kind_fields(s), **ctx.base()}, actions_ok(s, out)


def show_action(r: dict) -> list:
    lines = [header(r, f"deterministic action (obs={r['obs_label']}, seed={r['seed']})")]
    for name, value in (r["obs"].items() if isinstance(r["obs"], dict) else [("obs", r["obs"])]):
        lines.append(f"  {name + '[:8]':<14} = {fmt(np.asarray(value).reshape(-1)[:8])}")
    lines += action_lines(r)
    if "continuous_actions" in r:
        lines.append(f"  action L2 norm = {np.linalg.norm(np.asarray(r['continuous_actions'], np.float64)):.4f}")
    return lines


def mode_sample(ctx: Context):
    """Sampled action with seeded CPU noise, drawn twice with the same seed."""
    obs, masks, memory, s = ctx.obs(), ctx.masks(), ctx.memory(), ctx.settings
    det = ctx.policy.act(obs, masks, memory=memory)
    first, second = (ctx.policy.act(obs, masks, deterministic=False, seed=ctx.args.seed, memory=memory) for _ in range(2))
    same = all(np.array_equal(first[k], second[k]) for k in first)
    obs_json = floats(obs[0].reshape(-1)) if len(obs) == 1 and obs[0].ndim == 1 else \
        {spec.name: np.asarray(v, np.float32).astype(np.float64).tolist() for spec, v in zip(s.inputs, obs)}
    result = {"obs": obs_json, "obs_head": floats(obs[0].reshape(-1)[:8]),
              "obs_label": obs_label(ctx), "seed": ctx.args.seed, "identical": same, **kind_fields(s)}
    if s.continuous_size:
        result.update(deterministic=floats(det["continuous_actions"]), sampled=floats(first["continuous_actions"]),
                      sampled_again=floats(second["continuous_actions"]))
    if s.discrete_branches:
        result.update(deterministic_discrete=det["discrete_actions"].tolist(),
                      sampled_discrete_again=second["discrete_actions"].tolist())
    if ctx.policy.sigma is not None:
        result["sigma"] = floats(ctx.policy.sigma)
    result.update({("sampled_" + k if k != "memory" else k): v for k, v in action_fields(s, first).items() if k != "actions"})
    return {**result, **ctx.base()}, same and actions_ok(s, first, False) and actions_ok(s, det)


def show_sample(r: dict) -> list:
    lines = [header(r, f"sampled action (obs={r['obs_label']}, seed={r['seed']})"),
             f"  obs[:8]        = {fmt(r['obs_head'])}"]
    if "sampled" in r:
        lines += [f"  deterministic  = {fmt(r['deterministic'][:8])}", f"  sampled#1      = {fmt(r['sampled'][:8])}",
                  f"  sampled#2      = {fmt(r['sampled_again'][:8])}"]
    if "sampled_discrete_actions" in r:
        lines += [f"  deterministic discrete = {r['deterministic_discrete']}",
                  f"  sampled#1 discrete     = {r['sampled_discrete_actions']}",
                  f"  sampled#2 discrete     = {r['sampled_discrete_again']}"]
    lines.append(f"  same seed, same draw = {'yes' if r['identical'] else 'NO'}")
    if "sigma" in r:
        lines.append(f"  sigma[:6]      = {fmt(r['sigma'][:6])}")
    return lines


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
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                have = int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    if have is None:
        have = int(os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
    with contextlib.suppress(OSError, ValueError, IndexError):
        group = Path("/proc/self/cgroup").read_text().splitlines()[0].split("::", 1)[1]
        folder = Path("/sys/fs/cgroup") / group.lstrip("/")
        limit = (folder / "memory.max").read_text().strip()
        if limit != "max":
            have = min(have, max(0, int(limit) - int((folder / "memory.current").read_text())))
    return have


def output_writer(path: Path, settings: PolicySettings, arrays: dict) -> Callable:
    """How to write a batch's results: .npy (the continuous actions; continuous-only policies)
    or .npz (continuous_actions, discrete_actions, memory)."""
    if path.suffix.lower() == ".npy":
        if not continuous_only(settings):
            raise UsageError(f"--output {path}: this policy's results are not continuous actions alone; use a .npz file")
        return lambda tmp: np.save(tmp, arrays["continuous_actions"])
    return lambda tmp: np.savez(tmp, **arrays)


def mode_batch(ctx: Context):
    """--batch N random observations in memory, or --obs-file in chunks to --output."""
    if ctx.args.obs_file:
        return batch_file(ctx)
    s, rows = ctx.settings, ctx.args.batch
    output = check_output_path(ctx.args.output, (".npy", ".npz")) if ctx.args.output else None
    if output is not None and output.suffix.lower() == ".npy" and not continuous_only(s):
        raise UsageError(f"--output {output}: this policy's results are not continuous actions alone; use a .npz file")
    check_rows_fit(rows, s)
    obs = random_inputs(s, ctx.args.seed, rows)
    masks = random_masks(s, ctx.args.seed, rows) if ctx.args.mask is None else ctx.masks()
    policy = ctx.policy
    flat, _, _ = policy.prepare(obs, masks)
    t0 = time.perf_counter()
    raw = policy.engine.run(flat)  # first (cold) call
    cold_ms = (time.perf_counter() - t0) * 1e3
    warm = []
    for _ in range(10 if rows <= 4096 else 3):
        t0 = time.perf_counter()
        again = policy.engine.run(flat)
        warm.append((time.perf_counter() - t0) * 1e3)
    warm_ms = float(np.median(warm))
    out, repeat = policy.decide(raw, rows), policy.decide(again, rows)
    stable = all(np.array_equal(out[k], repeat[k]) for k in out)
    if output:
        size = npy_size(out["continuous_actions"].shape) if output.suffix.lower() == ".npy" else None
        atomic_write(output, output_writer(output, s, out), size=size)
    result = {"batch": rows, "seed": ctx.args.seed, **action_fields(s, out), "cold_ms": cold_ms, "warm_ms": warm_ms,
              "warm_calls": len(warm), "repeat_identical": stable,
              "output": str(output.resolve()) if output else None, "throughput_per_s": rows / (warm_ms / 1e3),
              **kind_fields(s), **ctx.base()}
    if "mu" in raw:
        result["mu_abs_max"] = float(np.abs(raw["mu"][: min(rows, 4096)]).max())
    return result, actions_ok(s, out) and stable


def show_batch(r: dict) -> list:
    if "rows" in r:
        return show_batch_file(r)
    rows = r["batch"]
    lines = [header(r, f"batch inference (batch={rows}, seed={r['seed']})"),
             f"  first (cold) call = {r['cold_ms']:.4f} ms | steady (warm, median of {r['warm_calls']}) = {r['warm_ms']:.4f} ms",
             f"  throughput (warm) = {r['throughput_per_s']:,.0f} observations/s"]
    if "continuous_actions" in r:
        actions = np.asarray(r["continuous_actions"], np.float32)
        lines.append("  deterministic[:5, :6] =")
        lines += [f"    batch[{i}] {fmt(actions[i, :6])}" for i in range(min(5, rows))]
        lines.append(f"  |mu| max (first {min(rows, 4096)} rows) = {r['mu_abs_max']:.4f}")
        lines.append(f"  output range = [{actions.min():.4f}, {actions.max():.4f}]")
    if "discrete_actions" in r:
        lines.append(f"  discrete_actions[:5] = {r['discrete_actions'][:5]} (random masks, seed {r['seed']})")
    lines.append(f"  repeated calls identical = {'yes' if r['repeat_identical'] else 'NO'}")
    if r["output"]:
        lines.append(f"  written: {r['output']}")
    return lines


def batch_file(ctx: Context):
    """A dataset-sized batch: memory-mapped input (.npy), chunked inference, results written
    atomically (.npy through a memory map for continuous-only policies, else .npz), progress on stderr."""
    import resource
    s, args = ctx.settings, ctx.args
    path = Path(args.obs_file)
    output = check_output_path(args.output, (".npy", ".npz")) if args.output else None
    data = open_obs_file(path, s)
    if output is not None:
        refuse_same_file(output, [path])
    rows, chunk, policy = data["rows"], args.chunk, ctx.policy
    check_rows_fit(min(chunk, rows), s, "--chunk")
    npy = output is not None and output.suffix.lower() == ".npy"
    if npy and not continuous_only(s):
        raise UsageError(f"--output {output}: this policy's results are not continuous actions alone; use a .npz file")
    try:
        from tqdm import tqdm
        bar = tqdm(total=rows, unit="obs", unit_scale=True, file=sys.stderr,
                   disable=rows < 4 * chunk or not sys.stderr.isatty() and not args.progress, mininterval=0.5)
    except ImportError:
        bar = None
    summary = {"min": np.inf, "max": -np.inf, "first": None}
    t0 = time.perf_counter()

    def run_chunks(sink: Callable[[int, dict], None]) -> None:
        for start in range(0, rows, chunk):
            block = [np.asarray(a[start:start + chunk]) for a in data["inputs"]]
            masks = None if data["action_masks"] is None else np.asarray(data["action_masks"][start:start + chunk])
            memory = None if data["memory"] is None else np.asarray(data["memory"][start:start + chunk])
            for spec, values in zip(s.inputs, block):  # name the bad row as the file counts it
                with np.errstate(over="ignore", invalid="ignore"):
                    finite = np.isfinite(values.reshape(len(values), -1).astype(np.float32)).all(axis=1) \
                        if values.dtype.kind == "f" else np.ones(len(values), bool)
                if not finite.all():
                    raise UsageError(f"--obs-file {path}: row {start + int(np.argmin(finite))}"
                                     f"{' (' + spec.name + ')' if len(s.inputs) > 1 else ''} holds nan or inf "
                                     f"(or a value beyond float32)")
            try:
                out = policy.act(block if len(block) > 1 else block[0], masks, memory=memory)
            except UsageError as exc:
                raise UsageError(f"--obs-file {path}: rows {start}-{start + len(block[0]) - 1}: {exc}")
            sink(start, out)
            if "continuous_actions" in out:
                summary["min"] = min(summary["min"], float(out["continuous_actions"].min()))
                summary["max"] = max(summary["max"], float(out["continuous_actions"].max()))
            if summary["first"] is None:
                summary["first"] = {k: v[0] for k, v in out.items()}
            if bar is not None:
                bar.update(len(block[0]))

    collected: dict = {}

    def collect(start: int, out: dict) -> None:
        for key, value in out.items():
            collected.setdefault(key, []).append(value)

    try:
        if output is None:
            run_chunks(lambda start, out: None)
        elif npy:
            def write(tmp: Path) -> None:
                target = open_npy_memmap(tmp, (rows, s.continuous_size), np.float32)

                def sink(start: int, out: dict) -> None:
                    target[start:start + len(out["continuous_actions"])] = out["continuous_actions"]
                run_chunks(sink)
                target.flush()
                del target
            atomic_write(output, write)
        else:
            run_chunks(collect)
            arrays = {k: np.concatenate(v) for k, v in collected.items()}
            atomic_write(output, lambda tmp: np.savez(tmp, **arrays))
    finally:
        if bar is not None:
            bar.close()
    seconds = time.perf_counter() - t0
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / (1 << 20 if sys.platform == "darwin" else 1024)  # bytes on macOS, KiB on Linux
    first = summary["first"]
    ok = s.tanh_squash or not s.continuous_size or -1.0 <= summary["min"] <= summary["max"] <= 1.0
    return ({"rows": rows, "chunk": chunk, "file_name": path.name, "output": str(output.resolve()) if output else None,
             "seconds": seconds, "throughput_per_s": rows / seconds, "peak_rss_mb": peak_mb,
             "min_action": summary["min"], "max_action": summary["max"],
             **{"first_" + k: v for k, v in action_fields(s, first).items()},
             **({"first_action": floats(first["continuous_actions"])} if "continuous_actions" in first else {}),
             **ctx.base()}, ok)


def show_batch_file(r: dict) -> list:
    lines = [header(r, f"file batch ({r['file_name']}: {r['rows']:,} rows, chunk={r['chunk']:,})")]
    if "first_continuous_actions" in r:
        lines.append(f"  first row actions[:6] = {fmt(r['first_continuous_actions'][:6])}")
        lines.append(f"  output range = [{r['min_action']:.4f}, {r['max_action']:.4f}]")
    if "first_discrete_actions" in r:
        lines.append(f"  first row discrete_actions = {r['first_discrete_actions']}")
    lines.append(f"  time = {r['seconds']:.3f} s | throughput = {r['throughput_per_s']:,.0f} observations/s | "
                 f"peak RSS = {r['peak_rss_mb']:.0f} MB")
    lines.append(f"  written: {r['output']}" if r["output"] else "  (no --output: actions not saved)")
    return lines


def compare(test: np.ndarray, ref: np.ndarray) -> dict:
    diff = np.abs(test.astype(np.float64) - ref.astype(np.float64))
    rel = diff / np.maximum(np.abs(ref.astype(np.float64)), 1e-6)
    return {"cos": cosine(test, ref), "max_abs_err": float(diff.max()), "mean_abs_err": float(diff.mean()),
            "max_rel_err": float(rel.max()),
            "bitwise_equal_ratio": float(np.mean(test.astype(np.float32) == ref.astype(np.float32)))}


def mode_precision(ctx: Context):
    """The chosen device/dtype/engine against a float64 CPU reference computed from the checkpoint:
    continuous actions (cos, max abs error), discrete actions (share identical; max error of
    the masked probabilities)."""
    s, n = ctx.settings, ctx.args.samples
    check_rows_fit(n, s, "--samples")
    policy = ctx.policy
    obs, masks = random_inputs(s, ctx.args.seed, n), random_masks(s, ctx.args.seed, n)
    flat, _, _ = policy.prepare(obs, masks)
    test, ref = policy.engine.run(flat), policy.reference(flat)
    same_as_test = ctx.engine_name == "torch" and ctx.device.type == "cpu" and ctx.args.dtype == "float32"
    cpu32 = test if same_as_test else TorchEngine(ctx.checkpoint.actor, torch.device("cpu"), "float32").run(flat)
    key = "deterministic_continuous_actions" if s.continuous_size else "probabilities"
    vs_ref, vs_cpu = compare(test[key], ref[key]), compare(test[key], cpu32[key])
    min_cos = 0.999  # a low-precision dtype's bar; --tol sets the error's
    passed = vs_ref["cos"] >= min_cos and vs_ref["max_abs_err"] < ctx.args.tol
    result = {"reference": "float64 cpu", "samples": n, "tol": ctx.args.tol, "min_cos": min_cos, "seed": ctx.args.seed,
              "compared": "continuous actions" if s.continuous_size else "masked action probabilities",
              **{k: vs_ref[k] for k in ("cos", "max_abs_err", "max_rel_err", "bitwise_equal_ratio")},
              "vs_cpu_float32": vs_cpu}
    if s.discrete_branches:
        ours, theirs = test["deterministic_discrete_actions"], ref["deterministic_discrete_actions"]
        result["discrete_identical_ratio"] = float(np.mean((ours == theirs).all(axis=1)))
        result["probability_max_abs_err"] = compare(test["probabilities"], ref["probabilities"])["max_abs_err"]
    if s.memory_size:
        result["memory_max_abs_err"] = compare(test["recurrent_out"], ref["recurrent_out"])["max_abs_err"]
    result["passed"] = passed
    return {**result, **ctx.base()}, passed


def show_precision(r: dict) -> list:
    c = r["vs_cpu_float32"]
    lines = [header(r, "precision against a float64 CPU reference"),
             f"  samples = {r['samples']} (normal observations, RandomState({r['seed']}))",
             f"  vs float64: cos = {r['cos']:.8f} | max_abs_err = {r['max_abs_err']:.3e} | max_rel_err = "
             f"{r['max_rel_err']:.3e} | bitwise equal (after float32 rounding) = {r['bitwise_equal_ratio']:.2%} ({r['compared']})",
             f"  vs CPU float32 (torch): cos = {c['cos']:.8f} | max_abs_err = {c['max_abs_err']:.3e} | "
             f"bitwise equal = {c['bitwise_equal_ratio']:.2%}"]
    if "discrete_identical_ratio" in r:
        lines.append(f"  discrete actions identical to float64 = {r['discrete_identical_ratio']:.2%} "
                     f"(max probability error {r['probability_max_abs_err']:.3e})")
    if "memory_max_abs_err" in r:
        lines.append(f"  next memory vs float64: max_abs_err = {r['memory_max_abs_err']:.3e}")
    lines.append(f"  holds (cos >= {r['min_cos']:g} and max_abs_err < {r['tol']:g}): {'yes' if r['passed'] else 'NO'}")
    return lines


class MLAgentsOnnx:
    """An ML-Agents ONNX file run by a bare onnxruntime session: the reference. Reads ML-Agents
    2.x+ files (obs_i inputs, deterministic_* outputs) and older ones (1.x: one vector_observation
    input; without deterministic_* outputs the action mean and each branch's masked logits are
    read out of the graph)."""

    def __init__(self, path: Path, settings: PolicySettings):
        import onnx
        self.path, self.settings = path, settings
        self.iface = read_onnx_interface(path)
        self.direct = [tuple(self.iface.inputs.get(spec.name, ())[1:]) for spec in settings.inputs] == \
            [tuple(spec.shape) for spec in settings.inputs]  # a policy that takes the file's own inputs
        shapes = [spec.shape for spec in settings.inputs] if self.direct else \
            onnx_input_shapes(self.iface, dict(enumerate(settings.inputs)))
        if shapes is None or len(shapes) != len(settings.inputs) or any(
                tuple(a) != tuple(spec.shape) for a, spec in zip(shapes, settings.inputs)):
            raise NotThisPolicy(f"takes inputs {shapes}, the checkpoint {[list(i.shape) for i in settings.inputs]}")
        try:
            outputs, model = self.iface.outputs, onnx.load(str(path))
        except Exception as exc:  # external data outside its folder, missing or damaged
            raise UsageError(f"{short_path(path)}: cannot read its weights "
                             f"({str(exc).splitlines()[0][:160] if str(exc) else type(exc).__name__})")
        self.fetch, self.logit_names, exposed = [], [], []
        if settings.continuous_size:
            if "deterministic_continuous_actions" in outputs:
                self.fetch.append("deterministic_continuous_actions")
            else:  # older files: expose mu (the Gemm of action_model._continuous_distribution.mu) and clip it here
                mu = next((n.output[0] for n in model.graph.node if n.op_type == "Gemm"
                           and any(i.endswith("_continuous_distribution.mu.weight") for i in n.input)), None)
                if mu is None:
                    raise UsageError(f"{path}: no deterministic_continuous_actions output and no mu layer to read; "
                                     f"cannot compare continuous actions with it")
                self.mu_name = mu
                exposed.append(mu)
        if settings.discrete_branches:
            if "deterministic_discrete_actions" in outputs:
                self.fetch.append("deterministic_discrete_actions")
            else:  # older files (1.x: log-probabilities; 2.x: sampled actions): each branch's masked logits
                self.logit_names = [n.input[0] for n in model.graph.node if n.op_type == "Softmax"
                                    and any(a.name == "axis" and a.i in (1, -1) for a in n.attribute)]
                if len(self.logit_names) != len(settings.discrete_branches):
                    raise UsageError(f"{path}: no deterministic_discrete_actions output and not one Softmax per "
                                     f"branch to read; cannot compare discrete actions with it")
                exposed += self.logit_names
        if settings.memory_size:
            if "recurrent_out" not in outputs:
                raise UsageError(f"{path}: no recurrent_out output; cannot compare the memory with it")
            self.fetch.append("recurrent_out")
        model.graph.output.extend(onnx.helper.make_tensor_value_info(name, onnx.TensorProto.FLOAT, None)
                                  for name in exposed)
        self.fetch += exposed
        self.model = model.SerializeToString() if exposed else str(path)  # what the session runs
        self.session = onnx_session(self.model, tuned=False)

    def feed(self, flat: list) -> dict:
        """The file's inputs for engine-layout inputs (a 1.x file: see legacy_input_shapes)."""
        s, n = self.settings, len(self.settings.inputs)
        names = self.iface.inputs
        feed = {}
        if self.iface.legacy_inputs and not self.direct:
            rows = len(flat[0])
            vectors = [x.reshape(rows, -1) for x, spec in zip(flat[:n], s.inputs) if spec.kind == "vector"]
            if "vector_observation" in names:
                feed["vector_observation"] = np.ascontiguousarray(np.concatenate(vectors, axis=1)) if vectors else \
                    np.zeros((rows, 0), np.float32)
            for i, (x, spec) in enumerate(zip(flat[:n], s.inputs)):
                if spec.kind == "visual":
                    name = f"visual_observation_{sum(1 for t in s.inputs[:i] if t.kind == 'visual')}"
                    channels_last = tuple(names[name][1:]) != tuple(spec.shape)
                    feed[name] = np.ascontiguousarray(x.transpose(0, 2, 3, 1)) if channels_last else x
                elif spec.kind == "entities":
                    feed[spec.name] = x
        else:
            feed.update({spec.name: x for spec, x in zip(s.inputs, flat[:n]) if spec.name in names})
        if s.discrete_branches and "action_masks" in names:
            feed["action_masks"] = flat[n]
        if s.memory_size and "recurrent_in" in names:
            memory = flat[-1]
            feed["recurrent_in"] = memory if len(names["recurrent_in"]) == 3 else memory[:, 0]
        return feed

    def deterministic(self, flat: list) -> dict:
        """ML-Agents' deterministic actions (and next memory) for engine-layout inputs; NotThisPolicy
        when its answers have other shapes than this checkpoint's."""
        s, rows = self.settings, len(flat[0])
        try:
            values = dict(zip(self.fetch, self.session.run(self.fetch, self.feed(flat))))
        except Exception as exc:  # e.g. an input declared wider than the checkpoint's
            raise UsageError(f"{short_path(self.path)}: onnxruntime cannot run it "
                             f"({str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__})")
        want = {"deterministic_continuous_actions": (rows, s.continuous_size),
                "deterministic_discrete_actions": (rows, len(s.discrete_branches)),
                "discrete_actions": (rows, sum(s.discrete_branches)), "recurrent_out": (rows, 1, s.memory_size)}
        if s.continuous_size and "deterministic_continuous_actions" not in values:
            want[self.mu_name] = (rows, s.continuous_size)
        for name, value in values.items():
            if np.size(value) != math.prod(want[name]):
                raise NotThisPolicy(f"answers {name} of shape {list(np.shape(value))}, the checkpoint's is {list(want[name])}")
            values[name] = np.reshape(value, want[name])
        out = {}
        if s.continuous_size:
            out["continuous_actions"] = values["deterministic_continuous_actions"] \
                if "deterministic_continuous_actions" in values else \
                deterministic_continuous(values[self.mu_name], s.tanh_squash)
        if s.discrete_branches:
            if "deterministic_discrete_actions" in values:
                out["discrete_actions"] = values["deterministic_discrete_actions"].astype(np.int64)
            else:
                logits = [torch.from_numpy(values[name]) for name in self.logit_names]
                out["discrete_actions"] = deterministic_discrete(logits).numpy()
        if s.memory_size:
            out["memory"] = values["recurrent_out"].reshape(len(flat[0]), s.memory_size)
        return out


def checkpoint_onnx(ctx: Context) -> Path:
    """The ONNX that belongs to the chosen checkpoint: --onnx, <Behavior>-<step>.onnx beside it,
    or <Behavior>.onnx for the final checkpoint only."""
    if ctx.args.onnx:
        return regular_file("--onnx", ctx.args.onnx)
    ckpt, src = ctx.checkpoint, ctx.source
    found = find_checkpoint_onnx(ckpt.path, src.model_dir, src.behavior, ckpt.global_step)
    if found is None:
        raise UsageError(f"{ckpt.path.name}: no ONNX belongs to this checkpoint (looked for "
                         f"{src.behavior or ckpt.path.parent.name}-<step>.onnx beside it and the final "
                         f"{src.behavior or ckpt.path.parent.name}.onnx); pass --onnx FILE")
    return found


def parity(s: PolicySettings, ours: dict, theirs: dict) -> dict:
    """How far our actions are from the reference's: continuous max abs error and cos, discrete
    mismatching rows, memory error relative to max(1, |value|)."""
    out = {}
    if "continuous_actions" in ours:
        st = compare(ours["continuous_actions"], theirs["continuous_actions"])
        out.update(max_abs_err=st["max_abs_err"], mean_abs_err=st["mean_abs_err"], cos=st["cos"])
    if "discrete_actions" in ours:
        out["discrete_mismatches"] = int((np.asarray(ours["discrete_actions"]) != np.asarray(theirs["discrete_actions"])).any(axis=1).sum())
    if "memory" in ours:
        a, b = np.asarray(ours["memory"], np.float64), np.asarray(theirs["memory"], np.float64)
        out["memory_max_rel_err"] = float((np.abs(a - b) / np.maximum(1.0, np.abs(b))).max())
    return out


PARITY_MIN_COS = 0.999999  # onnx-compare: the rebuilt policy's continuous actions against ML-Agents' ONNX


def parity_holds(p: dict, tol: float) -> bool:
    return (p.get("max_abs_err", 0.0) < tol and p.get("cos", 1.0) >= PARITY_MIN_COS
            and p.get("discrete_mismatches", 0) == 0 and p.get("memory_max_rel_err", 0.0) < tol)


def mode_onnx_compare(ctx: Context):
    """The rebuilt policy against the ML-Agents ONNX of the same checkpoint (onnxruntime), with
    random action masks; a memory policy also over a --steps rollout carrying its memory."""
    onnx_path = checkpoint_onnx(ctx)
    result = {"reference": str(onnx_path), "rows": ctx.args.batch, "seed": ctx.args.seed, **ctx.base()}
    try:  # (its inputs, or its answers, are not this checkpoint's)
        return compare_with_reference(ctx, MLAgentsOnnx(onnx_path, ctx.settings), result)
    except NotThisPolicy as exc:
        return {**result, "not_this_policy": str(exc), "max_abs_err": None, "mean_abs_err": None, "cos": None,
                "passed": False}, False


def compare_with_reference(ctx: Context, reference: MLAgentsOnnx, result: dict):
    s, rows = ctx.settings, ctx.args.batch
    check_rows_fit(rows, s)
    policy = ctx.policy
    obs, masks = random_inputs(s, ctx.args.seed, rows), random_masks(s, ctx.args.seed, rows)
    memory = None
    if s.memory_size:  # a state as a running LSTM has it: h in (-1, 1), c wider
        rng = np.random.RandomState(ctx.args.seed + 1)
        half = s.memory_size // 2
        memory = np.concatenate([np.tanh(rng.randn(rows, half)), 2 * rng.randn(rows, half)], axis=1).astype(np.float32)
    flat, _, _ = policy.prepare(obs, masks, memory)
    ours, theirs = policy.run(flat, rows), reference.deterministic(flat)
    stats, tol = parity(s, ours, theirs), ctx.args.tol
    passed = parity_holds(stats, tol)
    if "continuous_actions" in ours:
        result.update(reference_first=floats(theirs["continuous_actions"][0, :6]),
                      rebuilt_first=floats(ours["continuous_actions"][0, :6]))
    if "memory" in ours:
        stats["rollout"] = memory_rollout(policy, reference, s, ctx.args.seed, ctx.args.steps)
        passed = passed and parity_holds(stats["rollout"], tol)
    result.update({k: stats.get(k) for k in ("max_abs_err", "mean_abs_err", "cos")},
                  **{k: v for k, v in stats.items() if k not in ("max_abs_err", "mean_abs_err", "cos")},
                  tol=tol, min_cos=PARITY_MIN_COS, legacy_interface=reference.iface.legacy, passed=passed)
    return result, passed


def show_onnx_compare(r: dict) -> list:
    name = Path(r["reference"]).name
    lines = [header(r, f"ONNX cross-check (batch={r['rows']}, seed={r['seed']}) against {name}")]
    if "not_this_policy" in r:
        return lines + [f"  {name} {r['not_this_policy']}: not this policy"]
    if r["max_abs_err"] is not None:
        lines += [f"  ML-Agents ONNX deterministic[0][:6] = {fmt(r['reference_first'])}",
                  f"  rebuilt policy deterministic[0][:6] = {fmt(r['rebuilt_first'])}",
                  f"  max_abs_err = {r['max_abs_err']:.3e} | mean_abs_err = {r['mean_abs_err']:.3e} | cos = {r['cos']:.8f}"]
    if "discrete_mismatches" in r:
        lines.append(f"  discrete actions: {r['discrete_mismatches']} of {r['rows']} rows differ (random masks)")
    if "rollout" in r:
        ro = r["rollout"]
        lines.append(f"  next memory: max error relative to max(1, |value|) = {r['memory_max_rel_err']:.3e}")
        lines.append(f"  {ro['steps']}-step rollout carrying each side's own memory: worst step {ro['worst_step']}: "
                     f"memory {ro['memory_max_rel_err']:.3e}, {ro.get('discrete_mismatches', 0)} discrete mismatches"
                     + (f", continuous {ro['max_abs_err']:.3e}" if "max_abs_err" in ro else ""))
    if r["legacy_interface"]:
        lines.append(f"  ({name} has no deterministic_* outputs (ML-Agents 1.x, early 2.x): compared through its "
                     f"action mean / masked logits)")
    lines.append(f"  holds (max_abs_err < {r['tol']:g}, cos >= {r['min_cos']:g}, no discrete mismatch, memory < {r['tol']:g}): "
                 + ("yes" if r["passed"] else "NO"))
    return lines


def memory_rollout(policy: Policy, reference: MLAgentsOnnx, s: PolicySettings, seed: int, steps: int) -> dict:
    """Both sides from zero memory over `steps` steps of 8 agents, each carrying its own memory."""
    rows, worst, worst_step = 8, {}, 0
    ours_mem = theirs_mem = np.zeros((rows, s.memory_size), np.float32)
    for t in range(steps):
        obs, masks = random_inputs(s, seed + 100 + t, rows), random_masks(s, seed + 100 + t, rows)
        flat, _, _ = policy.prepare(obs, masks, ours_mem)
        ours = policy.run(flat, rows)
        ref_flat, _, _ = policy.prepare(obs, masks, theirs_mem)
        theirs = reference.deterministic(ref_flat)
        p = parity(s, ours, theirs)
        if not worst or p.get("memory_max_rel_err", 0) > worst.get("memory_max_rel_err", 0) or \
                p.get("discrete_mismatches", 0) > worst.get("discrete_mismatches", 0):
            worst, worst_step = p, t
        worst = {k: max(worst.get(k, 0), v) if k != "cos" else min(worst.get(k, 1), v) for k, v in p.items()}
        ours_mem, theirs_mem = ours["memory"], theirs["memory"]
    return {**worst, "worst_step": worst_step, "steps": steps}


def mode_export_onnx(ctx: Context):
    """Write the policy with ML-Agents' ONNX interface (torch.onnx.export of the same modules, as
    ML-Agents exports them), verified against the checkpoint's own ONNX before it is written."""
    import onnx
    if not ctx.args.output:
        DEFAULT_EXPORT.parent.mkdir(exist_ok=True)  # e.g. inference.py copied alone onto a host
    output = check_output_path(ctx.args.output or DEFAULT_EXPORT, (".onnx",))
    s, ckpt = ctx.settings, ctx.checkpoint
    # ML-Agents' own ONNX files of this checkpoint are inputs too, read or not at load time (a
    # policy whose inputs are all normalised never reads them): the export is verified against one.
    src = ctx.source
    theirs = [p for p in mlagents_onnx_files(ckpt.path, src.model_dir, src.behavior, ckpt.global_step) if p.is_file()]
    refuse_same_file(output, [ckpt.path] + ([ckpt.onnx.path] if ckpt.onnx else []) +
                     ([Path(ctx.args.onnx)] if ctx.args.onnx else []) + theirs)
    data = export_mlagents_onnx(ckpt.actor)
    model = onnx.load_from_string(data)
    onnx.checker.check_model(model)
    rows = 64
    obs, masks = random_inputs(s, ctx.args.seed, rows), random_masks(s, ctx.args.seed, rows)
    memory = np.random.RandomState(ctx.args.seed + 1).randn(rows, s.memory_size).astype(np.float32) if s.memory_size else None
    flat, _, _ = ctx.policy.prepare(obs, masks, memory)
    session = onnx_session(data, tuned=False)
    fetch = step_outputs(s, True)
    feed = dict(zip(input_names(s, exported=True), flat))
    mine = dict(zip(fetch, session.run(fetch, feed)))
    reference_path = None
    try:  # another policy's ONNX named with --onnx is a failure (exit 1), never "no ONNX"
        reference_path = checkpoint_onnx(ctx)
        theirs = MLAgentsOnnx(reference_path, s).deterministic(flat)
        reference_name = str(reference_path)
    except (UsageError, NotThisPolicy) as exc:  # no usable ML-Agents ONNX beside the checkpoint: hold it to float64
        if ctx.args.onnx:
            raise
        ref = ctx.policy.reference(flat)
        theirs = ctx.policy.decide({k: np.asarray(v, np.float32) for k, v in ref.items()}, rows)
        reference_name = "float64 rebuild (" + ("no ML-Agents ONNX for this checkpoint" if reference_path is None else
                                                f"{reference_path.name} not usable: {exc}") + ")"
    ours = {}
    if "deterministic_continuous_actions" in mine:
        ours["continuous_actions"] = mine["deterministic_continuous_actions"]
    if "deterministic_discrete_actions" in mine:
        ours["discrete_actions"] = mine["deterministic_discrete_actions"]
    if "recurrent_out" in mine:
        ours["memory"] = mine["recurrent_out"].reshape(rows, -1)
    stats = parity(s, ours, theirs)
    max_abs = max([stats.get("max_abs_err", 0.0), stats.get("memory_max_rel_err", 0.0)])
    identical = all(np.array_equal(ours[k], theirs[k]) for k in ours)
    tol = 1e-5  # the export is written only this close to the reference
    passed = max_abs <= tol and stats.get("discrete_mismatches", 0) == 0
    if passed:
        atomic_write(output, lambda tmp: tmp.write_bytes(data))
    initializers = {x.name for x in model.graph.initializer}
    return {"path": str(output.resolve()) if passed else None, "max_abs_err_vs_reference": max_abs,
            "bit_identical": identical, "reference": reference_name, "tol": tol, **stats,
            "inputs": [i.name for i in model.graph.input if i.name not in initializers],
            "outputs": [o.name for o in model.graph.output], **ctx.base()}, passed


def show_export_onnx(r: dict) -> list:
    lines = ["===== export the rebuilt policy as ONNX (ML-Agents interface, opset 9) =====",
             f"  inputs  = {r['inputs']} | outputs = {r['outputs']}",
             f"  vs {r['reference']}: max_abs_err = {r['max_abs_err_vs_reference']:.3e}"
             + (f" | discrete mismatches = {r['discrete_mismatches']}" if "discrete_mismatches" in r else "")
             + f" | bit-identical = {'yes' if r['bit_identical'] else 'no'}"]
    lines.append(f"  written: {r['path']}" if r["path"] else
                 f"  NOT written: the export differs from the reference by more than {r['tol']:g}")
    return lines


def rollout_sequence(ctx: Context, seed: int, steps: int, deterministic: bool) -> dict:
    """One observation per step (random_inputs(seed, steps), random masks), one noise draw per
    step from one torch.Generator(seed), the memory carried from zeros; step 0 equals
    `sample --seed S` for a continuous-only policy."""
    s, policy = ctx.settings, ctx.policy
    obs, masks = random_inputs(s, seed, steps), random_masks(s, seed, steps)
    generator = None if deterministic else torch.Generator().manual_seed(seed)
    memory, seq = None, {}
    for t in range(steps):
        step_obs = [o[t:t + 1] for o in obs]
        out = policy.act(step_obs, None if masks is None else masks[t:t + 1], deterministic, memory=memory,
                         generator=generator)
        memory = out.get("memory")
        for key, value in out.items():
            seq.setdefault(key, []).append(value[0])
    return {k: np.stack(v) for k, v in seq.items()}


def sequence_digest(seq: dict) -> str:
    digest = hashlib.sha256()
    for key in ("continuous_actions", "discrete_actions", "memory"):
        if key in seq:
            digest.update(np.ascontiguousarray(seq[key], np.float32 if key != "discrete_actions" else np.int64).tobytes())
    return digest.hexdigest()


def mode_fingerprint(ctx: Context):
    """sha256 of a seeded action sequence (memory carried), computed twice in this process."""
    a, s = ctx.args, ctx.settings
    check_rows_fit(a.steps, s, "--steps")
    runs = [rollout_sequence(ctx, a.seed, a.steps, a.deterministic) for _ in range(2)]
    digests = [sequence_digest(r) for r in runs]
    identical = digests[0] == digests[1] and all(np.array_equal(runs[0][k], runs[1][k]) for k in runs[0])
    key = "continuous_actions" if "continuous_actions" in runs[0] else "discrete_actions"
    first = {k: v[0] for k, v in runs[0].items()}
    return ({"sha256": digests[0], "identical": identical, "first_action": floats(first[key]),
             "first_action_run2": floats(runs[1][key][0]),
             **{"first_" + k: v for k, v in action_fields(s, first).items() if k != "actions"},
             "steps": a.steps, "seed": a.seed, "deterministic": a.deterministic, **ctx.base()},
            identical and actions_ok(s, runs[0], a.deterministic))


def show_fingerprint(r: dict) -> list:
    return [header(r, f"action-sequence fingerprint (seed={r['seed']}, steps={r['steps']}, deterministic={r['deterministic']})"),
            f"  run1 first action[:6] = {fmt(r['first_action'][:6])}",
            f"  run2 first action[:6] = {fmt(r['first_action_run2'][:6])}",
            f"  runs identical        = {'yes' if r['identical'] else 'NO'}",
            f"  sha256(actions)       = {r['sha256']}"]


def mode_stats(ctx: Context):
    """Closed-loop rollouts on a SYNTHETIC dynamics (not the policy's Unity environment):
    every input decays and is pushed by the action: x' = 0.9 x + 0.5 feedback + 0.1 noise, where
    feedback tiles the action vector (continuous actions, else discrete actions scaled to [-1, 1])
    over the input's values; images are clipped to [0, 1] and entity rows stay present; noise
    from RandomState(seed + r); the memory is carried from zeros."""
    a, s, policy = ctx.args, ctx.settings, ctx.policy
    rollouts = []
    for r in range(a.rollouts):
        rng = np.random.RandomState(a.seed + r)
        obs = random_inputs(s, a.seed + r)
        generator = None if a.deterministic else torch.Generator().manual_seed(a.seed + r)
        memory, times, seq = None, [], []
        for t in range(a.steps):
            t0 = time.perf_counter()
            out = policy.act(obs, deterministic=a.deterministic, memory=memory, generator=generator)
            times.append(time.perf_counter() - t0)
            memory = out.get("memory")
            feedback = action_feedback(s, out)
            seq.append(out)
            obs = [synthetic_step(spec, x, feedback, rng) for spec, x in zip(s.inputs, obs)]
        ok = all(actions_ok(s, o, a.deterministic) for o in seq)
        row = {"rollout": r, "steps": a.steps, "mean_abs_action": float(np.mean([np.abs(action_feedback(s, o)).mean() for o in seq])),
               "max_abs_action": float(np.max([np.abs(action_feedback(s, o)).max() for o in seq])), "all_in_range": ok,
               "mean_step_ms": float(np.mean(times) * 1e3)}
        rollouts.append(row)
    all_in = all(r["all_in_range"] for r in rollouts)
    mean_ms = float(np.mean([r["mean_step_ms"] for r in rollouts]))
    return {"rollouts": rollouts, "all_in_range": all_in, "mean_step_ms": mean_ms, "steps": a.steps, "seed": a.seed,
            "dynamics": "synthetic: x' = 0.9*x + 0.5*tile(action) + 0.1*N(0,1) per input", **ctx.base()}, all_in


def show_stats(r: dict) -> list:
    lines = [header(r, f"closed-loop rollouts on synthetic dynamics (rollouts={len(r['rollouts'])}, steps={r['steps']}, "
                       f"first seed={r['seed']})")]
    lines += [f"  rollout[{row['rollout']:02d}] steps={row['steps']:4d} | mean|a|={row['mean_abs_action']:.4f} | "
              f"max|a|={row['max_abs_action']:.4f} | in[-1,1]={row['all_in_range']} | avg={row['mean_step_ms']:.4f}ms"
              for row in r["rollouts"]]
    return lines + [f"  -> all actions in range: {'yes' if r['all_in_range'] else 'NO'} | mean step time {r['mean_step_ms']:.4f} ms",
                    "  (synthetic dynamics for a stability and range check, not the policy's Unity environment)"]


def action_feedback(s: PolicySettings, out: dict) -> np.ndarray:
    parts = []
    if "continuous_actions" in out:
        parts.append(np.clip(np.asarray(out["continuous_actions"], np.float64), -1, 1))
    if "discrete_actions" in out:
        sizes = np.maximum(np.asarray(s.discrete_branches) - 1, 1)
        parts.append(2.0 * np.asarray(out["discrete_actions"]) / sizes - 1.0)
    return np.concatenate(parts)


def synthetic_step(spec: InputSpec, x: np.ndarray, feedback: np.ndarray, rng) -> np.ndarray:
    count = int(np.prod(spec.shape))
    push = np.tile(feedback, -(-count // feedback.size))[:count].reshape(spec.shape)
    new = 0.9 * x + 0.5 * push + 0.1 * rng.randn(*spec.shape)
    if spec.kind == "visual":
        new = np.clip(new, 0.0, 1.0)
    return new.astype(np.float32)


def percentiles(times_ms: list) -> dict:
    t = np.asarray(times_ms)
    return {"avg_ms": float(t.mean()), "p50_ms": float(np.percentile(t, 50)), "p95_ms": float(np.percentile(t, 95)),
            "p99_ms": float(np.percentile(t, 99)), "max_ms": float(t.max())}


# The bare contender of --mode benchmark runs in a process of its own: an onnxruntime session keeps
# its intra-op threads spinning for tens of milliseconds after each run, so two sessions in one
# process (ours and the bare one) fight for the cores and both come out slower than either alone.
# This program (numpy and onnxruntime only, no torch) loads the model with default options and, on
# each request (pickled on stdin), times that many calls and answers (pickled on stdout) once its
# own threads have gone idle.
BARE_ONNXRUNTIME_PROGRAM = r'''
import os, pickle, sys, time
answer, ask = os.fdopen(os.dup(1), "wb"), sys.stdin.buffer
os.dup2(2, 1)  # stray prints go to stderr, not into the answers


def settle(limit_s=1.0):
    end = time.perf_counter() + limit_s
    while time.perf_counter() < end:
        cpu, t0 = time.process_time(), time.perf_counter()
        time.sleep(0.01)
        if time.process_time() - cpu < 0.05 * (time.perf_counter() - t0):
            return


def send(message):
    pickle.dump(message, answer)
    answer.flush()


try:
    import onnxruntime as ort
    job = pickle.load(ask)
    session = ort.InferenceSession(job["model"], providers=["CPUExecutionProvider"])  # default options
    names = {i.name for i in session.get_inputs()}
    feed, fetch = {k: v for k, v in job["feed"].items() if k in names}, job["fetch"]
    run = session.run
    run(fetch, feed)
except Exception as exc:
    text = str(exc).strip()
    send(("error", type(exc).__name__ + (": " + text.splitlines()[0][:200] if text else "")))
    sys.exit(1)
send(("ready", ort.__version__))
perf = time.perf_counter
while True:
    try:
        n = pickle.load(ask)
    except EOFError:
        break
    if n is None:
        break
    run(fetch, feed)  # untimed: wakes the thread pool after the pause
    times = []
    for _ in range(n):
        t0 = perf()
        run(fetch, feed)
        times.append((perf() - t0) * 1e3)
    settle()
    send(times)
'''


def settle_threads(limit_s: float = 1.0) -> None:
    """Return once this process's threads are idle (this thread sleeping, no other using more than
    5 % of a core), at most limit_s: onnxruntime's pool (and OpenMP's) spins a while after a run."""
    end = time.perf_counter() + limit_s
    while time.perf_counter() < end:
        cpu, t0 = time.process_time(), time.perf_counter()
        time.sleep(0.01)
        if time.process_time() - cpu < 0.05 * (time.perf_counter() - t0):
            return


class BareOnnxRuntime:
    """The bare contender in its own process (BARE_ONNXRUNTIME_PROGRAM): block(n) -> n latencies (ms)."""

    def __init__(self, model, fetch: list, feed: dict):
        import pickle
        import subprocess
        self.pickle, self.stderr = pickle, tempfile.TemporaryFile()
        try:
            self.proc = subprocess.Popen([sys.executable or "python3", "-c", BARE_ONNXRUNTIME_PROGRAM],
                                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.stderr)
        except OSError as exc:
            self.stderr.close()
            raise UsageError(f"benchmark: cannot start the bare onnxruntime process ({exc.strerror or exc})")
        try:
            reply = self._ask({"model": model, "fetch": fetch, "feed": feed})
        except BaseException:
            self.close()
            raise
        if reply[0] != "ready":
            self.close()
            raise UsageError(f"benchmark: the bare onnxruntime session cannot run the model ({reply[1]})")

    def _ask(self, message):
        try:
            self.pickle.dump(message, self.proc.stdin)
            self.proc.stdin.flush()
            return self.pickle.load(self.proc.stdout)
        except (OSError, EOFError, self.pickle.UnpicklingError):
            self.proc.wait(timeout=5)
            self.stderr.seek(0)
            lines = self.stderr.read().decode(errors="replace").strip().splitlines()
            raise UsageError(f"benchmark: the bare onnxruntime process ended (exit {self.proc.returncode})"
                             + (f": {lines[-1][:200]}" if lines else ""))

    def block(self, n: int) -> list:
        return self._ask(n)

    def close(self) -> None:
        if self.proc.poll() is None:
            with contextlib.suppress(OSError, ValueError):
                self.proc.stdin.close()  # end of requests: it exits
            try:
                self.proc.wait(timeout=5)
            except Exception:
                self.proc.kill()
                self.proc.wait()
        for pipe in (self.proc.stdin, self.proc.stdout, self.stderr):
            with contextlib.suppress(OSError, ValueError):
                pipe.close()


def bare_onnxruntime_job(ctx: Context, flat: list) -> tuple:
    """What the bare contender runs: (model path or bytes, its deterministic outputs, feed, label).
    The checkpoint's own ML-Agents ONNX, every input fed as MLAgentsOnnx feeds it; else ML-Agents'
    export of this checkpoint."""
    s = ctx.settings
    try:  # (NotThisPolicy goes through: another policy's ONNX is a failure, not "no ONNX")
        path = checkpoint_onnx(ctx)
        reference = MLAgentsOnnx(path, s)
    except UsageError:
        if ctx.args.onnx:
            raise
        return export_mlagents_onnx(ctx.checkpoint.actor), list(ctx.policy.fetch[True]), \
            dict(zip(input_names(s, exported=True), flat)), "export of this checkpoint"
    reference.session = None  # the contender runs in a process of its own: no thread pool here
    return reference.model, list(reference.fetch), reference.feed(flat), path.name


def timed_calls(fn: Callable, n: int) -> list:
    """n latencies (ms) of fn, after one untimed call that wakes the threads after a pause."""
    fn()
    times, perf = [], time.perf_counter
    for _ in range(n):
        t0 = perf()
        fn()
        times.append((perf() - t0) * 1e3)
    return times


def mode_benchmark(ctx: Context):
    """Latency of one control-loop call, policy.act() as a user calls it (its input checks, host
    numpy in, host actions out, device synchronised), side by side with a bare onnxruntime session (default options) on the checkpoint's own ONNX.
    The bare session runs in a process of its own; the two take turns in blocks of calls (pipe
    handshake), each block starting once the other side's threads have gone idle, so neither
    slows the other and both see the same machine load."""
    import importlib.util
    a, s = ctx.args, ctx.settings
    if a.plot:
        check_output_path(a.plot, (".png",), "--plot")
    check_rows_fit(a.batch, s)
    policy = ctx.policy
    obs, masks = random_inputs(s, a.seed, a.batch), random_masks(s, a.seed, a.batch)
    flat, _, _ = policy.prepare(obs, masks)
    warmup = max(20, a.runs // 10)

    def ours():
        policy.act(obs, masks)

    def ours_block(n: int) -> list:
        times = timed_calls(ours, n)
        synchronize(ctx.device)  # (each timed call ends by copying actions to the host, which waits too)
        settle_threads()
        return times

    bare, bare_name = None, None
    if importlib.util.find_spec("onnxruntime") and importlib.util.find_spec("onnx"):
        model, fetch, feed, bare_name = bare_onnxruntime_job(ctx, flat)
        bare = BareOnnxRuntime(model, fetch, feed)
    try:
        contenders = {"engine": ours_block, **({"onnxruntime": bare.block} if bare else {})}
        warm = [float(np.median(block(warmup))) for block in contenders.values()]
        # turns of about 0.25 s of calls (a turn's first calls after the other's turn run slower on a busy
        # machine: longer turns dilute that), at least 5 turns each when both run and --runs allows
        block = a.runs if bare is None else max(1, min(math.ceil(a.runs / 5), int(250 / max(max(warm), 1e-3))))
        times, paired = {k: [] for k in contenders}, []
        done, turns = 0, 0
        while done < a.runs:
            n = min(block, a.runs - done)
            order = list(contenders) if turns % 2 == 0 else list(contenders)[::-1]  # who goes first alternates
            turn = {key: contenders[key](n) for key in order}
            for key, values in turn.items():
                times[key] += values
            if bare is not None:
                paired.append(float(np.median(turn["engine"]) / np.median(turn["onnxruntime"])))
            done, turns = done + n, turns + 1
    finally:
        if bare is not None:
            bare.close()
    ours_t = percentiles(times["engine"])
    result = {"runs": a.runs, "warmup": warmup, "batch": a.batch, **ours_t,
              "throughput_per_s": a.batch / (ours_t["avg_ms"] / 1e3), **ctx.base(),
              "onnxruntime_p50_ms": None, "ratio_to_onnxruntime": None, "throughput_ratio_to_onnxruntime": None}
    if bare is not None:
        bare_t = percentiles(times["onnxruntime"])
        result.update(onnxruntime_p50_ms=bare_t["p50_ms"], onnxruntime_avg_ms=bare_t["avg_ms"],
                      onnxruntime_throughput_per_s=a.batch / (bare_t["avg_ms"] / 1e3),
                      ratio_to_onnxruntime=ours_t["p50_ms"] / bare_t["p50_ms"],
                      throughput_ratio_to_onnxruntime=bare_t["avg_ms"] / ours_t["avg_ms"], onnxruntime_model=bare_name,
                      onnxruntime_process="separate", turns=turns, turn_runs=block,
                      paired_ratio_to_onnxruntime=float(np.median(paired)))
    if a.plot:
        plot_latencies(Path(a.plot), times, a)
    result["plot"] = str(Path(a.plot).resolve()) if a.plot else None
    return result, True


def show_benchmark(r: dict) -> list:
    lines = [header(r, f"benchmark (runs={r['runs']}, warmup={r['warmup']}, batch={r['batch']})"),
             f"  avg = {r['avg_ms']:.4f} ms | p50 = {r['p50_ms']:.4f} ms | p95 = {r['p95_ms']:.4f} ms | "
             f"p99 = {r['p99_ms']:.4f} ms | max = {r['max_ms']:.4f} ms",
             f"  throughput = {r['throughput_per_s']:,.0f} observations/s"]
    if r["onnxruntime_p50_ms"] is not None:
        lines += [f"  bare onnxruntime ({r['onnxruntime_model']}, default session, own process; {r['turns']} turns of up "
                  f"to {r['turn_runs']} calls each): p50 = {r['onnxruntime_p50_ms']:.4f} ms | "
                  f"throughput = {r['onnxruntime_throughput_per_s']:,.0f} observations/s",
                  f"  p50 ratio to onnxruntime = {r['ratio_to_onnxruntime']:.3f} (<= 1 is as fast or faster) | "
                  f"throughput ratio = {r['throughput_ratio_to_onnxruntime']:.3f} (>= 1 is as fast or faster)",
                  f"  median over turns of the p50 ratio within each turn = {r['paired_ratio_to_onnxruntime']:.3f} "
                  f"(steadier on a busy machine)"]
    else:
        lines.append("  onnxruntime not installed: no side-by-side figure")
    if r["plot"]:
        lines.append(f"  plot written: {r['plot']}")
    return lines


def plot_latencies(path: Path, times: dict, args) -> None:
    check_output_path(path, (".png",), "--plot")
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


STREAM_KEYS = {"obs", "id", "stochastic", "seed", "action_masks", "memory", "reset"}
STREAM_ID_CHARS = 256  # the longest text "id"


class AgentMemories(dict):
    """The stream's LSTM memory per agent id (its JSON text), least recently answered first, at
    most `max_ids` ids and `max_bytes` bytes (arrays and ids); the least recently answered id's
    memory makes room (that id starts again from zeros)."""

    def __init__(self, max_ids: int = 100_000, max_bytes: int = 256 << 20):
        super().__init__()
        self.max_ids, self.max_bytes, self.nbytes = max_ids, max_bytes, 0

    @staticmethod
    def cost(key: str, memory: np.ndarray) -> int:
        return len(key) + memory.nbytes + 256  # (+ the dict entry, string and array objects)

    def keep(self, key: str, memory: np.ndarray) -> None:
        if key in self:
            self.nbytes -= self.cost(key, self.pop(key))
        while self and (len(self) >= self.max_ids or self.nbytes + self.cost(key, memory) > self.max_bytes):
            oldest = next(iter(self))
            self.nbytes -= self.cost(oldest, self.pop(oldest))
        self[key] = memory
        self.nbytes += self.cost(key, memory)


def stream_answer(policy: Policy, msg, memories: AgentMemories) -> dict:
    """One stream line's answer (raises UsageError for a bad line, and for a line the engine
    fails on: out of memory, say)."""
    s = policy.settings
    if not isinstance(msg, dict):
        raise UsageError('expected an object like {"obs": [...]}')
    ident = msg.get("id")
    if isinstance(ident, str) and len(ident) > STREAM_ID_CHARS:
        raise UsageError(f'"id" is longer than {STREAM_ID_CHARS} characters')
    names = [i.name for i in s.inputs]
    if "obs" in msg:
        if len(names) != 1:
            raise UsageError(f'this policy has {len(names)} inputs: give {", ".join(repr(n) for n in names)}, not "obs"')
        values = [msg["obs"]]
    else:
        missing = [n for n in names if n not in msg]
        if missing:
            raise UsageError(f'"{missing[0]}" is missing' if len(names) > 1 else
                             f'"obs" must be a list of {s.inputs[0].shape[0] if s.inputs[0].kind == "vector" else "values"}')
        values = [msg[n] for n in names]
    unknown = sorted(k for k in msg if k not in STREAM_KEYS and k not in names)
    if unknown:
        raise UsageError(f'unknown key "{unknown[0][:40]}"')
    arrays = []
    for spec, value in zip(s.inputs, values):
        if not isinstance(value, list) or (spec.kind != "entities" and not value):
            raise UsageError(f'"{spec.name if len(names) > 1 else "obs"}" must be a list of numbers or a list of such lists')
        if not json_numbers_only(value):
            raise UsageError(f'"{spec.name if len(names) > 1 else "obs"}" must hold numbers only')
        arrays.append(stream_array(spec, value))
    stochastic = msg.get("stochastic", False)
    if not isinstance(stochastic, bool):
        raise UsageError('"stochastic" must be true or false')
    seed = msg.get("seed", 0)
    if not isinstance(seed, int) or isinstance(seed, bool) or not 0 <= seed < 2**63:
        raise UsageError('"seed" must be a non-negative integer')
    reset = msg.get("reset", False)
    if not isinstance(reset, bool):
        raise UsageError('"reset" must be true or false')
    masks = msg.get("action_masks")
    if masks is not None and not json_numbers_only(masks):
        raise UsageError('"action_masks" must hold numbers (0 or 1) only')
    memory = msg.get("memory")
    if memory is not None and not json_numbers_only(memory):
        raise UsageError('"memory" must hold numbers only')
    # one memory per agent id (a line without "id" keeps none: it starts from its "memory" or zeros)
    key = json.dumps(ident) if s.memory_size and ident is not None else None
    if key is not None and memory is None and not reset and key in memories:
        memory = memories[key]  # [agents, memory size]
        rows = len(arrays[0]) if arrays[0].ndim > len(s.inputs[0].shape) else 1
        if len(memory) != rows:
            raise UsageError(f'id {ident}: its memory is for {len(memory)} agent(s), this line has {rows}; '
                             f'send "reset": true to start it over')
    if not isinstance(ident, (str, int, type(None))) or isinstance(ident, bool) or \
            isinstance(ident, int) and abs(ident) > 2**53:
        raise UsageError('"id" must be a string, an integer or null')
    batched = isinstance(values[0], list) and len(values[0]) > 0 and isinstance(values[0][0], list) and \
        (s.inputs[0].kind != "entities" or (values[0][0] and isinstance(values[0][0][0], list)))
    observations = arrays if batched or len(arrays) > 1 else arrays[0]
    check_rows_fit(len(arrays[0]) if batched else 1, s, "per line")
    try:
        out = policy.act(observations, masks, deterministic=not stochastic, seed=seed, memory=memory)
    except UsageError:
        raise
    except Exception as exc:  # the engine's own failure (an allocation, say) ends this line, not the stream
        reason = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else type(exc).__name__
        if isinstance(exc, MemoryError) or "alloc" in str(exc).lower():
            reason = "out of memory; send fewer rows per line"
        raise UsageError(f"the {policy.engine_name} engine failed on this line ({reason})")
    for value in out.values():
        if not np.isfinite(np.asarray(value, np.float64)).all():
            raise UsageError("the observation drives the network beyond float32 (non-finite actions)")
    if key is not None:
        memories.keep(key, np.asarray(out["memory"]).reshape(-1, s.memory_size))
    answer = {"id": ident}
    for name, value in out.items():
        answer[name] = np.asarray(value).tolist()
    if continuous_only(s):
        answer["actions"] = answer["continuous_actions"]
    return answer


def echoed_id(msg):
    """The "id" a line's answer repeats, error answers too: a string of at most STREAM_ID_CHARS
    characters or an integer within +-2^53 (what every JSON reader keeps exact); else null."""
    ident = msg.get("id") if isinstance(msg, dict) else None
    if isinstance(ident, str) and len(ident) <= STREAM_ID_CHARS or \
            isinstance(ident, int) and not isinstance(ident, bool) and abs(ident) <= 2**53:
        return ident
    return None


def json_numbers_only(value, depth: int = 0) -> bool:
    """JSON numbers (no strings, booleans or null) in lists nested at most 4 deep."""
    if depth > 4:
        return False
    if type(value) is list:
        return all(json_numbers_only(v, depth + 1) for v in value)
    return type(value) is float or type(value) is int


def stream_array(spec: InputSpec, value: list) -> np.ndarray:
    """One input of a stream line as float32. A batch of entity buffers may be ragged (each
    agent sees its own number of entities): each is padded with absent (zero) rows."""
    if spec.kind == "entities" and value and all(type(v) is list and (not v or type(v[0]) is list) for v in value):
        most = max(len(v) for v in value)
        value = [v + [[0.0] * spec.shape[1]] * (most - len(v)) for v in value]
    try:
        with np.errstate(over="ignore"):
            array = np.asarray(value, dtype=np.float32)  # beyond float32 -> inf, refused below
    except (ValueError, TypeError, OverflowError):
        raise UsageError(f'"{spec.name}": rows of different lengths')
    if not np.isfinite(array).all():
        raise UsageError(f'"{spec.name}" holds nan, inf or values beyond float32')
    return array


def mode_stream(ctx: Context):
    """JSON lines on stdin -> JSON lines on stdout, one answer per line, flushed at once.
    In:  {"obs": [...] | [[...], ...]} for a one-input policy, or {"obs_0": ..., "obs_1": ...};
         optional "action_masks", "memory" (LSTM; else the id's last memory, zeros for a new id),
         "reset": true (episode end: start this id from zeros), "id", "stochastic", "seed".
    Out: {"id": ..., "continuous_actions": [...], "discrete_actions": [...], "memory": [...]}
         ("actions" too for a continuous-only policy) or {"id": ..., "error": "..."}."""
    policy = ctx.policy
    read, write, flush = sys.stdin.buffer.readline, sys.stdout.write, sys.stdout.flush
    dumps, loads = json.dumps, json.loads
    lines = errors = 0
    latencies: list = []
    memories = AgentMemories()
    clock = time.perf_counter
    limit = ctx.args.max_line_bytes
    with np.errstate(over="ignore"):  # an observation beyond float32 becomes inf, answered with an error
        while True:
            raw = read(limit + 1)
            if not raw:
                break
            too_long = len(raw) > limit and not raw.endswith(b"\n")
            if too_long:
                while True:  # skip the rest of the line, a block at a time
                    more = read(1 << 16)
                    if not more or more.endswith(b"\n"):
                        break
            elif not raw.strip():
                continue
            t0 = clock()
            lines += 1
            ident = None
            try:
                if too_long:
                    raise UsageError(f"line longer than {limit} bytes (--max-line-bytes)")
                try:
                    msg = loads(raw)
                except (ValueError, RecursionError):
                    raise UsageError("line is not JSON (or nested too deep)")
                ident = echoed_id(msg)
                answer = stream_answer(policy, msg, memories)
            except UsageError as exc:
                errors += 1
                answer = {"id": ident, "error": str(exc)}
            except MemoryError:  # reading the line itself: that line fails, the stream goes on
                errors += 1
                answer = {"id": ident, "error": "out of memory on this line; send fewer rows per line"}
            try:
                text = dumps(answer, allow_nan=False)
            except ValueError:  # a non-finite number slipped through: strict JSON or nothing
                errors += 1
                text = dumps({"id": ident, "error": "the answer holds non-finite numbers"})
            write(text + "\n")
            flush()
            if len(latencies) < 1_000_000:  # bounded: a day-long stream keeps the first million
                latencies.append((clock() - t0) * 1e3)
    if ctx.args.stream_stats:
        p = percentiles(latencies) if latencies else {"p50_ms": float("nan"), "p99_ms": float("nan")}
        print(f"[stream] lines={lines} errors={errors} p50={p['p50_ms']:.4f}ms p99={p['p99_ms']:.4f}ms "
              f"engine={ctx.engine_name} device={ctx.device}", file=sys.stderr)
    return None, True


MODES: dict = {  # mode -> (computes the result, renders its human lines from that result)
    "info": (mode_info, show_info),
    "checkpoints": (mode_checkpoints, show_checkpoints),
    "action": (mode_action, show_action),
    "sample": (mode_sample, show_sample),
    "batch": (mode_batch, show_batch),
    "precision": (mode_precision, show_precision),
    "onnx-compare": (mode_onnx_compare, show_onnx_compare),
    "export-onnx": (mode_export_onnx, show_export_onnx),
    "fingerprint": (mode_fingerprint, show_fingerprint),
    "stats": (mode_stats, show_stats),
    "benchmark": (mode_benchmark, show_benchmark),
    "stream": (mode_stream, None),        # (answers line by line)
}


# =========================================================================================
# Command line: every option declared once, with its help, default and the modes it applies to
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


def input_indices(text: str) -> tuple:
    """An argparse type: 'N' or 'N,M,...', input indices."""
    parse = whole_number(0)
    return tuple(parse(part.strip()) for part in text.split(","))


def positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number")
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"{text} must be a positive number")
    return value


OPTION_MODES: dict = {}     # dest -> the modes an option applies to (absent: every mode)
OPTION_DEFAULTS: dict = {}  # dest -> {mode: default} where the default depends on the mode


def option(group, *flags, modes: Optional[tuple] = None, per_mode: Optional[dict] = None, **kwargs) -> None:
    """Declare an option once: argparse's help and default, the modes it applies to, and
    defaults that differ by mode (per_mode, with "*" for the others)."""
    action = group.add_argument(*flags, **kwargs)
    if modes:
        OPTION_MODES[action.dest] = modes
    if per_mode:
        OPTION_DEFAULTS[action.dest] = per_mode


def build_parser() -> argparse.ArgumentParser:
    p = OneLineParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter,
                      epilog="Modes: " + ", ".join(MODES) + ". docs/modes.md shows an example of each.")
    p.add_argument("--mode", choices=list(MODES), default="info", help="what to do (default: info)")
    src = p.add_argument_group("model (first that applies: --checkpoint, --model-dir, $HUGGY_MODEL_DIR, "
                               "--model on the Hub, bundled sample)")
    option(src, "--checkpoint", help="an ML-Agents checkpoint file, e.g. Huggy/Huggy-2000049.pt")
    option(src, "--model-dir", help="a Hugging Face ML-Agents folder (<Behavior>.onnx, <Behavior>/*.pt, run_logs/)")
    option(src, "--model", metavar="REPO_ID", default=None,
           help=f"Hub repo id (default {DEFAULT_REPO}; offline or unreachable -> bundled sample)")
    option(src, "--expect-sha256", metavar="HEX", help="refuse a checkpoint whose sha256 differs (pin a file)")
    option(src, "--onnx", help="the policy's ML-Agents ONNX: the reference of onnx-compare/export-onnx/benchmark and "
                               "the source of input shapes the checkpoint does not hold (default: the checkpoint's own); "
                               "with no --checkpoint/--model-dir/--model, the policy itself (ONNX alone)")
    option(src, "--goal-input", type=input_indices, default=None, metavar="N[,N...]",
           help="goal-conditioned policies: which inputs (obs_N) are the goal signal, when the shapes do not tell")
    run = p.add_argument_group("device and precision")
    option(run, "--device", default="auto", help="auto (npu, else cuda, else cpu) | cpu | cuda[:N] | npu[:N]")
    option(run, "--dtype", choices=DTYPES, default="float32",
           help="the network's precision; normalizers stay float32 (default float32, recommended)")
    option(run, "--engine", choices=("auto", "torch", "onnxruntime"), default="auto",
           help="auto: onnxruntime on CPU float32, torch elsewhere")
    option(run, "--graphs", choices=("on", "off"), default="on",
           help="torch engine on CUDA/NPU: capture each batch size as a device graph (default on)")
    obs = p.add_argument_group("inputs")
    option(obs, "--obs", default="random", modes=("action", "sample"),
           help="random | zeros | ones | ones_neg | boundary | <number> | <comma-separated numbers>, for every input; "
                "per input: 'obs_0=VALUE;obs_1=VALUE' (VALUE may be a .npy, or a .png/.jpg for an image)")
    option(obs, "--mask", metavar="0,1,...", modes=("action", "sample", "batch"),
           help="action mask, 1 = allowed, branches side by side (default: all allowed; batch: random masks)")
    option(obs, "--memory", metavar="NUMBERS", modes=("action", "sample"),
           help="LSTM policies: the memory [h, c] to start from (comma-separated, or zeros; default zeros)")
    option(obs, "--seed", type=seed_int, default=0,
           help="RandomState(seed) for observations, torch.Generator(seed) for sampling noise (default 0)")
    option(obs, "--batch", type=positive_int, default=None, modes=("batch", "onnx-compare", "benchmark"),
           per_mode={"onnx-compare": 64, "benchmark": 1, "*": 32},
           help="rows per call (batch: 32, onnx-compare: 64, benchmark: 1)")
    option(obs, "--obs-file", modes=("batch",),
           help="batch: .npy (memory-mapped) or .csv of [rows, obs_dim], or .npz with obs_0 ... obs_k "
                "(+ action_masks, memory)")
    option(obs, "--chunk", type=whole_number(1, 1 << 24), default=16384, modes=("batch",),
           help="rows per call with --obs-file (default 16384)")
    option(obs, "--output", modes=("batch", "export-onnx"),
           help="batch: .npy (continuous actions) or .npz (continuous_actions, discrete_actions, memory); "
                "export-onnx: .onnx (default assets/huggy_rebuilt.onnx)")
    option(obs, "--progress", action="store_true", modes=("batch",),
           help="show the --obs-file progress bar even when stderr is not a terminal")
    chk = p.add_argument_group("checks and measurements")
    option(chk, "--samples", type=positive_int, default=100, modes=("precision",),
           help="precision: observations compared (default 100)")
    option(chk, "--tol", type=positive_float, default=None, modes=("precision", "onnx-compare"),
           per_mode={"precision": 0.01, "*": 1e-4},
           help="precision: max abs error allowed (default 0.01); onnx-compare: max abs error of the continuous "
                "actions and max relative error of the memory allowed (default 1e-4)")
    option(chk, "--steps", type=positive_int, default=None, modes=("fingerprint", "stats", "onnx-compare"),
           per_mode={"stats": 50, "*": 64}, help="fingerprint (64) / stats (50) / onnx-compare memory rollout (64): steps")
    option(chk, "--rollouts", type=positive_int, default=5, modes=("stats",), help="stats: closed-loop rollouts (default 5)")
    option(chk, "--deterministic", action="store_true", modes=("fingerprint", "stats"),
           help="fingerprint/stats: deterministic actions, no noise")
    option(chk, "--runs", type=positive_int, default=200, modes=("benchmark",), help="benchmark: timed calls (default 200)")
    option(chk, "--plot", metavar="FILE.png", modes=("benchmark",),
           help="benchmark: draw the latency distribution (needs matplotlib)")
    option(chk, "--stream-stats", "--stats", action="store_true", modes=("stream",),
           help="stream: print line count, errors and latency to stderr at the end (--stats: its former name)")
    option(chk, "--max-line-bytes", type=whole_number(64, 1 << 31), default=16 << 20, modes=("stream",),
           help="stream: a longer line is answered with an error and skipped (default 16 MiB)")
    p.add_argument("--json", action="store_true", help="print exactly one JSON object on stdout instead of text")
    return p


def glue_option_values(argv: list, options=("--obs", "--memory")) -> list:
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


def parse_args(argv: list) -> argparse.Namespace:
    parser = build_parser()
    args = parser.parse_args(glue_option_values(argv))
    for dest, defaults in OPTION_DEFAULTS.items():
        if getattr(args, dest) is None:
            setattr(args, dest, defaults.get(args.mode, defaults["*"]))
    for dest, modes in OPTION_MODES.items():
        if args.mode not in modes and getattr(args, dest) not in (None, False, parser.get_default(dest)) \
                and dest not in OPTION_DEFAULTS:
            raise UsageError(f"--{dest.replace('_', '-')} applies to --mode {' / '.join(modes)}, not {args.mode}")
    if args.expect_sha256 is not None and not SHA256_HEX.fullmatch(args.expect_sha256.strip()):
        raise UsageError("--expect-sha256: expected 64 hexadecimal digits")
    if args.mode == "stream" and args.json:
        raise UsageError("--json does not apply to stream mode (every line is JSON already)")
    for name in ("checkpoint", "model_dir", "model", "onnx", "obs_file", "output", "plot"):
        if getattr(args, name) is not None and not str(getattr(args, name)).strip():
            raise UsageError(f"--{name.replace('_', '-')}: empty value")
    return args


def main(argv: Optional[list[str]] = None) -> int:
    """Exit codes: 0 success, 1 a check did not hold, 2 bad input, usage or environment (one
    line on stderr, never a traceback), 128 + N for signal N (SIGINT 130, SIGHUP 129, SIGTERM
    143) after cleanup. The result line (SUCCESS or JSON) is flushed inside, so a full or
    closed stdout is an error, not a silent success."""
    argv = sys.argv[1:] if argv is None else argv
    previous = install_signal_handlers()
    args = None
    quiet = warnings.catch_warnings()  # torch's and numpy's warnings would print beside the one line that tells
    quiet.__enter__()
    warnings.simplefilter("ignore")

    def tell(text: str) -> None:  # one line on stderr, whatever state stderr is in
        with contextlib.suppress(Exception):
            print(str(text).replace("\r", "\\r").replace("\n", "\\n"), file=sys.stderr, flush=True)

    def stdout_broken(exc: OSError) -> bool:
        """Whether `exc` came from writing stdout: a pipe without reader, or a path-less
        full-disk/I-O error (file errors carry their path; atomic_write turns its own into
        UsageError); a failing flush confirms. Then stdout's fd is pointed at /dev/null so that
        the interpreter's final flush does not fail (and print) again."""
        import errno
        broken = (sys.stdout is None or getattr(sys.stdout, "closed", False) or isinstance(exc, BrokenPipeError)
                  or exc.filename is None and exc.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EIO,
                                                             errno.EBADF, errno.ECONNRESET))
        if not broken:
            try:
                sys.stdout.flush()
            except (OSError, ValueError):
                broken = True
        if broken and sys.stdout is not None and sys.stdout is sys.__stdout__:
            with contextlib.suppress(OSError, ValueError):
                os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return broken

    try:
        if sys.stdout is None:  # started with stdout closed (>&-): results would go nowhere
            raise UsageError("standard output is closed; redirect it to a file or /dev/null")
        args = parse_args(argv)
        if torch is None and args.mode != "checkpoints":  # (listing files needs no torch)
            raise ModuleNotFoundError("No module named 'torch'", name="torch")
        ctx = Context(args)
        compute, show = MODES[args.mode]
        result, passed = compute(ctx)
        if result is not None:  # (stream mode answers line by line)
            if args.json:  # the same result, as one JSON object
                print(json.dumps({"mode": args.mode, "passed": passed, **result}))
            else:
                for line in show(result) if show else ():
                    print(line)
                print("SUCCESS" if passed else "FAILED: the check above did not hold")
        sys.stdout.flush()
        return 0 if result is None or passed else 1
    except UsageError as exc:
        tell(f"error: {exc}")
        return 2
    except CheckFailed as exc:  # e.g. NotThisPolicy: --onnx belongs to another policy
        if args is not None and args.json and args.mode != "stream":  # --json still gets its one object
            with contextlib.suppress(OSError, ValueError):
                print(json.dumps({"mode": args.mode, "passed": False,
                                  ("not_this_policy" if isinstance(exc, NotThisPolicy) else "failed"): str(exc)}),
                      flush=True)
        tell(f"FAILED: {exc}")
        return 1
    except ModuleNotFoundError as exc:  # e.g. torch on a fresh machine
        tell(f"error: the Python package '{exc.name}' is not installed; run: pip install -r requirements.txt")
        return 2
    except KeyboardInterrupt as exc:  # Ctrl-C, or SIGTERM/SIGHUP through Interrupted
        import signal
        signum = int(getattr(exc, "signum", signal.SIGINT))
        try:
            name = signal.Signals(signum).name
        except ValueError:
            name = f"signal {signum}"
        tell("interrupted" if signum == signal.SIGINT else f"interrupted by {name}; stopped cleanly")
        return 128 + signum
    except OSError as exc:
        if stdout_broken(exc):
            if isinstance(exc, BrokenPipeError) and args is not None and args.mode == "stream":
                return 0  # the controller went away: stream mode's normal end
            tell(f"error: cannot write to standard output ({exc.strerror or exc}); the result was not delivered")
        else:
            tell(f"error: {describe_os_error(exc)}")
        return 2
    except MemoryError:
        tell("error: out of memory; use a smaller --batch or --chunk, or a machine with more memory")
        return 2
    except RecursionError:
        tell("error: the input is nested too deeply")
        return 2
    finally:
        quiet.__exit__(None, None, None)
        restore_signal_handlers(previous)


if __name__ == "__main__":
    sys.exit(main())
