"""ML-Agents run folders as a model repository (torch-free): the models a folder holds (each behaviour by its name),
which of their checkpoints are finished, and the confinement of a name or path to the folders served.

mlagents-learn writes results/<run-id>/ (ML-Agents 1.1.0, Apache-2.0: TorchModelSaver.save_checkpoint, learn.py):
<Behavior>/<Behavior>-<step>.pt, then <Behavior>/checkpoint.pt, then <Behavior>/<Behavior>-<step>.onnx, every
checkpoint_interval steps (keep_checkpoints of them kept: older files are deleted); <Behavior>.onnx when training
ends; run_logs/training_status.json when the run ends or is interrupted (never while it runs), listing each kept
checkpoint's .onnx (file_path) and .pt (auxillary_file_paths)."""

from __future__ import annotations

import glob
import os
import re
import time
from pathlib import Path
from typing import Callable, Iterable, NamedTuple, Optional

from ..core.errors import UsageError
from ..core.files import short_path
from ..core.sources import step_of, training_status

__all__ = [
    "NAME_MAX_BYTES",
    "PATH_MAX_BYTES",
    "Finished",
    "confine",
    "check_model_name",
    "is_run_folder",
    "run_folders",
    "behaviors_of",
    "discover",
    "several_models",
    "CheckpointWatch",
]

NAME_MAX_BYTES = 255  # a model name, or one part of a path (the file systems' own bound)
PATH_MAX_BYTES = 4096  # a whole path


class Finished(NamedTuple):
    """A checkpoint that mlagents-learn has finished writing: one version of a model."""

    behavior: str
    step: int
    path: Path  # <run>/<Behavior>/<Behavior>-<step>.pt
    onnx: Optional[Path]  # the ML-Agents ONNX written with it (<Behavior>-<step>.onnx, or <Behavior>.onnx when final)
    run: Path
    how: str  # "listed" (in training_status.json) or "settled" (its size held still)


def _under(path: Path, roots: Iterable[Path]) -> bool:
    return any(path == root or root in path.parents for root in roots)


def confine(roots: Iterable[Path], value, what: str = "path") -> Path:
    """`value` (a path relative to one of `roots`, or absolute) resolved, when it lies under one of them: no '..', no
    link that leaves them (every link is resolved before the check), bounded lengths. Else one UsageError line."""
    roots = [Path(r).resolve() for r in roots]
    if not isinstance(value, (str, os.PathLike)):
        raise UsageError(f"{what}: expected a name or a path, not {type(value).__name__}")
    text = os.fspath(value)
    if isinstance(text, bytes) or not text.strip():
        raise UsageError(f"{what}: expected a name or a path under the served folders")
    if "\0" in text or any(not c.isprintable() for c in text):
        raise UsageError(f"{what} {short_path(text)}: holds a control character")
    encoded = text.encode("utf-8", "surrogateescape")
    parts = re.split(r"[\\/]", text)
    if len(encoded) > PATH_MAX_BYTES or any(len(p.encode("utf-8", "surrogateescape")) > NAME_MAX_BYTES for p in parts):
        raise UsageError(
            f"{what} {short_path(text)}: longer than {PATH_MAX_BYTES} bytes, or a part of it longer than "
            f"{NAME_MAX_BYTES}"
        )
    if ".." in parts:
        raise UsageError(f"{what} {short_path(text)}: '..' is refused (only paths under the served folders load)")
    candidates = [Path(text)] if os.path.isabs(text) else [root / text for root in roots]
    for candidate in candidates:
        try:
            resolved = candidate.resolve(strict=True)
        except (OSError, RuntimeError):  # absent, a link loop, permission denied
            continue
        if _under(resolved, roots):
            return resolved
        raise UsageError(f"{what} {short_path(text)}: leads outside the served folders (through a link, or absolute)")
    raise UsageError(f"{what} {short_path(text)}: no such file or folder under the served folders")


def check_model_name(name) -> str:
    """A model's name as a request gives it: a behaviour name, one path part of bounded length."""
    if not isinstance(name, str) or not name or name in (".", ".."):
        raise UsageError(f"model name {str(name)[:80]!r}: expected a behaviour name")
    if len(name.encode("utf-8", "surrogateescape")) > NAME_MAX_BYTES or re.search(r"[\\/\0]", name):
        raise UsageError(f"model name {short_path(name)}: more than {NAME_MAX_BYTES} bytes, or holds / \\ or NUL")
    if not name.isprintable():
        raise UsageError(f"model name {short_path(name)}: holds a control character")
    return name


def behaviors_of(run: Path) -> list:
    """The behaviours of a run folder: each sub-folder <B> holding a <B>-<step>.pt or <B>/checkpoint.pt (run_logs
    and others are not behaviours), sorted by name."""
    names = []
    try:
        for folder in run.iterdir():
            if folder.name == "run_logs" or not folder.is_dir():
                continue
            if (folder / "checkpoint.pt").is_file() or any(
                step_of(p.name, folder.name) is not None for p in folder.glob("*.pt")
            ):
                names.append(folder.name)
    except OSError as exc:
        raise UsageError(f"{short_path(run)}: cannot read the folder ({exc.strerror or exc})")
    return sorted(names)


def is_run_folder(folder: Path) -> bool:
    """Whether `folder` is an ML-Agents run folder: it has run_logs/training_status.json or a behaviour folder."""
    return (folder / "run_logs" / "training_status.json").is_file() or bool(behaviors_of(folder))


