"""The model repository: the behaviours of the run folders served, each a model whose versions are its checkpoints'
steps; every version verified before it may answer (a strict load, onnx-compare against the ML-Agents ONNX written
beside it, a probe batch); a follower that picks up the checkpoints mlagents-learn finishes; versions kept, pinned,
rolled back and unloaded; `lookup`, which answers which version serves, atomically with respect to every swap.
No transport here: a front calls `lookup` and hands the repository's changes (`on_change`) to its batchers."""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import time
from pathlib import Path
from typing import Callable, Iterable, NamedTuple, Optional

import numpy as np

from ..api.policy import Policy, load_checkpoint
from ..core.errors import CheckFailed, UsageError
from ..core.files import short_path
from ..core.observations import random_inputs, random_masks
from ..core.report import parity, parity_holds
from ..loaders.onnx_file import MLAgentsOnnx
from ..loaders.run_folder import CheckpointWatch, Finished, check_model_name, confine, discover, is_run_folder

__all__ = [
    "Version",
    "ModelState",
    "ModelNotFound",
    "ONNX_TOL",
    "LISTING_LOOK_S",
    "parse_pin",
    "probe_problem",
    "verify",
    "Repository",
]

ONNX_TOL = 1e-4  # onnx-compare's own gate (fronts.cli --tol): continuous actions' max abs error, memory's relative
LISTING_LOOK_S = 0.2  # between two scans, how often the follower looks at each run's training_status.json (one stat)


class Version(NamedTuple):
    """One verified version of a model: what answers a request that names it (or the model, while it serves)."""

    model: str
    step: int
    policy: Policy
    path: Path
    checks: dict  # what verification measured: onnx-compare's figures (or why it was not run), the probe's rows


class ModelState(NamedTuple):
    run: Path
    loaded: tuple  # Versions, by step
    serving: Optional[Version]  # what a request that names no version gets; None: not ready
    pinned: Optional[int]  # the step held while newer ones arrive (--pin, a rollback)
    withdrawn: frozenset  # steps rolled back from or unloaded: never loaded again by the follower


class ModelNotFound(UsageError):
    """An unknown model, or a version that is not loaded (V2: 404 / NOT_FOUND)."""


def parse_pin(text: str) -> tuple:
    """--pin MODEL:VERSION as (model, step)."""
    name, sep, step = str(text).rpartition(":")
    if not sep or not step.isdigit() or len(step) > 18:
        raise UsageError(f"--pin {short_path(text)}: expected MODEL:VERSION, the version a checkpoint's step")
    return check_model_name(name), int(step)


def probe_problem(settings, out: dict, masks: Optional[np.ndarray]) -> Optional[str]:
    """Why a probe batch's deterministic answers cannot be served, or None: a value not finite, a continuous action
    outside [-1, 1] (ML-Agents clips or squashes them there), a discrete action outside its branch or masked."""
    for key, value in out.items():
        if not np.isfinite(np.asarray(value, np.float64)).all():
            return f"the probe batch's {key} hold NaN or infinite values"
    if settings.continuous_size and np.abs(out["continuous_actions"]).max(initial=0.0) > 1.0 + 1e-6:
        return "the probe batch's continuous actions leave [-1, 1]"
    if settings.discrete_branches:
        actions, offset = np.asarray(out["discrete_actions"]), 0
        for b, size in enumerate(settings.discrete_branches):
            column = actions[:, b].astype(np.int64)
            if (column < 0).any() or (column >= size).any():
                return f"the probe batch's discrete actions leave branch {b} (0..{size - 1})"
            if masks is not None and not masks[np.arange(len(column)), offset + column].all():
                return f"the probe batch's discrete actions take a masked action in branch {b}"
            offset += size
    return None


