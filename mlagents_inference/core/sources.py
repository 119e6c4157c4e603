"""Model sources: run folders, checkpoints, training_status.json, the Hub, the bundled sample, an ONNX alone, sha256."""

import contextlib
import functools
import hashlib
import json
import math
import os
import re
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from .errors import UsageError
from .files import short_path

__all__ = [
    "HERE",
    "SAMPLE",
    "BUNDLED_MODEL_DIR",
    "DEFAULT_REPO",
    "DEFAULT_EXPORT",
    "BUNDLED_NOTE",
    "ModelSource",
    "CKPT_NAME",
    "find_behavior",
    "step_of",
    "list_checkpoints",
    "default_checkpoint",
    "STATUS_MAX_BYTES",
    "training_status",
    "status_entry",
    "final_step",
    "pick_hub_files",
    "download_from_hub",
    "path_kind",
    "regular_file",
    "locate_model",
    "bundled_model_dir",
    "file_sha256",
    "check_sha256",
    "read_config",
    "onnx_alone_source",
    "mlagents_onnx_files",
    "find_checkpoint_onnx",
    "SHA256_HEX",
]

HERE = Path(__file__).resolve().parents[2]  # the clone (beside inference.py), site-packages, or the .pyz file


SAMPLE = "assets/ppo-Huggy-sample"  # the bundled sample: in the clone, and inside the .pyz (tools/build_pyz.py)


BUNDLED_MODEL_DIR = HERE / SAMPLE


DEFAULT_REPO = "PaulVialard/ppo-Huggy"


# export-onnx without --output: assets/ beside inference.py in a clone, as the original NPU adaptation
# writes it; elsewhere (the .pyz, an installed package) the current folder, never the installation itself
DEFAULT_EXPORT = (HERE / "assets" if BUNDLED_MODEL_DIR.is_dir() else Path()) / "huggy_rebuilt.onnx"


BUNDLED_NOTE = (
    "bundled sample: an ML-Agents-format checkpoint with Huggy's architecture, "
    "written by the ML-Agents trainer code, NOT the trained Huggy weights"
)


@dataclass
class ModelSource:
    checkpoint: Path  # the .pt file to load
    model_dir: Optional[Path]  # the ML-Agents run folder it belongs to, when known
    behavior: Optional[str]  # e.g. "Huggy"
    origin: str  # how it was found: --checkpoint, --model-dir, hub, ...
    note: Optional[str] = None  # a line the user must see (e.g. bundled sample)


CKPT_NAME = re.compile(r"^(?P<behavior>.+)-(?P<step>\d+)\.pt$")


def find_behavior(model_dir: Path) -> str:
    """The behaviour name from the folder's files: the sub-folder that holds .pt files."""
    try:
        names = sorted(d.name for d in model_dir.iterdir() if d.is_dir() and list_checkpoints(model_dir, d.name))
    except OSError as exc:
        raise UsageError(f"{model_dir}: cannot read the folder ({exc.strerror or exc})")
    if not names:
        raise UsageError(
            f"{model_dir}: no ML-Agents checkpoint found (expected <Behavior>/<Behavior>-<step>.pt "
            f"or <Behavior>/checkpoint.pt); pass --checkpoint FILE.pt"
        )
    if len(names) > 1:
        raise UsageError(f"{model_dir}: several behaviours ({', '.join(names)}); choose one with --checkpoint FILE.pt")
    return names[0]


def step_of(filename: str, behavior: str) -> Optional[int]:
    m = CKPT_NAME.match(filename)
    return int(m.group("step")) if m and m.group("behavior") == behavior else None


def list_checkpoints(model_dir: Path, behavior: str) -> list[tuple[Path, Optional[int]]]:
    """Every <Behavior>-<step>.pt sorted by step, then checkpoint.pt (step None) if present."""
    folder = model_dir / behavior
    stepped = sorted(
        ((p, step_of(p.name, behavior)) for p in folder.glob("*.pt") if step_of(p.name, behavior) is not None),
        key=lambda t: t[1],
    )
    if (folder / "checkpoint.pt").is_file():
        stepped.append((folder / "checkpoint.pt", None))
    return stepped


