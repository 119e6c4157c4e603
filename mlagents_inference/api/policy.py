"""The policy: load once, act many times (the Python API; every mode goes through it).
load(), Policy (act, get_action, check_spec, reset, sampling, the float64 reference).
Without torch (runtime.torch_available) a policy runs as its ML-Agents ONNX file itself, on onnxruntime; with torch,
as ML-Agents' modules rebuilt from the checkpoint (the torch layer is imported then, not before)."""

from __future__ import annotations

import math
import os
import time
from pathlib import Path
from typing import TYPE_CHECKING, Optional

import numpy as np

from ..core.errors import NotThisPolicy, UsageError
from ..core.extras import TORCH_HINT, torch_available
from ..core.files import short_path
from ..core.observations import (
    MASK_KEY_BYTES,
    AgentMemories,
    branch_draw,
    mask_key,
    observation_arrays,
    shape_masks,
    shape_memory,
)
from ..core.onnx_graph import onnx_input_shapes, read_onnx_interface
from ..core.sources import (
    check_sha256,
    find_checkpoint_onnx,
    locate_model,
    path_kind,
    read_config,
    regular_file,
    step_of,
)
from ..core.spec import FLOAT32, GoalInput, action_tuple, clipped_action, no_actions, step_outputs
from ..engines.factory import make_engine, pick_device
from ..loaders.onnx_file import load_file_policy
from .contract import (
    PLAIN_TYPES,
    brief,
    check_act_arguments,
    check_agent_ids,
    check_behavior_spec,
    check_load_arguments,
    check_no_extras,
    check_policy_arguments,
    device_inputs,
    on_device,
    plain_arrays,
    speaking_python,
    steps_arguments,
)

if TYPE_CHECKING:  # (annotations only)
    from ..loaders.checkpoint import LoadedCheckpoint
    from ..loaders.onnx_file import FileCheckpoint

__all__ = ["load_checkpoint", "Policy", "load", "noise_generator", "normal_noise", "uniform_noise"]


def load_checkpoint(
    path: Path,
    onnx_path: Optional[Path] = None,
    model_dir: Optional[Path] = None,
    behavior: Optional[str] = None,
    expect_sha256: Optional[str] = None,
    goal_input: GoalInput = None,
):
    """Read, validate and rebuild one checkpoint (sha256 checked before unpickling); without torch, the policy's
    ML-Agents ONNX (the file itself: `onnx_path`, the checkpoint's own, or `path` when it is one) as a
    FileCheckpoint."""
    t0 = time.perf_counter()
    path = Path(path)
    if not path.is_file():
        raise UsageError(f"{path}: no such checkpoint file")
    if not torch_available():
        own = path if path.suffix.lower() == ".onnx" else find_checkpoint_onnx(path, model_dir, behavior, None)
        file = own or onnx_path  # (the checkpoint's own ONNX runs: the torch install runs the checkpoint's weights)
        if file is None:
            raise UsageError(
                f"{short_path(path)}: this checkpoint has no ML-Agents ONNX beside it, and a checkpoint "
                f"alone needs torch: {TORCH_HINT}"
            )
        step = step_of(path.name, behavior or path.parent.name) if path.suffix.lower() == ".pt" else None
        policy = load_file_policy(Path(file), expect_sha256, goal_input, step, path.suffix.lower() == ".pt")
        if onnx_path is not None and own is not None and Path(onnx_path).resolve() != Path(own).resolve():
            _same_policy(policy.settings, load_file_policy(Path(onnx_path), None, goal_input).settings, Path(onnx_path))
        config = read_config(model_dir, behavior)  # (the run folder's, as the torch install reads it)
        trainer, hyper = config.get("trainer_type"), config.get("hyperparameters")
        if policy.settings.trainer is None and trainer in ("ppo", "sac", "poca"):
            policy.settings.trainer = str(trainer)
        if isinstance(hyper, dict) and hyper.get("shared_critic") is True:  # (value heads the ONNX leaves out)
            policy.settings.value_streams = list(config.get("reward_signals") or ["extrinsic"])
        policy.behavior = behavior or path.parent.name if path.suffix.lower() == ".pt" else None
        return policy
    from ..loaders.checkpoint import (
        LoadedCheckpoint,
        build_actor,
        global_step,
        infer_settings,
        onnx_difference,
        policy_needs_onnx,
        read_checkpoint,
        trainer_of,
    )

    if path.suffix.lower() == ".onnx":  # no checkpoint: the ONNX alone
        from ..loaders.onnx_alone import load_onnx_alone

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
        raise NotThisPolicy(
            f"{onnx_path.name} takes inputs {[list(s) for s in onnx_input_shapes(onnx_iface) or []]}, "
            f"which the checkpoint's layers do not fit: not this policy"
        )
    difference = onnx_difference(onnx_iface, state, settings) if given else None
    if difference:
        raise NotThisPolicy(f"{onnx_path.name} {difference}: not this policy")
    return LoadedCheckpoint(path, settings, actor, needed, step, sha, time.perf_counter() - t0)