def verify(found: Finished, tol: float = ONNX_TOL, rows: int = 32, seed: int = 0, policy_options=None) -> Version:
    """Load a finished checkpoint (weights_only, one strict load_state_dict), compare it with the ML-Agents ONNX written
    beside it where there is one (onnx-compare's parity and gate), run a probe batch: the Version, or UsageError /
    CheckFailed with the reason (one line)."""
    checkpoint = load_checkpoint(found.path, found.onnx, found.run, found.behavior)
    policy = Policy(checkpoint, **(policy_options or {}))
    s = policy.settings
    obs, masks = random_inputs(s, seed, rows), random_masks(s, seed, rows)
    memory = None
    if s.memory_size:  # a state as a running LSTM has it (as onnx-compare draws it)
        rng, half = np.random.RandomState(seed + 1), s.memory_size // 2
        memory = np.concatenate([np.tanh(rng.randn(rows, half)), 2 * rng.randn(rows, half)], axis=1).astype(np.float32)
    flat, _, _ = policy.prepare(obs, masks, memory)
    ours = policy.run(flat, rows)
    checks: dict = {"probe_rows": rows}
    if found.onnx is None:
        checks["onnx_compare"] = "no ML-Agents ONNX beside it"
    elif checkpoint.actor is None:
        checks["onnx_compare"] = "the ML-Agents ONNX itself runs (no torch)"
    else:
        stats = parity(s, ours, MLAgentsOnnx(found.onnx, s).deterministic(flat))
        checks["onnx_compare"] = stats
        if not parity_holds(stats, tol):
            worst = ", ".join(f"{k} {v:.3g}" for k, v in stats.items() if k != "mean_abs_err")
            raise CheckFailed(f"differs from {found.onnx.name} ({worst}; gate {tol:g})")
    problem = probe_problem(s, ours, flat[len(s.inputs)] if s.discrete_branches else None)
    if problem:
        raise CheckFailed(problem)
    return Version(found.behavior, found.step, policy, found.path, checks)


def _reason(exc: BaseException, path: Path) -> str:
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    for prefix in (str(path) + ": ", short_path(path) + ": "):  # (the loaders' messages start with the file)
        text = text[len(prefix) :] if text.startswith(prefix) else text
    return text[:300]


def _print_line(line: str) -> None:
    with contextlib.suppress(Exception):  # a closed stderr must not stop the follower
        print(line, file=sys.stderr, flush=True)


