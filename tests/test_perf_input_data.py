"""tools/perf_input_data.py writes perf_analyzer's --input-data for a served policy (docs/serve.md): every step it
writes, sent as a V2 REST request to `serve --http` (in this process, 127.0.0.1 port 0), is answered, masks of 0s and
1s with an allowed action in every branch; perf_analyzer's own random masks are refused. Its output file is written
whole or not at all."""

import http.client
import importlib.util
import json

import numpy as np
import pytest
from conftest import EXAMPLES, ROOT

import inference as I

pytest.importorskip("aiohttp")
pytest.importorskip("prometheus_client")
from mlagents_inference.fronts.serve import serving  # noqa: E402

spec = importlib.util.spec_from_file_location("perf_input_data", ROOT / "tools" / "perf_input_data.py")
tool = importlib.util.module_from_spec(spec)
spec.loader.exec_module(tool)


def infer(where: str, model: str, step: dict, shapes: dict) -> tuple:
    inputs = [
        {"name": name, "datatype": "FP32", "shape": [1, *shapes[name]], "data": values} for name, values in step.items()
    ]
    conn = http.client.HTTPConnection(where, timeout=60)
    try:
        conn.request(
            "POST", f"/v2/models/{model}/infer", json.dumps({"inputs": inputs}), {"Content-Type": "application/json"}
        )
        r = conn.getresponse()
        return r.status, r.read()
    finally:
        conn.close()


@pytest.mark.parametrize("kind", ["discrete-multi", "lstm", "visual-simple", "attention"])
def test_every_step_it_writes_is_answered_by_serve(kind, tmp_path):
    out = tmp_path / "data.json"
    assert tool.main(["--model-dir", str(EXAMPLES / kind), "--output", str(out), "--streams", "2", "--steps", "5"]) == 0
    data = json.loads(out.read_text())["data"]
    policy = I.load(EXAMPLES / kind)
    steps = [step for stream in data for step in stream] if policy.info["memory_size"] else data
    assert len(steps) == 10 and all(isinstance(stream, list) for stream in data) == bool(policy.info["memory_size"])
    shapes = {i["name"]: i["shape"] for i in policy.info["inputs"]}
    shapes["action_masks"] = [sum(policy.info["discrete_branches"])]
    branches = policy.info["discrete_branches"]
    with serving(policy, http="127.0.0.1:0") as where:
        metadata = {}
        for step in steps:
            assert set(step) == set(shapes) - ({"action_masks"} if not branches else set())
            if branches:
                masks, at = step["action_masks"], 0
                assert set(masks) <= {0.0, 1.0}
                for size in branches:
                    assert 1.0 in masks[at : at + size]
                    at += size
            status, body = infer(where["http"], policy.info["behavior"], step, shapes)
            assert status == 200, body[:500]
            metadata = json.loads(body)
        assert {o["name"] for o in metadata["outputs"]}
        if branches:  # perf_analyzer's own random data: masks that are not 0 or 1, refused
            rng = np.random.RandomState(0)
            bad = dict(steps[0], action_masks=[float(x) for x in rng.rand(sum(branches))])
            assert infer(where["http"], policy.info["behavior"], bad, shapes)[0] == 400


def test_a_bad_output_leaves_the_existing_file_as_it_was(tmp_path, capsys):
    out = tmp_path / "data.json"
    out.write_text("kept")
    assert tool.main(["--model-dir", str(EXAMPLES / "nowhere"), "--output", str(out)]) == 2
    assert out.read_text() == "kept" and sorted(p.name for p in tmp_path.iterdir()) == ["data.json"]
    assert "no such" in capsys.readouterr().err
    assert tool.main(["--model-dir", str(EXAMPLES / "lstm"), "--output", str(tmp_path / "data.txt")]) == 2
