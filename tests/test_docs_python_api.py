"""docs/python-api.md's examples, run as they are written: each ```python block after an
`<!-- example: NAME -->` line is executed from the repository root, its imports finding stand-in
environments (tests/api_standins.py: mlagents_envs.environment.UnityEnvironment, gymnasium.make and
gymnasium.vector.SyncVectorEnv); then what the environment saw is checked."""

from __future__ import annotations

import re
import sys

import api_standins
import pytest
from conftest import ROOT

PAGE = ROOT / "docs" / "python-api.md"


def examples() -> dict:
    text = PAGE.read_text()
    found = dict(re.findall(r"<!-- example: ([\w-]+) -->\n```python\n(.*?)```", text, flags=re.S))
    assert set(found) == {"mlagents", "gymnasium", "vector-lstm"}, sorted(found)
    return found


@pytest.fixture
def run_example(monkeypatch):
    monkeypatch.chdir(ROOT)
    for name, module in api_standins.stand_in_modules().items():
        monkeypatch.setitem(sys.modules, name, module)

    def run(name: str) -> dict:
        namespace = {"__name__": f"docs_example_{name}"}
        exec(compile(examples()[name], f"{PAGE}:{name}", "exec"), namespace)
        return namespace

    return run


def test_the_mlagents_example_drives_agents_that_come_go_and_end(run_example):
    api_standins.StandInUnityEnvironment.example = ROOT / "examples" / "lstm-camera-nonsquare"
    ns = run_example("mlagents")
    log = api_standins.StandInUnityEnvironment.last.log
    assert log["steps"] == 200 and len(log["actions"]) == 200, log["steps"]
    assert log["decisions"] > 300 and log["terminals"] > 50, log
    assert log["masked_chosen"] == 0
    assert any(len(a.discrete) == 0 for a in log["actions"])  # steps where no agent decided were answered too
    assert ns["policy"].memories  # the LSTM memories were kept inside the policy


def test_the_gymnasium_example_takes_dict_observations_and_masks_from_info(run_example):
    made = []
    original = api_standins.StandInDictEnv.__init__

    def spy(self, seed=0):
        original(self, seed)
        made.append(self)

    api_standins.StandInDictEnv.__init__ = spy
    try:
        run_example("gymnasium")
    finally:
        api_standins.StandInDictEnv.__init__ = original
    assert len(made) == 1 and made[0].steps == 100
    assert made[0].forbidden_chosen == 0


def test_the_vectorised_lstm_example_resets_memories_on_done(run_example):
    ns = run_example("vector-lstm")
    log = api_standins.StandInSyncVectorEnv.last.log
    assert log["steps"] == 100 and sum(d.sum() for d in log["done"]) > 20
    last_done = log["done"][-1]
    assert (ns["memory"][last_done] == 0).all() and (ns["memory"][~last_done] != 0).any()
    assert ns["memory"].shape == (8, 32)