def _same_policy(own, given, onnx_path: Path) -> None:
    """NotThisPolicy when --onnx takes or answers other shapes than the checkpoint's own ONNX (torch-free)."""

    def shape(s):
        return (sum(math.prod(i.shape) for i in s.inputs), s.continuous_size, list(s.discrete_branches), s.memory_size)

    if shape(own) != shape(given):
        raise NotThisPolicy(
            f"{onnx_path.name} takes {shape(given)[0]} input values and answers continuous "
            f"{given.continuous_size}, discrete {list(given.discrete_branches)}, memory {given.memory_size}; "
            f"the checkpoint's {shape(own)[0]}, {own.continuous_size}, {list(own.discrete_branches)}, "
            f"{own.memory_size}: not this policy"
        )


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

    def __init__(
        self,
        checkpoint: "LoadedCheckpoint | FileCheckpoint",
        device="cpu",
        dtype: str = "float32",
        engine: str = "auto",
        graphs: bool = True,
        seed: Optional[int] = None,
        providers: Optional[list] = None,
        spin: bool = True,
        compile: bool = False,
        threads: Optional[int] = None,
    ):
        self.checkpoint, self.settings = checkpoint, checkpoint.settings
        check_policy_arguments(dtype, engine, graphs, seed, spin, compile, threads)
        self.dtype, self.sigma = dtype, None
        self.engine, self.device, self.engine_name = make_engine(
            checkpoint, device, dtype, engine, graphs, providers, spin, compile, threads and int(threads)
        )
        if checkpoint.actor is not None:
            continuous = checkpoint.actor.action_model._continuous_distribution
            self.sigma = (
                continuous.log_sigma.detach().exp().reshape(-1).numpy()
                if continuous is not None and not self.settings.conditional_sigma
                else None
            )
        # the engine outputs each kind of step needs (no host copy of the others)
        self.fetch = {deterministic: step_outputs(self.settings, deterministic) for deterministic in (True, False)}
        if self.sigma is None and self.settings.continuous_size and "log_sigma" not in self.fetch[False]:
            self.fetch[False].insert(1, "log_sigma")  # (the file's sigma, read where its graph computes it)
        # sampling noise when a call names no seed: fresh on every call, reproducible through load(seed=)
        self._seed = int.from_bytes(os.urandom(8), "little") >> 1 if seed is None else seed
        self._generator = None
        self.memories = AgentMemories(max_bytes=math.inf)  # get_action: agent id -> its LSTM memory [memory_size]
        self._shapes = [tuple(i.shape) for i in self.settings.inputs]
        self._checked_masks: dict = {}  # small masks already checked (their bytes) -> the engine's array
        self._zeros: dict = {}  # (shape) -> read-only float32 zeros

    @property
    def generator(self):
        """The policy's own sampling generator (noise_generator of load()'s seed), made on first use."""
        if self._generator is None:
            self._generator = noise_generator(self._seed)
        return self._generator

    # -- what the policy is
    @property
    def info(self) -> dict:
        s, c = self.settings, self.checkpoint
        return {
            "behavior": getattr(c, "behavior", None)
            or (c.path.stem if c.path.suffix.lower() == ".onnx" else c.path.parent.name),
            "trainer": s.trainer,
            "shared_critic": bool(s.value_streams),
            "inputs": [
                {
                    "name": i.name,
                    "kind": i.kind,
                    "shape": list(i.shape),
                    "normalized": i.normalized,
                    "encoder": i.encoder,
                    "goal": i.goal,
                }
                for i in s.inputs
            ],
            "continuous_size": s.continuous_size,
            "discrete_branches": list(s.discrete_branches),
            "memory_size": s.memory_size,
            "hidden_units": s.hidden_units,
            "num_layers": s.num_layers,
            "body": "hypernetwork (goal-conditioned)" if s.hyper else "mlp",
            "continuous_head": None
            if not s.continuous_size
            else ("state-dependent sigma, tanh squash (SAC)" if s.tanh_squash else "fixed log_sigma, clip(±3)/3"),
            "parameters": c.parameters,
            "settings_source": s.source,
            "checkpoint": str(c.path),
            "sha256": c.sha256,
            "global_step": c.global_step,
            "device": str(self.device),
            "dtype": self.dtype,
            "engine": self.engine_name,
            "runs": "ML-Agents' ONNX file" if c.actor is None else "ML-Agents' modules",
            "providers": self.engine.providers if self.engine_name == "onnxruntime" else None,
        }

    def normalizers(self) -> list:
        """Per input, its observation normaliser as (running mean, standard deviation) float64 arrays, or None."""
        if self.checkpoint.actor is None:
            return list(self.checkpoint.normalizers)
        out = []
        for processor in self.checkpoint.actor.network_body.processors:
            n = getattr(processor, "normalizer", None)
            out.append(
                None
                if n is None
                else (
                    n.running_mean.double().numpy(),
                    np.sqrt(n.running_variance.double().numpy() / int(n.normalization_steps)),
                )
            )
        return out

    # -- inputs
    def prepare(self, observations, action_masks=None, memory=None) -> tuple:
        """Check and batch the inputs: (engine inputs, rows, batched). UsageError names what is wrong."""
        ready = self._ready(observations, action_masks, memory)
        if ready is not None:
            return ready
        s = self.settings
        arrays, rows, batched = self.observation_arrays(observations)
        check_no_extras(s, action_masks, memory)
        if s.discrete_branches:
            arrays.append(self.mask_array(action_masks, rows, batched))
        if s.memory_size:
            arrays.append(self.memory_array(memory, rows, batched))
        self._remember_sizes(arrays)
        return arrays, rows, batched

    def _ready(self, observations, masks, memory) -> Optional[tuple]:
        """The fast path, the same checks made cheaply (one function: at batch 1 each call costs): observations that
        already are what the engine takes (float32, C-contiguous, [rows, *shape] or one observation [*shape]) with
        every value finite (x * 0 is 0 for a finite x, nan for nan or ±inf: one dot product with zeros tells), a mask
        this policy has checked before (its bytes), a memory float32 [rows, memory_size] with finite values: (arrays,
        rows, batched), nothing copied. None sends anything else (and anything wrong) through the full checks and
        their messages, which also make the zeros this path needs for those sizes."""
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
            key = (
                (rows, None, masks.dtype, masks.shape, masks.tobytes())
                if type(masks) is np.ndarray and masks.nbytes <= MASK_KEY_BYTES
                else mask_key(masks, rows)
            )
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
                if (
                    z is None
                    or memory.dtype is not FLOAT32
                    or memory.shape != (rows, s.memory_size)
                    or not memory.flags.c_contiguous
                    or np.vdot(memory, z) != 0
                ):
                    return None
                arrays.append(memory[:, None])
        elif memory is not None:
            return None
        return arrays, rows, batched

    def observation_arrays(self, observations) -> tuple:
        """The observations as float32 [rows, *shape] in input order: (arrays, rows, batched)."""
        return observation_arrays(self.settings, observations)

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
        if memory is None:
            return self._zeros_of((rows, 1, self.settings.memory_size))
        return shape_memory(memory, self.settings.memory_size, rows, batched)

    # -- acting
    def act(
        self,
        observations,
        action_masks=None,
        deterministic: bool = True,
        seed: Optional[int] = None,
        memory=None,
        generator=None,
    ) -> dict:
        """Actions for one observation or a batch (see the class docstring for the conventions). `action_masks`: 1 =
        allowed (numbers), or ML-Agents' per-branch bool list (True = masked). Sampling draws its noise on the CPU:
        from torch.Generator().manual_seed(seed) when a seed is given (that call alone reproduces), from `generator`
        when one is given (sequences), else from the policy's own generator (fresh noise on every call): randn(rows,
        continuous size), then rand(rows, branches) — so the same seed gives the same actions on every device."""
        if not (
            deterministic is True
            and seed is None
            and generator is None
            and type(action_masks) in PLAIN_TYPES
            and type(memory) in PLAIN_TYPES
            and plain_arrays(observations)
        ):  # (a control loop's plain call: as is)
            if self.engine_name == "torch" and on_device(observations, self.device):  # (tensors there: kept there)
                return self.act_on_device(observations, action_masks, deterministic, seed, memory, generator)
            observations, action_masks, memory = check_act_arguments(
                observations, action_masks, memory, deterministic, seed, generator
            )
        flat, rows, batched = self.prepare(observations, action_masks, memory)
        if not rows:  # a batch of 0 observations (an environment step where no agent decides): 0 actions
            return self.no_actions()
        out = self.decide(self.engine.run(flat, self.fetch[deterministic]), rows, deterministic, seed, generator)
        return out if batched else {k: v[0] for k, v in out.items()}

    def act_on_device(self, observations, action_masks, deterministic, seed, memory, generator) -> dict:
        """act() for torch tensors on the policy's own device (the torch engine's): the same checks, made there
        (contract.device_inputs: one read of their verdicts), and the answer as tensors on that device, with no host
        copy for a deterministic call. A sampled call draws its noise on the CPU as act() says (the same seed, the
        same actions on every device): its outputs go to the host for it and the actions come back."""
        import torch

        check_act_arguments(None, None, None, deterministic, seed, generator)  # (the flags: no tensor read here)
        flat, rows, batched = device_inputs(self.settings, self.device, observations, action_masks, memory)
        if not rows:
            out = {k: torch.from_numpy(v).to(self.device) for k, v in self.no_actions().items()}
        elif deterministic:
            raw, s, out = self.engine.run_device(flat, self.fetch[True]), self.settings, {}
            if s.continuous_size:
                out["continuous_actions"] = raw["deterministic_continuous_actions"]
            if s.discrete_branches:
                out["discrete_actions"] = raw["deterministic_discrete_actions"]
            if s.memory_size:
                out["memory"] = raw["recurrent_out"].reshape(rows, s.memory_size)
        else:
            raw = self.engine.run_device(flat, self.fetch[False])
            host = {k: v.cpu().numpy() for k, v in raw.items()}
            out = {
                k: torch.from_numpy(v).to(self.device)
                for k, v in self.decide(host, rows, False, seed, generator).items()
            }
        return out if batched else {k: v[0] for k, v in out.items()}

    def no_actions(self) -> dict:
        """act()'s answer for 0 observations: each output with 0 rows and its width."""
        return no_actions(self.settings)

    def get_action(self, decision_steps, terminal_steps=None, deterministic: bool = True):
        """ML-Agents' Python API: actions for exactly the agents of `decision_steps` (mlagents_envs' DecisionSteps, or
        anything with its `obs`, `agent_id` and `action_mask`), in their order, as mlagents_envs' ActionTuple
        (Actions, with the same fields, where it is not installed). The mask is ML-Agents' (True = masked). An LSTM
        policy keeps each agent's memory here: zeros for a new id, forgotten for the ids in `terminal_steps` before
        acting (their next episode starts from zeros, as in ML-Agents)."""
        s = self.settings
        ended, ids, masks, obs = steps_arguments(s, decision_steps, terminal_steps, deterministic)
        rows = len(ids)
        flat, got, _ = self.prepare(list(obs), masks, None)  # (memories: ours, set below)
        if got != rows:
            raise UsageError(f"decision_steps: {rows} agent id(s) but {got} observation(s)")
        for agent in ended if self.memories else ():  # (checked before: a refused call changes nothing)
            self.memories.forget(agent)
        if not rows:  # (get_steps often holds no agent)
            return self._action_tuple(self.no_actions(), 0)
        known = [self.memories.get(agent) for agent in ids] if self.memories else ()
        if any(memory is not None for memory in known):  # zeros for a new id
            flat[-1] = memory = np.zeros((rows, 1, s.memory_size), np.float32)
            for row, value in enumerate(known):
                if value is not None:
                    memory[row, 0] = value
        out = self.run(flat, rows, deterministic)
        if s.memory_size:
            for agent, memory in zip(ids, out["memory"]):  # past 100,000 ids the least recently seen goes
                self.memories.keep(agent, memory)
        return self._action_tuple(out, rows)

    def _action_tuple(self, out: dict, rows: int):
        """act()'s answer as ML-Agents' ActionTuple: continuous float32, discrete int32, zero-width when none."""
        s = self.settings
        return action_tuple(
            out["continuous_actions"] if s.continuous_size else np.zeros((rows, 0), np.float32),
            out["discrete_actions"].astype(np.int32) if s.discrete_branches else np.zeros((rows, 0), np.int32),
        )

    def reset(self, agent_ids=None) -> None:
        """Forget the LSTM memories get_action keeps: every agent's, or those of `agent_ids`."""
        if agent_ids is None:
            self.memories.clear()
        else:
            for agent in check_agent_ids(agent_ids, "agent_ids"):
                self.memories.forget(agent)

    def close(self) -> None:
        """The API's contract (api.contract.PolicyAPI), as RemotePolicy.close: a policy in this process holds no
        connection, so this only forgets the memories get_action keeps (the engine goes with the object)."""
        self.memories.clear()

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def check_spec(self, behavior_spec) -> None:
        """UsageError naming the first difference between mlagents_envs' BehaviorSpec (or anything
        with its `observation_specs` and `action_spec`) and this policy: the number of observations,
        an observation's shape, the continuous size, the discrete branches. Returns None when they agree."""
        check_behavior_spec(self.settings, behavior_spec)

    def run(
        self, flat: list, rows: int, deterministic: bool = True, seed: Optional[int] = None, generator=None
    ) -> dict:
        """act() for inputs prepare() has already checked: one engine call, then decide()."""
        return self.decide(self.engine.run(flat, self.fetch[deterministic]), rows, deterministic, seed, generator)

    def decide(
        self, raw: dict, rows: int, deterministic: bool = True, seed: Optional[int] = None, generator=None
    ) -> dict:
        """ML-Agents' action from the engine's outputs: deterministic, or sampled (noise as act() says)."""
        s, out = self.settings, {}
        if not deterministic and generator is None:
            generator = self.generator if seed is None else noise_generator(seed)
        if s.continuous_size:
            if deterministic:
                out["continuous_actions"] = raw["deterministic_continuous_actions"]
            else:  # (sigma: the ML-Agents file's own, read out of its graph)
                z = normal_noise(generator, (rows, s.continuous_size))
                if s.tanh_squash:  # SAC: tanh(mu + exp(clamp(log_sigma, -20, 2)) * z)
                    sigma = raw["sigma"] if "sigma" in raw else np.exp(raw["log_sigma"])
                    out["continuous_actions"] = np.tanh(raw["mu"] + z * sigma)
                else:  # PPO/POCA: clip(mu + exp(log_sigma) * z, -3, 3) / 3
                    out["continuous_actions"] = clipped_action(
                        raw["mu"] + z * (raw["sigma"] if "sigma" in raw else self.sigma)
                    )
        if s.discrete_branches:
            if deterministic:
                out["discrete_actions"] = raw["deterministic_discrete_actions"]
            else:
                u = uniform_noise(generator, (rows, len(s.discrete_branches)))
                out["discrete_actions"] = branch_draw(raw["probabilities"], s.discrete_branches, u)
        if s.memory_size:
            out["memory"] = raw["recurrent_out"].reshape(rows, s.memory_size)
        return out

    def reference(self, flat: list) -> dict:
        """The float64 CPU computation of the same modules (the precision reference)."""
        if self.checkpoint.actor is None:
            raise UsageError(f"the float64 reference is ML-Agents' modules in float64, which needs torch: {TORCH_HINT}")
        import copy

        import torch

        from ..engines.torch_devices import cast_actor
        from ..model.networks import EngineHeads

        heads = EngineHeads(cast_actor(copy.deepcopy(self.checkpoint.actor), torch.float64))
        with torch.inference_mode():
            out = heads.outputs([torch.from_numpy(np.asarray(x, np.float64)) for x in flat], cast=lambda x: x)
        return {name: value.numpy() for name, value in out.items()}