def default_checkpoint(model_dir: Path, behavior: str) -> Path:
    """The highest-step <Behavior>-<step>.pt, else checkpoint.pt (the original NPU adaptation loads
    Huggy-2000049.pt)."""
    ckpts = list_checkpoints(model_dir, behavior)
    if not ckpts:
        raise UsageError(f"{model_dir / behavior}: folder holds no checkpoint (.pt)")
    stepped = [p for p, s in ckpts if s is not None]
    return stepped[-1] if stepped else ckpts[0][0]


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
    steps, file_path, reward = entry.get("steps"), entry.get("file_path", ""), entry.get("reward")
    aux = entry.get("auxillary_file_paths")  # (sic: ML-Agents' spelling)
    aux = [] if aux is None else aux
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
    """run_logs/training_status.json for this behaviour, reduced to {"checkpoints": [record], "final_checkpoint":
    record} (records: steps, file_path, auxillary_file_paths, reward). The file is advisory: {} when absent; unreadable,
    huge, nested too deep or of another shape -> one "[warn] ... ignored" line on stderr and {}."""
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
    for entry in filter(None, map(_status_record, records if isinstance(records, list) else [])):
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
        return max((s for _, s in list_checkpoints(model_dir, behavior) if s is not None), default=None)
    return None


def pick_hub_files(files: list[str]) -> list[str]:
    """From a Hub repo's file list, what inference needs: top-level ONNX and config, run_logs,
    and per behaviour only the highest-step checkpoint and its ONNX (not all 200 of them)."""
    wanted = [f for f in files if "/" not in f and f.endswith((".onnx", ".json", ".yaml"))]
    wanted += [f for f in files if f.startswith("run_logs/") and f.endswith(".json")]
    by_behavior: dict[str, list[tuple[int, str]]] = {}
    for f in files:
        parts = f.split("/")
        if len(parts) == 2 and step_of(parts[1], parts[0]) is not None:
            by_behavior.setdefault(parts[0], []).append((step_of(parts[1], parts[0]), f))
    for ckpts in by_behavior.values():
        best = max(ckpts)[1]
        wanted += [best] + [f for f in files if f == best[:-3] + ".onnx"]
    wanted += [
        f for f in files if f.count("/") == 1 and f.endswith("/checkpoint.pt") and f.split("/")[0] not in by_behavior
    ]
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


def _hub_endpoint() -> tuple:
    """(scheme, host, port) of $HF_ENDPOINT (default https://huggingface.co), checked before
    huggingface_hub, which raises a ValueError from deep inside on a malformed one."""
    return _host_port("HF_ENDPOINT", os.environ.get("HF_ENDPOINT") or "https://huggingface.co")


def _hub_unreachable(timeout: float = 3.0) -> Optional[str]:
    """Why the Hub endpoint ($HF_ENDPOINT, default huggingface.co) cannot be reached, or None:
    a plain TCP connection, no HTTP, to the endpoint or to the proxy the environment puts in
    front of it (huggingface_hub would retry a dead one for ~25 s, a line on stderr each time)."""
    import socket
    import urllib.request

    scheme, host, port = _hub_endpoint()
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
    _hub_endpoint()
    try:
        from huggingface_hub import HfApi, snapshot_download
    except ImportError:
        raise UsageError("huggingface_hub is not installed (pip install huggingface_hub)")
    with contextlib.suppress(Exception):  # not cached, or cached without a checkpoint: try online below
        cached = Path(snapshot_download(repo_id, local_files_only=True))
        find_behavior(cached)
        return cached
    if os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on"):
        raise UsageError(f"{repo_id}: not in the Hugging Face cache and HF_HUB_OFFLINE is set")
    if unreachable := _hub_unreachable():  # huggingface_hub would retry for ~25 s before giving up
        raise UsageError(f"{repo_id}: not in the Hugging Face cache and {unreachable}")
    import logging

    hub_log = logging.getLogger("huggingface_hub")
    level = hub_log.level
    hub_log.setLevel(logging.ERROR)  # its "Retrying in 8s" lines (a proxy that answers, badly) would print beside ours
    try:
        return Path(snapshot_download(repo_id, allow_patterns=pick_hub_files(HfApi().list_repo_files(repo_id))))
    except Exception as exc:  # network, authentication, missing repo: all end the same way
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise UsageError(f"{repo_id}: could not download from the Hugging Face Hub ({reason[:200]})")
    finally:
        hub_log.setLevel(level)