def run_folders(roots: Iterable[Path]) -> list:
    """The run folders under the served folders: each root that is a run folder, else its sub-folders that are (a
    folder of run folders, results/); a link that leaves the roots is skipped."""
    roots = [Path(r) for r in roots]
    resolved = [r.resolve() for r in roots]
    runs = []
    for root in roots:
        if not root.is_dir():
            raise UsageError(f"--model-dir {short_path(root)}: no such folder")
        if is_run_folder(root):
            runs.append(root)
            continue
        try:
            subs = sorted(p for p in root.iterdir() if p.is_dir() and _under(p.resolve(), resolved))
        except OSError as exc:
            raise UsageError(f"--model-dir {short_path(root)}: cannot read the folder ({exc.strerror or exc})")
        runs += [p for p in subs if is_run_folder(p)]
    return runs


def discover(roots: Iterable[Path]) -> dict:
    """{behaviour name: its run folder} for every behaviour under the served folders, a behaviour's folder that
    leaves them (a link) skipped; one UsageError line when two run folders hold the same behaviour name (a model is
    named by its behaviour: serve one of them)."""
    resolved = [Path(r).resolve() for r in roots]
    found: dict = {}
    for run in run_folders(roots):
        for name in behaviors_of(run):
            if not _under((run / name).resolve(), resolved):
                continue
            if name in found and found[name] != run:
                raise UsageError(
                    f"behaviour {short_path(name)} is in two run folders ({short_path(found[name])} and "
                    f"{short_path(run)}); a model is named by its behaviour: serve one of them"
                )
            found[name] = run
    return dict(sorted(found.items()))


def several_models(folder) -> bool:
    """Whether one --model-dir holds more than one model: a run folder of several behaviours, or a folder of run
    folders (serve and serve --ray then answer through the model repository)."""
    try:
        runs = run_folders([Path(folder)])
        return len(discover([Path(folder)])) > 1 or (bool(runs) and runs != [Path(folder)])
    except UsageError:
        return False


class CheckpointWatch:
    """Which checkpoints of a behaviour are finished. A checkpoint training_status.json lists counts at once. One it
    does not list counts when its .pt and its .onnx (if any) have held their size and modification time for
    `settle_s` seconds on this watch's clock (or were last modified that long ago when first seen): a folder with no
    training_status.json (mlagents-learn writes it when the run ends), or a checkpoint written after it (a resumed
    run). A checkpoint older than the training_status.json that does not list it never counts (the trainer left it
    out). `clock`: monotonic seconds, `wall`: the time files are stamped with (tests pass their own)."""

    def __init__(
        self, settle_s: float = 10.0, clock: Callable[[], float] = time.monotonic, wall: Callable[[], float] = time.time
    ):
        if not settle_s >= 0:
            raise UsageError(f"settle time {settle_s!r}: expected seconds >= 0")
        self.settle_s, self.clock, self.wall = float(settle_s), clock, wall
        self._seen: dict = {}  # path -> ((size, mtime_ns), first seen on the clock)

    def _settled(self, path: Path, now: float) -> bool:
        try:
            st = os.stat(path)
        except OSError:
            self._seen.pop(path, None)
            return False
        stamp = (st.st_size, st.st_mtime_ns)
        seen = self._seen.get(path)
        if seen is None or seen[0] != stamp:
            age = max(0.0, self.wall() - st.st_mtime)  # (already old when first seen: a run that is not writing)
            self._seen[path] = seen = (stamp, now - min(age, self.settle_s))
        return now - seen[1] >= self.settle_s

    def finished(self, run: Path, behavior: str) -> list:
        """The finished checkpoints of `behavior` in `run`, by step (files deleted since are left out)."""
        now, folder = self.clock(), run / behavior
        status_file = run / "run_logs" / "training_status.json"
        status = training_status(run, behavior)
        listed, listed_after = {}, None
        if status:
            for entry in status.get("checkpoints") or []:
                for name in [entry["file_path"], *entry["auxillary_file_paths"]]:
                    step = step_of(Path(name).name, behavior)
                    if step is not None and Path(name).suffix == ".pt":
                        listed[step] = entry
            try:
                listed_after = os.stat(status_file).st_mtime_ns
            except OSError:
                listed_after = None
        final = (status.get("final_checkpoint") or {}).get("steps") if status else None
        out = []
        try:
            files = sorted(folder.glob(f"{glob.escape(behavior)}-*.pt"))
        except OSError:
            return []
        for path in files:
            step = step_of(path.name, behavior)
            if step is None:
                continue
            beside = path.with_suffix(".onnx")
            onnx = beside if beside.is_file() else None
            if onnx is None and final == step and (run / f"{behavior}.onnx").is_file():
                onnx = run / f"{behavior}.onnx"
            if step in listed:
                out.append(Finished(behavior, step, path, onnx, run, "listed"))
                continue
            try:
                written = os.stat(path).st_mtime_ns
            except OSError:
                continue
            if listed_after is not None and written <= listed_after:
                continue  # written before the trainer's list, which leaves it out
            if self._settled(path, now) and (onnx is None or self._settled(onnx, now)):
                out.append(Finished(behavior, step, path, onnx, run, "settled"))
        return sorted(out, key=lambda f: f.step)