class Repository:
    """The models under `roots` (run folders, folders of run folders), each behaviour by its name.

    `versions`: the newest N verified versions kept loaded per model (a pinned one besides). `pins`: MODEL:VERSION
    held while newer ones arrive. `on_change(model, version)`: called, in order, after each change of what serves a
    model (a newer verified version, a pin, a rollback, an unload: None); `on_loaded(model, version)` likewise after a
    change of its loaded versions alone (serve answers each of them). `log(line)`: one line per refused file (and
    per change of it). `settle_s`: how long a checkpoint that training_status.json does not list must hold its size
    still. `poll_s`: the follower's interval. `policy_options`: Policy's arguments (device, engine, ...)."""

    def __init__(
        self,
        roots: Iterable,
        versions: int = 1,
        pins: Iterable[str] = (),
        on_change: Optional[Callable] = None,
        log: Callable[[str], None] = _print_line,
        settle_s: float = 10.0,
        poll_s: float = 2.0,
        tol: float = ONNX_TOL,
        policy_options: Optional[dict] = None,
        clock: Callable[[], float] = time.monotonic,
        busy_s: float = 30.0,
    ):
        if type(versions) is not int or versions < 1:
            raise UsageError(f"--versions {versions!r}: expected a whole number >= 1")
        self.roots = [Path(r) for r in roots]
        if not self.roots:
            raise UsageError("--model-dir: give at least one folder")
        self.versions, self.on_change, self.log, self.tol = versions, on_change, log, tol
        self.on_loaded: Optional[Callable] = None
        self.poll_s, self.busy_s, self.policy_options = poll_s, busy_s, dict(policy_options or {})
        self.watch = CheckpointWatch(settle_s, clock)
        self._pins = dict(parse_pin(p) for p in pins)
        self._table: dict = {}  # name -> ModelState; replaced whole under _mutate, read without a lock
        self._mutate = threading.RLock()  # every change of the table, and its on_change, one at a time
        self._loading = threading.Lock()  # one scan or explicit load at a time (the slow part: verification)
        self._refused: dict = {}  # (path, size, mtime) of a checkpoint and its ONNX -> why
        self._told: set = set()  # other lines already logged
        self._unloaded: set = set()  # models unloaded by request: not followed until loaded again
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None
        models = discover(self.roots)  # (a bad folder, or one behaviour in two runs: refused before anything starts)
        for name, step in self._pins.items():
            if name not in models:
                raise UsageError(f"--pin {name}:{step}: no behaviour {name} under the served folders")

    # -- which version answers
    def lookup(self, model: Optional[str] = None, version: Optional[int] = None) -> Version:
        """The version that answers a request naming `model` (may be left out when one model is served) and `version`
        (None: the one serving). One read of the table: a swap after it changes nothing for this caller, who keeps
        the policy object it got."""
        table = self._table
        if model is not None and not isinstance(model, str):
            raise ModelNotFound(f"model {str(model)[:80]}: expected a model's name (text)")
        if version is not None and type(version) is not int:
            raise ModelNotFound(f"version {str(version)[:80]}: expected a checkpoint's step (a whole number)")
        if model is None:
            if len(table) != 1:
                names = ", ".join(table) or "none loaded"
                raise ModelNotFound(f"name the model: {len(table)} are served ({names[:200]})")
            model = next(iter(table))
        state = table.get(model)
        if state is None:
            raise ModelNotFound(f"model {short_path(str(model))[:120]}: not served (served: {', '.join(table)[:200]})")
        if version is None:
            if state.serving is None:
                raise ModelNotFound(f"model {model}: no verified version loaded yet")
            return state.serving
        for loaded in state.loaded:
            if loaded.step == version:
                return loaded
        steps = ", ".join(str(v.step) for v in state.loaded) or "none"
        raise ModelNotFound(f"model {model}: version {version} is not loaded (loaded: {steps})")

    def models(self) -> list:
        """The repository index: each model's run folder, loaded versions, serving version, pin and readiness."""
        return [
            {
                "name": name,
                "run": str(state.run),
                "versions": [v.step for v in state.loaded],
                "serving": state.serving.step if state.serving else None,
                "pinned": state.pinned,
                "ready": state.serving is not None,
            }
            for name, state in sorted(self._table.items())
        ]

    def first_scan(self, shown: str) -> None:
        """The scan made before anything is served (serve, serve --ray): every model's versions loaded and verified;
        UsageError in one line where none verifies (`shown`: the folders as given) or where a --pin's version did not
        load (check_pins). The scan's own lines are said after those checks: a refused pin is one line alone."""
        said, held = self.log, []
        self.log = held.append
        try:
            self.poll()
        finally:
            self.log = said
        if any(entry["versions"] for entry in self.models()):
            self.check_pins()
        for line in held:
            said(line)
        if not any(entry["versions"] for entry in self.models()):
            raise UsageError(f"--model-dir {shown[:300]}: no checkpoint there passed verification")

    def check_pins(self) -> None:
        """After the first scan: each pin's version loaded, or UsageError in one line naming the pin and why (no
        finished checkpoint of that step, or the reason its verification gave). A pin is not a wish for a version
        not written yet: left unheld, the newest would serve without a word."""
        for name, step in sorted(self._pins.items()):
            state = self._table.get(name)
            if state is None or any(v.step == step for v in state.loaded):
                continue
            finished = self.watch.finished(state.run, name)
            found = next((f for f in finished if f.step == step), None)
            if found is None:
                steps = ", ".join(str(f.step) for f in finished)[:200] or "none"
                raise UsageError(f"--pin {name}:{step}: no finished checkpoint of step {step} (finished: {steps})")
            why = self._refusal(found) or "not loaded"
            raise UsageError(f"--pin {name}:{step}: version {step} did not pass verification ({why})")

    # -- following
    def poll(self) -> None:
        """One scan: every model's finished checkpoints, the wanted ones loaded and verified, swapped in."""
        if not self._loading.acquire(timeout=self.busy_s):
            return
        try:
            try:
                models = discover(self.roots)
            except UsageError as exc:
                return self._tell(str(exc))
            for name, run in models.items():
                if name not in self._unloaded:
                    self._follow(name, run)
        finally:
            self._loading.release()

    def _follow(self, name: str, run: Path) -> None:
        with self._mutate:
            if name in self._unloaded:  # (unloaded by a request since the scan began)
                return
            state = self._table.get(name) or ModelState(run, (), None, self._pins.get(name), frozenset())
            if name not in self._table:
                self._set(name, state)
        finished = [f for f in self.watch.finished(run, name) if f.step not in state.withdrawn]
        loaded = {v.step for v in state.loaded}
        for _ in range(len(finished) + 1):  # (a refusal makes room for the next newest: each turn settles a file)
            untried = [f for f in finished if self._refusal(f) is None]  # (a file refused as it is now: said once)
            newest = sorted(untried, key=lambda f: f.step)[-self.versions :]
            wanted = newest + [f for f in untried if f.step == state.pinned and f not in newest]
            # the pinned one first, then the newest: one swap, not one per version
            todo = [f for f in sorted(wanted, key=lambda f: (f.step != state.pinned, -f.step)) if f.step not in loaded]
            if not todo:
                return
            for found in todo:
                version = self._verified(found)
                if version is not None:
                    self._add(name, version)
                    loaded.add(found.step)

    def _stamp(self, found: Finished) -> tuple:
        def one(path):
            try:
                st = path.stat()
                return (str(path), st.st_size, st.st_mtime_ns)
            except OSError:
                return (str(path), None, None)

        return one(found.path) + (one(found.onnx) if found.onnx else ())

    def _refusal(self, found: Finished) -> Optional[str]:
        return self._refused.get(self._stamp(found))

    def _verified(self, found: Finished) -> Optional[Version]:
        """The verified version, or None after one log line naming the file and why (once per file state)."""
        stamp = self._stamp(found)
        if stamp in self._refused:
            return None
        try:
            return verify(found, self.tol, policy_options=self.policy_options)
        except Exception as exc:  # (UsageError, CheckFailed, NotThisPolicy, and whatever a damaged file raises)
            reason = _reason(exc, found.path)
            if len(self._refused) >= 10_000:
                self._refused.clear()
            self._refused[stamp] = reason
            serving = self._table.get(found.behavior)
            keeps = (
                f"version {serving.serving.step} keeps answering"
                if serving and serving.serving
                else "no version answers yet"
            )
            self.log(f"[repository] {short_path(found.path)}: not served ({reason}); {keeps}")
            return None

    def _tell(self, line: str) -> None:
        if line not in self._told:
            if len(self._told) < 10_000:
                self._told.add(line)
            self.log(f"[repository] {line}")

    # -- changes (all under _mutate; the table replaced whole, so that lookup needs no lock)
    def _set(self, name: str, state: Optional[ModelState]) -> None:
        before = self._table.get(name)
        table = dict(self._table)
        if state is None:
            table.pop(name, None)
        else:
            table[name] = state
        self._table = table
        was, now = before.serving if before else None, state.serving if state else None
        if (
            was is now
            and self.on_loaded is not None
            and (before.loaded if before else ()) != (state.loaded if state else ())
        ):
            self._hook(self.on_loaded, name, now)
        if was is not now and self.on_change is not None:
            try:
                self.on_change(name, now)
            except Exception as exc:  # the data plane's business; the repository goes on
                self._tell(f"on_change({name}): {_reason(exc, Path())}")

    def _hook(self, hook: Callable, name: str, version) -> None:
        try:
            hook(name, version)
        except Exception as exc:  # the data plane's business; the repository goes on
            self._tell(f"on_loaded({name}): {_reason(exc, Path())}")

    def _settled_state(self, state: ModelState) -> ModelState:
        """Keep the newest `versions` (the pinned one besides), and serve the pinned one, else the newest."""
        by_step = sorted(state.loaded, key=lambda v: v.step)
        kept = by_step[-self.versions :] + [v for v in by_step[: -self.versions] if v.step == state.pinned]
        kept.sort(key=lambda v: v.step)
        pinned = next((v for v in kept if v.step == state.pinned), None)
        return state._replace(loaded=tuple(kept), serving=pinned or (kept[-1] if kept else None))

    def _add(self, name: str, version: Version) -> None:
        with self._mutate:
            state = self._table.get(name)
            if state is None or version.step in state.withdrawn or any(v.step == version.step for v in state.loaded):
                return
            self._set(name, self._settled_state(state._replace(loaded=state.loaded + (version,))))

    def _state(self, model: str) -> ModelState:
        state = self._table.get(check_model_name(model))
        if state is None:
            raise ModelNotFound(f"model {model}: not served (served: {', '.join(self._table)[:200]})")
        return state

    def _find(self, state: ModelState, model: str, step: int) -> Version:
        """A loaded version, or that step's finished checkpoint loaded and verified now."""
        for version in state.loaded:
            if version.step == step:
                return version
        found = next((f for f in self.watch.finished(state.run, model) if f.step == step), None)
        if found is None:
            raise ModelNotFound(f"model {model}: no finished checkpoint of step {step}")
        self._refused.pop(self._stamp(found), None)  # (asked for by name: verified again, said again)
        version = self._verified(found)
        if version is None:
            raise CheckFailed(f"model {model}: version {step} did not pass verification ({self._refusal(found)})")
        return version

    def pin(self, model: str, step: int) -> Version:
        """Serve `step` (loaded, or loaded now from its finished checkpoint) while newer ones arrive."""
        with self._mutate:
            state = self._state(model)
            version = self._find(state, model, step)
            state = self._table[model]
            loaded = state.loaded if version in state.loaded else state.loaded + (version,)
            withdrawn = state.withdrawn - {step}
            self._set(model, self._settled_state(state._replace(loaded=loaded, pinned=step, withdrawn=withdrawn)))
            return self._table[model].serving

    def unpin(self, model: str) -> Optional[Version]:
        """Follow the newest verified version again."""
        with self._mutate:
            state = self._state(model)
            self._set(model, self._settled_state(state._replace(pinned=None)))
            return self._table[model].serving

    def rollback(self, model: str) -> Version:
        """Back to the previous verified version: the newest step below the serving one (loaded, or loaded and
        verified now from its checkpoint), pinned; the version rolled back from is withdrawn (unloaded, never loaded
        again by the follower). `unpin` follows newer checkpoints again."""
        with self._mutate:
            state = self._state(model)
            current = state.serving
            if current is None:
                raise ModelNotFound(f"model {model}: no version serves, nothing to roll back")
            steps = {v.step for v in state.loaded} | {f.step for f in self.watch.finished(state.run, model)}
            earlier = sorted(s for s in steps if s < current.step and s not in state.withdrawn)
            if not earlier:
                raise ModelNotFound(f"model {model}: no version before {current.step} to roll back to")
            previous = self._find(state, model, earlier[-1])
            state = self._table[model]
            loaded = tuple(v for v in state.loaded if v.step not in (current.step, previous.step)) + (previous,)
            withdrawn = state.withdrawn | {current.step}
            self._set(
                model, self._settled_state(state._replace(loaded=loaded, pinned=previous.step, withdrawn=withdrawn))
            )
            return previous

    def unload(self, model: str, step: Optional[int] = None) -> None:
        """Unload one version (withdrawn: not loaded again by the follower), or the whole model (not followed until
        `load`). A request already in an engine call finishes on the policy it holds."""
        with self._mutate:
            state = self._state(model)
            if step is None:
                self._unloaded.add(model)
                return self._set(model, None)
            if not any(v.step == step for v in state.loaded):
                raise ModelNotFound(f"model {model}: version {step} is not loaded")
            loaded = tuple(v for v in state.loaded if v.step != step)
            pinned = None if state.pinned == step else state.pinned
            self._set(
                model,
                self._settled_state(state._replace(loaded=loaded, pinned=pinned, withdrawn=state.withdrawn | {step})),
            )

    def load(self, what: str) -> list:
        """Load a model by its name, or by a path under the served folders (a behaviour folder, a run folder): the
        names loaded. Refused in one line: a path outside the served folders, an unknown name, another load still
        running after `busy_s` seconds."""
        if "/" in str(what) or "\\" in str(what):
            path = confine(self.roots, what, "load")
            models = discover(self.roots)
            names = [n for n, run in models.items() if path in (run.resolve(), (run / n).resolve())]
            if not names and is_run_folder(path):
                raise UsageError(f"load {short_path(what)}: its behaviours are served from another run folder")
        else:
            names, models = [check_model_name(what)], discover(self.roots)
        unknown = [n for n in names if n not in models]
        if not names or unknown:
            raise ModelNotFound(f"load {short_path(what)}: no behaviour of that name under the served folders")
        if not self._loading.acquire(timeout=self.busy_s):
            raise UsageError(f"load {short_path(what)}: another load is still running; try again")
        try:
            for name in names:
                with self._mutate:
                    self._unloaded.discard(name)
                    state = self._table.get(name)
                    if state is not None:
                        self._set(name, state._replace(withdrawn=frozenset()))
                self._follow(name, models[name])
        finally:
            self._loading.release()
        return names

    # -- the follower thread
    def start(self) -> "Repository":
        """The first scan here (a folder's existing checkpoints), then a daemon thread scanning every `poll_s`."""
        self.poll()
        return self.start_following()

    def start_following(self) -> "Repository":
        """The daemon thread alone (serve made the first scan before it opened its sockets)."""
        self._stop.clear()
        # (the listings the looks start from taken here, not in the thread: one written once this returns is a change)
        self._thread = threading.Thread(
            target=self._run, args=(self._listings(),), name="model-repository", daemon=True
        )
        self._thread.start()
        return self

    def _listings(self) -> tuple:
        """Each followed run folder's training_status.json as (run, size, mtime_ns): a new listing shows there."""
        stamps = []
        for run in sorted({str(state.run) for state in self._table.values()}):
            try:
                st = os.stat(Path(run) / "run_logs" / "training_status.json")
                stamps.append((run, st.st_size, st.st_mtime_ns))
            except OSError:
                stamps.append((run, None, None))
        return tuple(stamps)

    def _run(self, seen: tuple) -> None:
        """A scan every `poll_s`, and at once when a run's training_status.json changes (looked at every
        LISTING_LOOK_S): a checkpoint the trainer lists is picked up within LISTING_LOOK_S plus its verification,
        whatever `poll_s` (unlisted ones wait for the scan: they must settle anyway). The listings the looks compare
        against are the last look's before the scan: one written while a scan is under way is a change after it."""
        while True:
            due = time.monotonic() + self.poll_s
            while True:
                left = due - time.monotonic()
                if self._stop.wait(max(0.0, min(LISTING_LOOK_S, left))):
                    return
                looked = self._listings()
                if left <= LISTING_LOOK_S or looked != seen:
                    break
            seen = looked
            try:
                self.poll()
            except Exception as exc:  # one line, and the follower goes on
                self._tell(f"scan failed: {_reason(exc, Path())}")

    def stop(self, timeout: float = 30.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None

    def __enter__(self) -> "Repository":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