def path_kind(option: str, path: Path) -> Optional[str]:
    """'file', 'dir', 'other' or None (absent); any other failure (name too long, permission
    denied on a folder above, a symlink loop) is a UsageError naming the option and the reason."""
    import stat

    try:
        mode = os.stat(path).st_mode
    except (FileNotFoundError, NotADirectoryError):
        return None
    except (OSError, ValueError) as exc:  # ValueError: an embedded NUL byte
        raise UsageError(f"{option} {short_path(path)}: {getattr(exc, 'strerror', None) or exc}")
    return "dir" if stat.S_ISDIR(mode) else "file" if stat.S_ISREG(mode) else "other"


def regular_file(option: str, path) -> Path:
    """`path` when it is a regular file; else a UsageError (never open a FIFO or a device: it may block)."""
    path = Path(path)
    kind = path_kind(option, path)
    if kind != "file":
        raise UsageError(
            f"{option} {short_path(path)}: "
            + ("no such file" if kind is None else "is a folder" if kind == "dir" else "not a regular file")
        )
    return path


def _checkpoint_source(checkpoint: str) -> ModelSource:
    """--checkpoint FILE, with the run folder around it where that folder lists it."""
    path = Path(checkpoint)
    if path_kind("--checkpoint", path) == "dir":
        raise UsageError(f"--checkpoint {path}: is a folder; use --model-dir for a folder")
    regular_file("--checkpoint", path)
    try:
        folder, behavior = path.resolve().parent.parent, path.resolve().parent.name
        if not list_checkpoints(folder, behavior):
            folder, behavior = None, None
    except OSError:  # the run folder around it cannot be listed: the file alone still loads
        folder, behavior = None, None
    return ModelSource(path, folder, behavior, "--checkpoint")


def _behavior_folder_source(origin: str, folder: Path) -> Optional[ModelSource]:
    """A behaviour folder given for the run folder (<run>/<Behavior>, its checkpoints in it): its newest checkpoint,
    the one the run folder picks (never an older ONNX beside it); None when the folder holds no .pt file."""
    try:
        checkpoints = sorted(p.name for p in folder.glob("*.pt"))
        named = folder if folder.name not in ("", "..") else folder.resolve()  # (".": the folder's own name)
        run, behavior = named.parent, named.name
        if checkpoints and list_checkpoints(run, behavior):
            return ModelSource(default_checkpoint(run, behavior), run, behavior, origin)
    except OSError as exc:
        raise UsageError(f"{origin} {short_path(folder)}: cannot read the folder ({exc.strerror or exc})")
    if not checkpoints:
        return None
    shown = ", ".join(checkpoints[:4]) + (", ..." if len(checkpoints) > 4 else "")
    raise UsageError(
        f"{origin} {short_path(folder)}: holds {shown}, none named {behavior}-<step>.pt or checkpoint.pt as "
        f"ML-Agents names a behaviour's checkpoints; choose one with --checkpoint FILE.pt"
    )


def _model_dir_source(origin: str, value: str) -> ModelSource:
    """A run folder given by --model-dir or $HUGGY_MODEL_DIR (`origin`)."""
    folder = Path(value)
    kind = path_kind(origin, folder)
    if kind == "file":
        takes = "--onnx takes an ONNX file" if folder.suffix.lower() == ".onnx" else "--checkpoint takes a checkpoint"
        raise UsageError(f"{origin} {short_path(folder)}: is a file, not a folder; {takes}")
    if kind != "dir":
        raise UsageError(f"{origin} {short_path(folder)}: no such folder")
    try:
        behavior = find_behavior(folder)
    except UsageError:  # a behaviour folder (<run>/<Behavior>), or one that holds only <Behavior>.onnx: the ONNX alone
        behavior_source = _behavior_folder_source(origin, folder)
        if behavior_source is not None:
            return behavior_source
        alone = sorted(folder.glob("*.onnx"))
        if len(alone) > 1 and not any(folder.glob("*/*.pt")):
            raise UsageError(
                f"{origin} {short_path(folder)}: no checkpoint, and several ONNX files "
                f"({', '.join(p.name for p in alone[:4])}); choose one with --onnx FILE.onnx"
            )
        if len(alone) != 1 or any(folder.glob("*/*.pt")):
            raise
        return onnx_alone_source(origin, alone[0], folder)
    return ModelSource(default_checkpoint(folder, behavior), folder, behavior, origin)


