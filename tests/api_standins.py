"""What the Python-API tests drive a policy with: mlagents_envs' own base_env classes when it is
installed (DecisionSteps, TerminalSteps, BehaviorSpec, ObservationSpec, ActionSpec, ActionTuple), else
stand-ins with the same attributes; stand-in environments (a Unity environment whose agents come, go
and end; a gymnasium environment with a Dict observation space and action masks in `info`; a
vectorised one) and the stand-in modules (`mlagents_envs.environment`, `gymnasium`) that let
docs/python-api.md's examples run unchanged. Nothing here calls inference.py: a behaviour's spec
comes from the example's generated.json (what the generator built, written beside ML-Agents' files).
"""

from __future__ import annotations

import json
import types
from pathlib import Path
from typing import NamedTuple, Optional

import numpy as np

try:  # pip install --no-deps --ignore-requires-python mlagents-envs==1.1.0 attrs cattrs
    from mlagents_envs.base_env import (
        ActionSpec,
        ActionTuple,
        BehaviorSpec,
        DecisionSteps,
        DimensionProperty,
        ObservationSpec,
        ObservationType,
        TerminalSteps,
    )

    REAL_MLAGENTS = True
except Exception:  # not installed: the same attributes
    REAL_MLAGENTS = False
    ActionTuple = None

    class ActionSpec(NamedTuple):
        continuous_size: int
        discrete_branches: tuple

    class ObservationSpec(NamedTuple):
        shape: tuple
        dimension_property: tuple
        observation_type: object
        name: str

    class BehaviorSpec(NamedTuple):
        observation_specs: list
        action_spec: ActionSpec

    class DecisionSteps:
        def __init__(self, obs, reward, agent_id, action_mask, group_id, group_reward):
            self.obs, self.reward, self.agent_id, self.action_mask = obs, reward, agent_id, action_mask
            self.group_id, self.group_reward = group_id, group_reward

        def __len__(self):
            return len(self.agent_id)

    class TerminalSteps:
        def __init__(self, obs, reward, interrupted, agent_id, group_id, group_reward):
            self.obs, self.reward, self.interrupted, self.agent_id = obs, reward, interrupted, agent_id
            self.group_id, self.group_reward = group_id, group_reward

        def __len__(self):
            return len(self.agent_id)

    DimensionProperty = ObservationType = None


def behavior_spec(example: Path) -> BehaviorSpec:
    """The BehaviorSpec a Unity build of this example would announce (from its generated.json)."""
    g = json.loads((example / "generated.json").read_text())
    specs = []
    for i, o in enumerate(g["observations"]):
        shape = tuple(o["shape"])
        if REAL_MLAGENTS:
            dims = (
                (DimensionProperty.TRANSLATIONAL_EQUIVARIANCE,) * 2 + (DimensionProperty.NONE,)
                if len(shape) == 3
                else (DimensionProperty.NONE,) * len(shape)
            )
            kind = ObservationType.GOAL_SIGNAL if o["observation_type"] == "GOAL_SIGNAL" else ObservationType.DEFAULT
        else:
            dims, kind = (None,) * len(shape), o["observation_type"]
        specs.append(ObservationSpec(shape, dims, kind, f"sensor{i}"))
    return BehaviorSpec(specs, ActionSpec(g["continuous_size"], tuple(g["discrete_branches"])))


def observation(rng, shape: tuple, rows: int) -> np.ndarray:
    """Float32 [rows, *shape]: cameras uniform in [0, 1], vectors normal at a few scales."""
    if len(shape) == 3:
        return rng.rand(rows, *shape).astype(np.float32)
    return (rng.randn(rows, *shape) * rng.choice([0.3, 1.0, 3.0])).astype(np.float32)


def mlagents_mask(rng, rows: int, branches) -> Optional[list]:
    """ML-Agents' action_mask: one bool array [rows, size] per branch, True = masked, at least one
    action left per branch (as np.split of one [rows, sum] array: views, as mlagents_envs makes them)."""
    if not branches:
        return None
    masked = rng.rand(rows, sum(branches)) < 0.45
    start = 0
    for size in branches:
        full = masked[:, start : start + size].all(axis=1)
        masked[np.flatnonzero(full), start + rng.randint(size, size=int(full.sum()))] = False
        start += size
    return np.split(masked, np.cumsum(branches)[:-1], axis=1)


