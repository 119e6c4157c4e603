"""The C# client (clients/csharp) against a serve of two behaviours of one run folder (docs/serve.md "Several policies,
and new versions while training runs"): PolicyClient.Open(address, model: ..., version: ...) names the model and the
version on every line; each answer equals inference.load(<that checkpoint>).act() (discrete equal, continuous within
1e-5) and says which model and version answered; naming no model where two are served, an unknown model and a version
not loaded are each one PolicyException line. The library and clients/csharp/Tests~/ModelTests.cs are compiled with
Mono's mcs (C# 7.3, warnings as errors); the inputs and the expected answers are computed here."""

import json
import subprocess

import numpy as np
import pytest
from conftest import ROOT, child_env, compile_cs, mono_or_skip, serve_process, two_behaviour_run

import inference

CLIENT = ROOT / "clients" / "csharp"


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    mcs, mono = mono_or_skip()
    out = tmp_path_factory.mktemp("csharp-models")
    dll = out / "MLAgentsInference.Client.dll"
    said = compile_cs(mcs, dll, sorted((CLIENT / "Runtime").glob("*.cs")), "-target:library")
    said += compile_cs(mcs, out / "ModelTests.exe", [CLIENT / "Tests~" / "ModelTests.cs"], f"-r:{dll}")
    assert "warning" not in said.lower(), said
    return {"mono": mono, "tests": out / "ModelTests.exe", "dir": out}


def model_case(checkpoint, rows: int, width: int, seed: int, model: str, answered: str, version=None) -> dict:
    obs = np.random.RandomState(seed).uniform(-1, 1, (rows, width)).astype(np.float32)
    out = inference.load(checkpoint).act(obs)
    discrete = out.get("discrete_actions", np.zeros((rows, 0), np.int64))
    return {
        "model": model,
        "version": version,
        "answered": answered,
        "obs": [[float(v) for v in row] for row in obs],
        "continuous": [[float(v) for v in row] for row in out["continuous_actions"]],
        "discrete": [[int(v) for v in row] for row in discrete],
    }


def test_csharp_clients_of_two_behaviours_get_their_checkpoints_answers(built, tmp_path):
    run = two_behaviour_run(tmp_path)
    cases = {
        "models": [
            model_case(run / "Vector" / "Vector-100000.pt", 5, 8, 1, "Vector", "100000"),
            model_case(run / "Hybrid" / "Hybrid-40000.pt", 5, 12, 2, "Hybrid", "40000"),
            model_case(run / "Vector" / "Vector-50000.pt", 3, 8, 3, "Vector", "50000", version=50000),
        ],
        "refusals": [
            {
                "model": None,
                "says": "name the model: 2 are served (Hybrid, Vector) (PolicyClient.Open(address, model: NAME))",
            },
            {"model": "Keeper", "says": "model Keeper: not served (served: Hybrid, Vector)"},
            {"model": "Vector", "version": 70000, "says": "version 70000 is not loaded (loaded: 50000, 100000)"},
        ],
    }
    old, new = cases["models"][2]["continuous"], cases["models"][0]["continuous"]
    assert old != new[:3]  # (the two Vector versions are two policies: a version not honoured would show)
    proc, address, _ = serve_process("--model-dir", run, "--versions", 2, "--listen", "127.0.0.1:0")
    try:
        cases["address"] = address
        path = tmp_path / "cases.json"
        path.write_text(json.dumps(cases))
        r = subprocess.run(
            [built["mono"], str(built["tests"]), str(path)],
            capture_output=True,
            text=True,
            timeout=300,
            env=child_env(LC_ALL="de_DE.UTF-8", LANG="de_DE.UTF-8"),
        )
    finally:
        proc.kill()
        proc.wait(timeout=30)
        proc.stderr.close()
    lines = r.stdout.splitlines()
    assert lines and lines[-1].startswith("RESULT "), (r.returncode, r.stdout[-3000:], r.stderr[-3000:])
    failed = [line for line in lines if line.startswith("FAIL ")]
    passed = [line for line in lines if line.startswith("PASS ")]
    assert failed == [] and r.returncode == 0, failed[:5]
    # each client: its model, the info line's version, (its rows + one Act) x 3 checks, the latest version; 3 refusals
    answers = [len(case["obs"]) + 1 for case in cases["models"]]
    assert len(passed) == sum(3 + 3 * n for n in answers) + 3, lines