def locate_model(checkpoint: Optional[str], model_dir: Optional[str], repo_id: Optional[str]) -> ModelSource:
    """--checkpoint, then --model-dir, then $HUGGY_MODEL_DIR, then the Hub, then the bundled sample. An empty option
    value is refused (never a silent fall-back to the sample); an empty $HUGGY_MODEL_DIR counts as unset."""
    for option, value, what in (
        ("--checkpoint", checkpoint, "a checkpoint file"),
        ("--model-dir", model_dir, "a folder"),
        ("--model", repo_id, f"a Hub repo id such as {DEFAULT_REPO}"),
    ):
        if value is not None and not str(value).strip():
            raise UsageError(f"{option}: empty value; give {what}")
    if checkpoint:
        return _checkpoint_source(checkpoint)
    for origin, value in (("--model-dir", model_dir), ("HUGGY_MODEL_DIR", os.environ.get("HUGGY_MODEL_DIR"))):
        if value:
            return _model_dir_source(origin, value)
    try:
        folder = download_from_hub(repo_id or DEFAULT_REPO)
        behavior = find_behavior(folder)
        return ModelSource(default_checkpoint(folder, behavior), folder, behavior, f"hub:{repo_id or DEFAULT_REPO}")
    except UsageError as exc:
        if repo_id:  # the user asked for this repo: no silent substitute
            raise
        sample = bundled_model_dir()
        if sample is None:  # installed with pip
            raise UsageError(f"no model: {exc}; no bundled sample beside {short_path(HERE)}; pass --model-dir DIR")
        behavior = find_behavior(sample)
        return ModelSource(
            default_checkpoint(sample, behavior), sample, behavior, "bundled sample", f"{BUNDLED_NOTE} ({exc})"
        )


@functools.lru_cache(maxsize=None)  # (unpacked once a process)
def bundled_model_dir() -> Optional[Path]:
    """The bundled sample's folder: in the clone, or unpacked from the .pyz this runs from into a
    private temporary folder that is removed at exit (checkpoints and ONNX are read as files)."""
    if BUNDLED_MODEL_DIR.is_dir():
        return BUNDLED_MODEL_DIR
    if not HERE.is_file() or not zipfile.is_zipfile(HERE):
        return None
    import atexit
    import shutil

    with zipfile.ZipFile(HERE) as pyz:
        members = [m for m in pyz.namelist() if m.startswith(SAMPLE + "/") and not m.endswith("/")]
        if not members:
            return None
        folder = Path(tempfile.mkdtemp(prefix="mlagents-infer-sample-"))
        atexit.register(shutil.rmtree, folder, True)
        for member in members:
            target = folder / member[len(SAMPLE) + 1 :]
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(pyz.read(member))
    return folder


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


def read_config(model_dir: Optional[Path], behavior: Optional[str]) -> dict:
    """behaviors.<behavior> of configuration.yaml (or config.json) beside the checkpoint, {} when
    absent or unreadable (advisory: the checkpoint decides)."""
    if not model_dir or not behavior:
        return {}
    for name in ("configuration.yaml", "config.json"):
        path = model_dir / name
        with contextlib.suppress(Exception):  # advisory: unreadable, malformed (yaml's errors too), nested too deep
            if not path.is_file() or path.stat().st_size > 1 << 20:
                continue
            text = path.read_text()
            if name.endswith(".json"):
                data = json.loads(text)
            else:
                import yaml  # (not installed: skipped, as an unreadable file is)

                data = yaml.safe_load(text)
            entry = data.get("behaviors", {}).get(behavior) if isinstance(data, dict) else None
            if isinstance(entry, dict):
                return entry
    return {}


def onnx_alone_source(option: str, path: Path, folder: Optional[Path] = None) -> ModelSource:
    """A model given as its ML-Agents ONNX alone (--onnx with no checkpoint, a folder holding only <Behavior>.onnx)."""
    return ModelSource(regular_file(option, path), folder, path.stem, option)


def mlagents_onnx_files(path: Path, model_dir: Optional[Path], behavior: Optional[str], step: Optional[int]) -> list:
    """Where ML-Agents writes a checkpoint's ONNX, existing or not: <Behavior>-<step>.onnx beside
    it (when the step is known), then <Behavior>.onnx of its run folder."""
    name = behavior or path.parent.name
    step = step_of(path.name, name) or step
    return ([path.parent / f"{name}-{step}.onnx"] if step is not None else []) + [
        (model_dir or path.parent.parent) / f"{name}.onnx"
    ]


def find_checkpoint_onnx(
    path: Path, model_dir: Optional[Path], behavior: Optional[str], step: Optional[int]
) -> Optional[Path]:
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
        step = step_of(path.name, name) or step
        if step is None or final is None or step == final:
            return top
    return None


SHA256_HEX = re.compile(r"[0-9a-fA-F]{64}")