def decision_steps(obs: list, ids, mask) -> DecisionSteps:
    n = len(ids)
    return DecisionSteps(
        obs, np.zeros(n, np.float32), np.asarray(ids, np.int32), mask, np.zeros(n, np.int32), np.zeros(n, np.float32)
    )


def terminal_steps(obs: list, ids) -> TerminalSteps:
    n = len(ids)
    return TerminalSteps(
        obs,
        np.zeros(n, np.float32),
        np.zeros(n, bool),
        np.asarray(ids, np.int32),
        np.zeros(n, np.int32),
        np.zeros(n, np.float32),
    )


class StandInUnityEnvironment:
    """mlagents_envs' UnityEnvironment without Unity: one behaviour (the example's spec), agents that
    come, go (absent for a step) and end (a TerminalStep, then the same id starts a new episode).
    set_actions checks what mlagents_envs checks (shapes; ActionTuple's dtypes) and that no masked
    action was chosen; `log` keeps what happened, for the tests."""

    example: Path = Path("examples/lstm-camera-nonsquare")  # the tests set it before the page's code runs

    def __init__(self, file_name=None, seed: int = 0, **_):
        self.name = json.loads((Path(self.example) / "generated.json").read_text())["behavior"] + "?team=0"
        self.spec = behavior_spec(Path(self.example))
        self.rng = np.random.RandomState(seed)
        self.next_id, self.alive, self.pending = 0, [], None
        self.log = {"steps": 0, "decisions": 0, "terminals": 0, "masked_chosen": 0, "actions": []}
        StandInUnityEnvironment.last = self

    @property
    def behavior_specs(self) -> dict:
        return {self.name: self.spec}

    def reset(self) -> None:
        self.alive = [self._new_id() for _ in range(3)]

    def _new_id(self) -> int:
        self.next_id += 1
        return self.next_id - 1

    def _obs(self, rows: int) -> list:
        return [observation(self.rng, tuple(o.shape), rows) for o in self.spec.observation_specs]

    def get_steps(self, behavior_name: str):
        assert behavior_name == self.name
        ended = [a for a in self.alive if self.rng.rand() < 0.15]
        gone = [a for a in ended if self.rng.rand() < 0.3]  # ended and left; the others start again at once
        self.alive = [a for a in self.alive if a not in gone]
        deciding = [a for a in self.alive if self.rng.rand() < 0.8 or a in ended]  # some sit a step out
        if self.rng.rand() < 0.3:
            deciding.append(self._new_id())
            self.alive.append(deciding[-1])
        if self.log["steps"] % 7 == 3:  # a step where no agent decides (a decision period longer than 1)
            deciding = []
        mask = mlagents_mask(self.rng, len(deciding), self.spec.action_spec.discrete_branches)
        self.pending = (deciding, mask)
        self.log["decisions"] += len(deciding)
        self.log["terminals"] += len(ended)
        return (decision_steps(self._obs(len(deciding)), deciding, mask), terminal_steps(self._obs(len(ended)), ended))

    def set_actions(self, behavior_name: str, action) -> None:
        deciding, mask = self.pending
        spec, n = self.spec.action_spec, len(deciding)
        assert action.continuous.shape == (n, spec.continuous_size) and action.continuous.dtype == np.float32
        assert action.discrete.shape == (n, len(spec.discrete_branches)) and action.discrete.dtype == np.int32
        if mask is not None and n:
            for b, branch in enumerate(mask):
                self.log["masked_chosen"] += int(branch[np.arange(n), action.discrete[:, b]].sum())
        self.log["actions"].append(action)

    def step(self) -> None:
        self.log["steps"] += 1

    def close(self) -> None:
        pass


