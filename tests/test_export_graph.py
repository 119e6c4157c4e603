"""export-onnx writes ML-Agents' own graph, not just one that computes the same thing.

ML-Agents' ModelSerializer (torch's TorchScript exporter, opset 9) wrote each reference ONNX below
from the checkpoint beside it. The export of the same checkpoint must have the same nodes in the
same order (op types, names, attributes, inputs and outputs), every weight bit for bit, and give
exactly the same outputs in onnxruntime. Regressions this holds: no-op Cast nodes around the
normaliser (Normalizer.forward / ObservationEncoder.encode casting a float32 tensor to float32),
on image inputs, exp(log_sigma) taken after the noise instead of inside the Gaussian distribution,
the action masks sliced branch by branch instead of all before the logits.

The one value that depends on the machine is the normaliser's folded divisor: the exporter computes
sqrt(running_variance / normalization_steps) with this machine's float32 torch.sqrt kernel, as
ML-Agents' exporter did on the machine that wrote the reference (not every CPU/library rounds it
the same way: the files under examples/ were written where it rounds differently from the machine
that wrote the Huggy sample). So the divisor is held to ML-Agents' expression computed here
exactly, and to the reference within 2 ulp; wherever the two agree, the whole file must be
byte-identical and the outputs exactly equal.
"""

import contextlib
import io
from pathlib import Path

import numpy as np
import onnx
import pytest
import torch
from onnx import numpy_helper

import inference as I

ROOT = Path(__file__).resolve().parent.parent
HUGGY = ROOT / "assets" / "ppo-Huggy-sample" / "Huggy"
EX = ROOT / "examples"

CASES = {  # checkpoint, ML-Agents' ONNX of that checkpoint
    "huggy": (HUGGY / "Huggy-600017.pt", HUGGY / "Huggy-600017.onnx"),  # normalised vector, continuous
    "hybrid": (EX / "hybrid" / "Hybrid" / "Hybrid-40000.pt", EX / "hybrid" / "Hybrid.onnx"),  # + masked discrete
    "visual-nature_cnn": (
        EX / "visual-nature_cnn" / "VisualNature" / "VisualNature-45000.pt",
        EX / "visual-nature_cnn" / "VisualNature.onnx",
    ),  # image + normalised vector
    "visual-simple": (
        EX / "visual-simple" / "VisualSimple" / "VisualSimple-44000.pt",
        EX / "visual-simple" / "VisualSimple.onnx",
    ),  # image + vector, no normaliser
    "lstm": (EX / "lstm" / "Memory" / "Memory-50000.pt", EX / "lstm" / "Memory" / "Memory-50000.onnx"),
}


def export(checkpoint: Path, out: Path) -> bytes:
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        code = I.main(["--mode", "export-onnx", "--checkpoint", str(checkpoint), "--output", str(out), "--json"])
    assert code == 0 and out.is_file()
    return out.read_bytes()


def nodes(model) -> list:
    return [
        (n.op_type, n.name, list(n.input), list(n.output), [a.SerializeToString() for a in n.attribute])
        for n in model.graph.node
    ]


def divisor_names(model) -> set:
    """The initializers the normalisers divide by (the folded sqrt(running_variance / steps))."""
    return {n.input[1] for n in model.graph.node if n.op_type == "Div" and "/normalizer/" in n.name}


def host_divisors(checkpoint: Path) -> list:
    """ML-Agents' expression, torch.sqrt(running_variance / normalization_steps) in float32, here."""
    state = torch.load(checkpoint, map_location="cpu", weights_only=True)["Policy"]
    prefix = "network_body.observation_encoder.processors."
    found = sorted(
        {k[len(prefix) :].split(".")[0] for k in state if k.startswith(prefix) and k.endswith("running_variance")},
        key=int,
    )
    return [
        torch.sqrt(
            state[f"{prefix}{i}.normalizer.running_variance"] / state[f"{prefix}{i}.normalizer.normalization_steps"]
        ).numpy()
        for i in found
    ]


def run(model_bytes: bytes, feed: dict) -> dict:
    import onnxruntime as ort

    session = ort.InferenceSession(model_bytes, providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs() if o.name.startswith("deterministic_") or o.name == "recurrent_out"]
    return dict(zip(names, session.run(names, {i.name: feed[i.name] for i in session.get_inputs()})))


def random_feed(model, rows: int = 256) -> dict:
    rng = np.random.RandomState(7)
    feed = {}
    for value in model.graph.input:
        shape = [rows] + [d.dim_value for d in value.type.tensor_type.shape.dim[1:]]
        if value.name == "action_masks":
            feed[value.name] = (rng.rand(*shape) > 0.3).astype(np.float32)
        elif len(shape) == 4:
            feed[value.name] = rng.rand(*shape).astype(np.float32)
        else:
            feed[value.name] = (rng.randn(*shape) * 3).astype(np.float32)
    return feed


@pytest.mark.parametrize("name", list(CASES))
def test_export_is_mlagents_graph_node_for_node(tmp_path, name):
    checkpoint, reference = CASES[name]
    data = export(checkpoint, tmp_path / "exported.onnx")
    ours, theirs = onnx.load_from_string(data), onnx.load(str(reference))

    assert not [
        n.name for n in ours.graph.node if n.op_type == "Cast" and n.name not in {m.name for m in theirs.graph.node}
    ], "Cast nodes ML-Agents' export does not have"
    assert [n.op_type for n in ours.graph.node] == [n.op_type for n in theirs.graph.node]
    assert nodes(ours) == nodes(theirs)
    assert [(i.name, i.type) for i in ours.graph.input] == [(i.name, i.type) for i in theirs.graph.input]
    assert [(o.name, o.type) for o in ours.graph.output] == [(o.name, o.type) for o in theirs.graph.output]
    assert [i.name for i in ours.graph.initializer] == [i.name for i in theirs.graph.initializer]

    divisors = divisor_names(theirs)
    assert divisor_names(ours) == divisors and len(divisors) == len(host_divisors(checkpoint))
    same_divisors = True
    by_name = {i.name: numpy_helper.to_array(i) for i in ours.graph.initializer}
    for init in theirs.graph.initializer:
        want, got = numpy_helper.to_array(init), by_name[init.name]
        assert got.dtype == want.dtype and got.shape == want.shape, init.name
        if init.name in divisors:
            np.testing.assert_array_max_ulp(got, want, maxulp=2)
            same_divisors &= got.tobytes() == want.tobytes()
        else:
            assert got.tobytes() == want.tobytes(), f"{init.name} differs from ML-Agents' weights"
    ours_divisors = sorted((by_name[n] for n in divisors), key=lambda a: a.tobytes())
    host = sorted(host_divisors(checkpoint), key=lambda a: a.tobytes())
    assert all(a.tobytes() == b.tobytes() for a, b in zip(ours_divisors, host)), (
        "the divisor is not ML-Agents' float32 torch.sqrt(running_variance / normalization_steps)"
    )

    feed = random_feed(theirs)
    got, want = run(data, feed), run(reference.read_bytes(), feed)
    assert list(got) == list(want)
    if same_divisors:  # always for the bundled Huggy on the machines these files came from
        assert data == reference.read_bytes(), "ML-Agents' file, byte for byte"
        for key in want:
            assert np.array_equal(got[key], want[key]), key
    else:
        for key in want:
            assert np.abs(got[key].astype(np.float64) - want[key]).max() <= 2e-6, key