def load(
    path,
    device="cpu",
    dtype: str = "float32",
    engine: str = "auto",
    goal_input: GoalInput = None,
    onnx: Optional[str] = None,
    expect_sha256: Optional[str] = None,
    graphs: bool = True,
    seed: Optional[int] = None,
    providers: Optional[list] = None,
    spin: bool = True,
    compile: bool = False,
    threads: Optional[int] = None,
) -> Policy:
    """An ML-Agents run folder (or one .pt checkpoint, or an ML-Agents .onnx) as a Policy. UsageError says what is
    wrong.
    `seed` seeds the policy's own sampling generator (None: from the OS); `onnx` names the
    checkpoint's ML-Agents ONNX (NotThisPolicy, a CheckFailed, when it belongs to another policy); `providers`:
    onnxruntime's execution providers in priority order (e.g. ["tensorrt", "cuda"]), for the onnxruntime engines;
    `spin` False: onnxruntime's threads sleep between calls instead of spin-waiting (the CPU shared with simulators);
    `compile` True: the torch engine runs its modules through torch.compile (torchair on an NPU), checked against eager
    first; any failure runs eager, said in one line (docs/accelerators.md); `threads`: the CPU engines' threads (torch's
    during the torch engine's calls, restored after; onnxruntime's intra-op threads), each library's own by default."""
    with speaking_python():  # (the loaders' messages name the command line's options: here, load()'s arguments)
        return _load(
            path,
            device,
            dtype,
            engine,
            goal_input,
            onnx,
            expect_sha256,
            graphs,
            seed,
            providers,
            spin,
            compile,
            threads,
        )