class StandInDictEnv:
    """A gymnasium-style environment: Dict observations {'position': [20], 'sensors': [6]} (float32),
    a MultiDiscrete([3, 2, 5]) action, and in `info` gymnasium's action mask for it: one int8 array
    per branch, 1 = allowed. Counts forbidden actions it was sent."""

    branches = (3, 2, 5)

    def __init__(self, seed: int = 0):
        self.rng, self.t, self.forbidden_chosen, self.steps = np.random.RandomState(seed), 0, 0, 0

    def _obs(self):
        return {"position": self.rng.randn(20).astype(np.float32), "sensors": self.rng.randn(6).astype(np.float32)}

    def _info(self):
        allowed = [(self.rng.rand(size) < 0.6).astype(np.int8) for size in self.branches]
        for a in allowed:
            a[self.rng.randint(len(a))] = 1
        self.mask = allowed
        return {"action_mask": tuple(allowed)}

    def reset(self, seed=None, options=None):
        if seed is not None:
            self.rng = np.random.RandomState(seed)
        self.t = 0
        return self._obs(), self._info()

    def step(self, action):
        action = np.asarray(action)
        assert action.shape == (len(self.branches),)
        self.forbidden_chosen += sum(int(m[a] == 0) for m, a in zip(self.mask, action))
        self.t, self.steps = self.t + 1, self.steps + 1
        return self._obs(), 0.0, self.t >= 25, False, self._info()

    def close(self):
        pass


class StandInMemoryEnv:
    """A gymnasium-style environment with a Box(10) observation and a Discrete(4) action whose
    episodes end at random."""

    def __init__(self, seed: int = 0):
        self.rng = np.random.RandomState(seed)

    def reset(self, seed=None, options=None):
        if seed is not None:
            self.rng = np.random.RandomState(seed)
        return self.rng.randn(10).astype(np.float32), {}

    def step(self, action):
        assert 0 <= int(action) < 4
        return self.rng.randn(10).astype(np.float32), 0.0, bool(self.rng.rand() < 0.1), False, {}

    def close(self):
        pass


class StandInSyncVectorEnv:
    """gymnasium.vector.SyncVectorEnv with same-step autoreset (gymnasium 0.26-0.29, and 1.x's
    AutoresetMode.SAME_STEP): a sub-environment that ends is reset at once, and the observation it
    returns is the new episode's first. `log` records each step's done flags, for the tests."""

    def __init__(self, env_fns):
        self.envs = [fn() for fn in env_fns]
        self.num_envs = len(self.envs)
        self.log = {"steps": 0, "done": []}
        StandInSyncVectorEnv.last = self

    def reset(self, seed=None, options=None):
        obs = [env.reset(seed=None if seed is None else seed + i)[0] for i, env in enumerate(self.envs)]
        return np.stack(obs), {}

    def step(self, actions):
        obs, done = [], []
        for env, action in zip(self.envs, np.asarray(actions)):
            o, _, terminated, truncated, _ = env.step(action)
            if terminated or truncated:
                o, _ = env.reset()
            obs.append(o)
            done.append(terminated or truncated)
        self.log["steps"] += 1
        self.log["done"].append(np.array(done))
        terminated = np.array(done)
        return np.stack(obs), np.zeros(self.num_envs), terminated, np.zeros(self.num_envs, bool), {}

    def close(self):
        pass


def stand_in_modules() -> dict:
    """sys.modules entries under which docs/python-api.md's imports find the stand-ins:
    mlagents_envs.environment (UnityEnvironment) and gymnasium (make, vector.SyncVectorEnv).
    mlagents_envs' base_env is left as it is (the real one, or none)."""
    environment = types.ModuleType("mlagents_envs.environment")
    environment.UnityEnvironment = StandInUnityEnvironment
    ids = {"MyMaskedEnv-v0": StandInDictEnv, "MyMemoryEnv-v0": StandInMemoryEnv}
    counter = iter(range(10**6))
    gymnasium = types.ModuleType("gymnasium")
    gymnasium.make = lambda env_id, **kwargs: ids[env_id](seed=next(counter))
    gymnasium.vector = types.SimpleNamespace(SyncVectorEnv=StandInSyncVectorEnv)
    modules = {"mlagents_envs.environment": environment, "gymnasium": gymnasium}
    if not REAL_MLAGENTS:
        package = types.ModuleType("mlagents_envs")
        package.__path__ = []  # a package with nothing else in it: base_env stays unimportable
        package.environment = environment
        modules["mlagents_envs"] = package
    return modules