def _load(
    path, device, dtype, engine, goal_input, onnx, expect_sha256, graphs, seed, providers, spin, compile, threads
) -> Policy:
    check_load_arguments(path, device, expect_sha256, onnx)
    check_policy_arguments(dtype, engine, graphs, seed, spin, compile, threads)
    device = pick_device(
        device, engine, providers
    )  # (checked before the checkpoint is read; 'meta' or an absent GPU refused)
    if providers is not None:
        from ..engines.devices import parse_providers

        if isinstance(providers, str) or not providers or not all(isinstance(p, str) for p in providers):
            raise UsageError(f"providers {brief(providers)}: expected a list of provider names, e.g. ['cuda']")
        providers = parse_providers(",".join(providers))
    path = Path(path)
    source = (
        locate_model(None, str(path), None) if path_kind("path", path) == "dir" else locate_model(str(path), None, None)
    )
    onnx = regular_file("onnx", onnx) if onnx is not None else None
    checkpoint = load_checkpoint(source.checkpoint, onnx, source.model_dir, source.behavior, expect_sha256, goal_input)
    return Policy(checkpoint, device, dtype, engine, graphs, seed, providers, spin, compile, threads)


def noise_generator(seed: int):
    """The sampling noise's generator for `seed` (act(generator=...)): torch's CPU generator, the convention every
    seeded sample of this program follows where torch is installed; without torch numpy's PCG64, whose draws for a
    seed are others (the same distributions: docs/setup.md)."""
    if torch_available():
        import torch

        return torch.Generator().manual_seed(int(seed))
    return np.random.Generator(
        np.random.PCG64(int(seed) if seed >= 0 else 0xFFFF_FFFF_FFFF_FFFF + int(seed))
    )  # (torch's map)


def normal_noise(generator, shape: tuple) -> np.ndarray:
    """Standard normal draws, float32: torch.randn with a torch generator, standard_normal with a numpy one."""
    if isinstance(generator, np.random.Generator):
        return generator.standard_normal(shape, dtype=np.float32)
    import torch

    return torch.randn(shape, generator=generator).numpy()


def uniform_noise(generator, shape: tuple) -> np.ndarray:
    """Uniform draws in [0, 1), float64 (the branches' inverse CDF)."""
    if isinstance(generator, np.random.Generator):
        return generator.random(shape)
    import torch

    return torch.rand(shape, generator=generator, dtype=torch.float64).numpy()
