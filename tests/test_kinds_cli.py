"""The command line for each policy kind: action, batch (in memory and .npz file to .npz file),
onnx-compare, stream and export-onnx, run in this process through inference.main([...]) and held to
ML-Agents' own ONNX beside each checkpoint (tests/mlagents_reference.py), never to inference.py's numbers.
"""

from __future__ import annotations

import json
import sys
from functools import lru_cache
from pathlib import Path

import numpy as np
import pytest
from conftest import EXAMPLES, call, need, random_memories, refused, run
from mlagents_reference import (
    OnnxReference,
    chosen_allowed,
    discrete_mismatches,
    entity_obs,
    image_obs,
    max_err,
    max_rel_err,
    random_masks,
    vector_obs,
)

import inference as I

ZOO = EXAMPLES  # the in-repository examples carry the development zoo's kinds under the same names
CONT_TOL = 1e-5
EXPORT_TOL = 1e-6  # exported ONNX vs ML-Agents' ONNX, both in onnxruntime: |err| <= 1e-6 * max(1, |value|)

# folder, behaviour, inputs, continuous size, branches, memory size, SAC
KINDS = {
    "discrete-multi": ("DiscreteMulti", [("vector", [20]), ("vector", [6])], 0, [3, 2, 5], 0),
    "hybrid": ("Hybrid", [("vector", [12])], 3, [2], 0),
    "sac-continuous": ("SacContinuous", [("vector", [16])], 4, [], 0),
    "lstm": ("Memory", [("vector", [10])], 0, [4], 32),
    "attention": ("Attention", [("entities", [6, 5]), ("vector", [8])], 0, [3, 3], 0),
    "visual-simple": ("VisualSimple", [("visual", [3, 36, 36]), ("vector", [5])], 2, [], 0),
    "visual-nature_cnn": ("VisualNature", [("visual", [3, 36, 36]), ("vector", [5])], 0, [3], 0),
}
NAMES = list(KINDS)


pytestmark = pytest.mark.usefixtures("one_torch_thread")  # (conftest.py)


def folder(name):
    return need(ZOO / name)


@lru_cache(maxsize=None)
def _reference(name) -> OnnxReference:
    return OnnxReference(ZOO / name / f"{KINDS[name][0]}.onnx")


def reference(name) -> OnnxReference:
    need(ZOO / name / f"{KINDS[name][0]}.onnx")
    return _reference(name)


def make_obs(name, rng, rows) -> list:
    out = []
    for what, shape in KINDS[name][1]:
        if what == "vector":
            out.append(vector_obs(rng, rows, shape[0]))
        elif what == "visual":
            out.append(image_obs(rng, rows, shape))
        else:
            out.append(entity_obs(rng, rows, shape[0], shape[1])[0])
    return out


def filled(name, value: float, rows: int = 1) -> list:
    """What `--obs <number>` means: every input filled with that number."""
    return [np.full((rows, *shape), value, np.float32) for _, shape in KINDS[name][1]]


def continuous_of(result: dict):
    """A continuous-only policy keeps "actions" (API.md); "continuous_actions" wherever present."""
    if "continuous_actions" in result:
        if "actions" in result:
            assert result["actions"] == result["continuous_actions"]
        return np.asarray(result["continuous_actions"], np.float32)
    return np.asarray(result["actions"], np.float32)


def check(name, got_cont, got_disc, got_mem, ref: dict, masks, rows, label):
    _, _, cont, branches, memory = KINDS[name]
    if cont:
        got_cont = np.asarray(got_cont, np.float32).reshape(rows, cont)
        err = max_err(got_cont, ref["continuous"])
        assert err <= CONT_TOL, f"{name} {label}: continuous max |err| vs ONNX {err:.3e}"
    if branches:
        got_disc = np.asarray(got_disc, np.int64).reshape(rows, len(branches))
        genuine, ties, examples = discrete_mismatches(got_disc, ref, 2e-5)
        assert genuine == 0, f"{name} {label}: {genuine} discrete mismatches vs ONNX: {examples}"
        assert ties <= max(1, rows // 500)
        if masks is not None:
            assert chosen_allowed(got_disc, masks, branches), f"{name} {label}: a masked-out action was chosen"
    if memory:
        got_mem = np.asarray(got_mem, np.float32).reshape(rows, memory)
        err = max_rel_err(got_mem, ref["memory"])
        assert err <= CONT_TOL, f"{name} {label}: memory max rel err vs ONNX {err:.3e}"


def floats_text(values) -> str:
    return ",".join(repr(float(v)) for v in np.asarray(values, np.float32).ravel())


# ---------------------------------------------------------------------------------------------
# action
# ---------------------------------------------------------------------------------------------


def _action_cases():
    for name in NAMES:  # images live in [0, 1]
        for value in (0.5, 1.0) if KINDS[name][1][0][0] == "visual" else (0.5, -1.25):
            yield name, value


@pytest.mark.parametrize("name,value", list(_action_cases()))
def test_action_mode(capsys, name, value):
    """--obs <number> fills every input; --mask and --memory given; JSON against the ONNX."""
    _, _, cont, branches, memory = KINDS[name]
    args = ["--mode", "action", "--model-dir", folder(name), "--obs", value]
    masks = mem = None
    rng = np.random.RandomState(int(value * 8) + 20)
    if branches:
        masks = random_masks(rng, 1, branches, all_allowed_every=10**9)
        args += ["--mask", ",".join(str(int(v)) for v in masks[0])]
    if memory:
        mem = random_memories(rng, 1, memory)
        args += ["--memory", floats_text(mem)]
    code, result, err = call(capsys, *args)
    assert code == 0, err
    assert result["passed"] is True
    ref = reference(name).run(filled(name, value), masks, mem)
    check(
        name,
        continuous_of(result) if cont else None,
        result.get("discrete_actions"),
        result.get("memory"),
        ref,
        masks,
        1,
        f"action --obs {value}",
    )
    if not branches:
        assert "discrete_actions" not in result
    if not memory:
        assert "memory" not in result


def test_action_mode_refuses_a_mask_of_the_wrong_length(capsys):
    result = call(capsys, "--mode", "action", "--model-dir", folder("discrete-multi"), "--mask", "1,1,1")
    assert refused(result).startswith("error:") and result[1] is None


def test_action_mode_refuses_a_mask_that_forbids_a_whole_branch(capsys):
    refused(call(capsys, "--mode", "action", "--model-dir", folder("discrete-multi"), "--mask", "0,0,0,1,1,1,1,1,1,1"))


def test_action_mode_refuses_memory_of_the_wrong_width(capsys):
    refused(call(capsys, "--mode", "action", "--model-dir", folder("lstm"), "--memory", ",".join(["0"] * 31)))


# Image files for --obs: read as ML-Agents' camera sensor reads a frame (r/255, g/255, b/255, any
# alpha left out; a grayscale camera takes (r + g + b) / 3 / 255), the expected observation computed
# here in float64 from the file's own bytes as decoded by Pillow.
IMAGE_POLICIES = {  # folder, ONNX, image shape [C, H, W], vector width beside it
    "visual-simple": (ZOO / "visual-simple", ZOO / "visual-simple" / "VisualSimple.onnx", (3, 36, 36), 5),
    "visual-match3": (ZOO / "visual-match3", ZOO / "visual-match3" / "VisualMatch3.onnx", (4, 6, 6), 5),
    "grey-camera": (
        EXAMPLES / "lstm-camera-nonsquare",
        EXAMPLES / "lstm-camera-nonsquare" / "LstmCam.onnx",
        (1, 24, 30),
        3,
    ),
}


def _write_image(path: Path, policy: str, kind: str, rng) -> np.ndarray:
    """An image file of `kind` for `policy`; returns the [C, H, W] float64 observation it stands for."""
    from PIL import Image

    c, h, w = IMAGE_POLICIES[policy][2]
    rgba = rng.randint(0, 256, (h, w, 4)).astype(np.uint8)
    if kind == "board":  # one-hot planes, as a match3 / grid sensor gives them, stored as RGBA
        rgba = np.eye(4, dtype=np.uint8)[rng.randint(0, 4, (h, w))] * 255
    if kind == "grey":
        Image.fromarray(rgba[..., 0]).save(path)
    elif kind == "rgb":
        Image.fromarray(rgba[..., :3]).save(path)
    elif kind in ("rgba", "board"):
        Image.fromarray(rgba).save(path)
    elif kind == "palette":
        Image.fromarray(rgba[..., :3]).convert("P", palette=getattr(Image, "Palette", Image).ADAPTIVE, colors=50).save(
            path
        )
    elif kind == "jpeg":
        Image.fromarray(rgba[..., :3]).save(path, quality=90)
    with Image.open(path) as image:  # what the file holds (palette and JPEG are lossy)
        pixels = np.asarray(
            image.convert("RGBA" if kind in ("rgba", "board") else "RGB" if kind != "grey" else "L"), np.float64
        )
    if pixels.ndim == 2:
        pixels = pixels[..., None]
    if c == 1 and pixels.shape[2] >= 3:
        pixels = pixels[..., :3].sum(axis=2, keepdims=True) / 3
    elif c == 3:
        pixels = pixels[..., :3]
    return (pixels / 255).transpose(2, 0, 1)


@pytest.mark.parametrize(
    "policy,kind,suffix",
    [
        ("visual-simple", "rgb", ".png"),
        ("visual-simple", "rgba", ".png"),
        ("visual-simple", "palette", ".png"),
        ("visual-simple", "jpeg", ".jpg"),
        ("grey-camera", "grey", ".png"),
        ("grey-camera", "rgb", ".png"),
        ("grey-camera", "rgba", ".png"),
        ("visual-match3", "board", ".png"),
    ],
)
def test_action_mode_reads_an_image_file_as_mlagents_camera_does(capsys, tmp_path, policy, kind, suffix):
    folder_, onnx, shape, width = IMAGE_POLICIES[policy]
    need(onnx)
    path = tmp_path / f"frame{suffix}"
    image = _write_image(path, policy, kind, np.random.RandomState(len(kind) + shape[0]))
    code, result, err = call(capsys, "--mode", "action", "--model-dir", folder_, "--obs", f"obs_0={path};obs_1=0.25")
    assert code == 0, err
    obs = [image[None].astype(np.float32), np.full((1, width), 0.25, np.float32)]
    ref = OnnxReference(onnx).run(obs)
    if "continuous" in ref:
        assert max_err(continuous_of(result), ref["continuous"]) <= CONT_TOL
    if "discrete" in ref:
        genuine, _, examples = discrete_mismatches(
            np.asarray(result["discrete_actions"], np.int64).reshape(1, -1), ref, 2e-5
        )
        assert genuine == 0, examples
    if "memory" in ref:
        assert max_rel_err(np.asarray(result["memory"], np.float32).reshape(1, -1), ref["memory"]) <= CONT_TOL


@pytest.mark.parametrize(
    "policy,kind,words",
    [
        ("visual-simple", "grey", "obs_0: frame.png is a grey image; this camera takes colour"),
        ("visual-match3", "rgb", "obs_0: frame.png is colour (RGB); this 4-channel input takes an RGBA file"),
        ("visual-match3", "palette", "obs_0: frame.png is colour (P); this 4-channel input takes an RGBA file"),
        (
            "visual-simple",
            "16bit",
            "obs_0: frame.png: Pillow reads it as mode I;16; only 8-bit grey, palette, RGB or RGBA files are read",
        ),
        ("visual-simple", "big", "obs_0: frame.png is 40x40 (W x H), the policy takes 36x36"),
        ("grey-camera", "transposed", "obs_0: frame.png is 24x30 (W x H), the policy takes 30x24"),
    ],
)
def test_image_file_that_does_not_fit_is_refused(capsys, tmp_path, policy, kind, words):
    from PIL import Image

    folder_, onnx, (c, h, w), _ = IMAGE_POLICIES[policy]
    need(folder_)
    path = tmp_path / "frame.png"
    if kind == "16bit":
        Image.fromarray(np.full((h, w), 40000, np.uint16)).save(path)
    elif kind == "big":
        Image.fromarray(np.zeros((40, 40, 3), np.uint8)).save(path)
    elif kind == "transposed":
        Image.fromarray(np.zeros((w, h), np.uint8)).save(path)
    else:
        _write_image(path, policy, kind, np.random.RandomState(0))
    refused(call(capsys, "--mode", "action", "--model-dir", folder_, "--obs", f"obs_0={path};obs_1=0"), words)


# ---------------------------------------------------------------------------------------------
# batch
# ---------------------------------------------------------------------------------------------


def seeded_inputs(name, seed: int, rows: int) -> list:
    """`--obs random --seed S` as --help states it: one np.random.RandomState(S) for all inputs in input
    order, randn for vectors and entity buffers, rand (uniform [0, 1)) for images; in an entity buffer each
    row keeps its first k entities, k = RandomState(S + 104729).randint(0, N + 1), the rest zero (absent)."""
    rng, counts = np.random.RandomState(seed), np.random.RandomState(seed + 104729)
    out = []
    for what, shape in KINDS[name][1]:
        x = (rng.rand(rows, *shape) if what == "visual" else rng.randn(rows, *shape)).astype(np.float32)
        if what == "entities":
            present = counts.randint(0, shape[0] + 1, size=rows)
            for row, k in enumerate(present):
                x[row, k:] = 0.0
        out.append(x)
    return out


@pytest.mark.parametrize("name", NAMES)
def test_batch_mode_in_memory(capsys, name):
    """--batch 16 random observations (RandomState(seed), as documented) with one --mask for every row."""
    _, _, cont, branches, memory = KINDS[name]
    args = ["--mode", "batch", "--batch", 16, "--seed", 3, "--model-dir", folder(name)]
    masks = None
    if branches:
        one = random_masks(np.random.RandomState(8), 1, branches, all_allowed_every=10**9)
        args += ["--mask", ",".join(str(int(v)) for v in one[0])]
        masks = one.repeat(16, axis=0)
    code, result, err = call(capsys, *args)
    assert code == 0, err
    assert result["passed"] is True
    ref = reference(name).run(seeded_inputs(name, 3, 16), masks, None)
    check(
        name,
        continuous_of(result) if cont else None,
        result.get("discrete_actions"),
        result.get("memory"),
        ref,
        masks,
        16,
        "batch --batch 16",
    )
    if cont:
        assert continuous_of(result).shape == (16, cont)
    if branches:
        assert np.asarray(result["discrete_actions"]).shape == (16, len(branches))
    if memory:
        assert np.asarray(result["memory"]).shape == (16, memory)
    else:
        assert "memory" not in result


@pytest.mark.parametrize("name", ["discrete-multi", "attention", "visual-nature_cnn", "lstm"])
def test_action_mode_random_observation_read_back(capsys, name):
    """--obs random: the observation the JSON reports, fed to the ONNX, gives the action the JSON reports."""
    _, inputs, cont, branches, memory = KINDS[name]
    code, result, err = call(capsys, "--mode", "action", "--seed", 6, "--model-dir", folder(name))
    assert code == 0, err
    reported = result["obs"]
    if isinstance(reported, dict):
        obs = [np.asarray(reported[f"obs_{j}"], np.float32)[None] for j in range(len(inputs))]
    else:
        obs = [np.asarray(reported, np.float32)[None]]
    assert [list(o.shape[1:]) for o in obs] == [s for _, s in inputs]
    ref = reference(name).run(obs, None, None)
    check(
        name,
        continuous_of(result) if cont else None,
        result.get("discrete_actions"),
        result.get("memory"),
        ref,
        None,
        1,
        "action --obs random",
    )


@pytest.mark.parametrize("name", NAMES)
def test_batch_mode_npz_file_to_npz(capsys, tmp_path, name):
    """obs_0..obs_k (+ action_masks, + memory) in an .npz; the .npz written holds what the ONNX gives."""
    _, inputs, cont, branches, memory = KINDS[name]
    rows = 300 if inputs[0][0] == "visual" else 1000
    rng = np.random.RandomState(31)
    obs = make_obs(name, rng, rows)
    arrays = {f"obs_{j}": o for j, o in enumerate(obs)}
    masks = mem = None
    if branches:
        masks = arrays["action_masks"] = random_masks(rng, rows, branches)
    if memory:
        mem = arrays["memory"] = random_memories(rng, rows, memory)
    source, target = tmp_path / "obs.npz", tmp_path / "actions.npz"
    np.savez(source, **arrays)
    code, result, err = call(
        capsys, "--mode", "batch", "--model-dir", folder(name), "--obs-file", source, "--output", target, "--chunk", 128
    )
    assert code == 0, err
    assert result["passed"] is True
    with np.load(target) as written:
        keys = set(written.files)
        want = {"continuous_actions"} if cont else set()
        want |= {"discrete_actions"} if branches else set()
        want |= {"memory"} if memory else set()
        assert keys == want, keys
        ref = reference(name).run(obs, masks, mem)
        check(
            name,
            written["continuous_actions"] if cont else None,
            written["discrete_actions"] if branches else None,
            written["memory"] if memory else None,
            ref,
            masks,
            rows,
            "batch --obs-file",
        )
        if branches:
            assert written["discrete_actions"].dtype == np.int64


def test_batch_npz_with_a_missing_input_is_refused(capsys, tmp_path):
    rng = np.random.RandomState(1)
    np.savez(tmp_path / "obs.npz", obs_0=rng.randn(5, 20).astype(np.float32))
    refused(
        call(
            capsys,
            "--mode",
            "batch",
            "--model-dir",
            folder("discrete-multi"),
            "--obs-file",
            tmp_path / "obs.npz",
            "--output",
            tmp_path / "out.npz",
        ),
        "obs_1",
    )
    assert not (tmp_path / "out.npz").exists()


def test_batch_npz_with_a_wrong_image_size_is_refused(capsys, tmp_path):
    rng = np.random.RandomState(1)
    np.savez(
        tmp_path / "obs.npz",
        obs_0=rng.uniform(0, 1, (4, 3, 32, 32)).astype(np.float32),
        obs_1=rng.randn(4, 5).astype(np.float32),
    )
    refused(
        call(
            capsys,
            "--mode",
            "batch",
            "--model-dir",
            folder("visual-simple"),
            "--obs-file",
            tmp_path / "obs.npz",
            "--output",
            tmp_path / "out.npz",
        ),
        "obs_0",
    )
    assert not (tmp_path / "out.npz").exists()


# ---------------------------------------------------------------------------------------------
# onnx-compare
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", NAMES)
def test_onnx_compare_passes(capsys, name):
    code, result, err = call(capsys, "--mode", "onnx-compare", "--batch", 64, "--model-dir", folder(name))
    assert code == 0, (err, result)
    assert result["passed"] is True and result["tol"] == 1e-4


@pytest.mark.parametrize("name", ["hybrid", "lstm"])
def test_onnx_compare_tol_is_the_bar(capsys, name):
    """--tol 1e-5 (the bar the per-kind tests hold) passes on the torch engine; a bar below float32's
    rounding fails with exit 1: the torch engine is not bit-identical to onnxruntime on these."""
    args = ["--mode", "onnx-compare", "--batch", 64, "--engine", "torch", "--model-dir", folder(name)]
    code, result, err = call(capsys, *args, "--tol", "1e-5")
    assert code == 0 and result["passed"] is True and result["tol"] == 1e-5, (err, result)
    code, result, _ = call(capsys, *args, "--tol", "1e-12")
    worst = result.get("max_abs_err") or 0.0
    if "rollout" in result:
        worst = max(worst, result["memory_max_rel_err"], result["rollout"]["memory_max_rel_err"])
    assert worst >= 1e-12, "bit-identical: this test would not show the bar at work"
    assert code == 1 and result["passed"] is False


# ---------------------------------------------------------------------------------------------
# stream
# ---------------------------------------------------------------------------------------------


def stream(capsys, name, lines: list, model_dir=None) -> list:
    """stream mode in this process on `lines` (dicts sent as JSON, text as it is): the parsed answers."""
    data = "".join((l if isinstance(l, str) else json.dumps(l)) + "\n" for l in lines)
    code, out, err = run(capsys, "--mode", "stream", "--model-dir", model_dir or folder(name), stdin=data)
    assert code == 0 and "Traceback" not in err, err
    return [json.loads(l) for l in out.splitlines() if l.strip()]


@pytest.mark.parametrize("name", NAMES)
def test_stream_mode(capsys, monkeypatch, name):
    _, inputs, cont, branches, memory = KINDS[name]
    rng = np.random.RandomState(41)
    rows = 6
    obs = make_obs(name, rng, rows)
    masks = random_masks(rng, rows, branches) if branches else None
    mem = random_memories(rng, rows, memory) if memory else None
    lines = []
    for i in range(rows):
        line = {"id": i}
        if len(inputs) == 1:
            line["obs"] = obs[0][i].tolist()
        else:
            line.update({f"obs_{j}": o[i].tolist() for j, o in enumerate(obs)})
        if branches:
            line["action_masks"] = masks[i].tolist()
        if memory:
            line["memory"] = mem[i].tolist()
        lines.append(line)
    lines.append("not json")
    lines.append({"id": "bad", **({"obs": [0.0] * 3} if len(inputs) == 1 else {"obs_0": [0.0] * 3})})
    lines.append(lines[0])  # the stream goes on after errors
    answers = stream(capsys, name, lines)
    assert len(answers) == rows + 3
    assert [a["id"] for a in answers[:rows]] == list(range(rows))
    assert "error" in answers[rows] and "error" in answers[rows + 1] and answers[rows + 1]["id"] == "bad"
    good = answers[:rows]
    for a in good:
        assert "error" not in a, a
    ref = reference(name).run(obs, masks, mem)
    cont_got = np.array([continuous_of(a) for a in good]) if cont else None
    disc_got = np.array([a["discrete_actions"] for a in good]) if branches else None
    mem_got = np.array([a["memory"] for a in good]) if memory else None
    check(name, cont_got, disc_got, mem_got, ref, masks, rows, "stream")
    assert answers[-1]["id"] == 0 and {k: v for k, v in answers[-1].items()} == answers[0]


def test_stream_stochastic_lines_are_seeded_and_allowed(capsys, monkeypatch):
    name = "discrete-multi"
    rng = np.random.RandomState(42)
    obs = make_obs(name, rng, 1)
    masks = random_masks(rng, 1, [3, 2, 5], all_allowed_every=10**9)
    line = {
        "obs_0": obs[0][0].tolist(),
        "obs_1": obs[1][0].tolist(),
        "action_masks": masks[0].tolist(),
        "stochastic": True,
        "seed": 9,
    }
    answers = stream(capsys, name, [{**line, "id": k} for k in range(3)] + [{**line, "seed": 10}])
    assert answers[0]["discrete_actions"] == answers[1]["discrete_actions"] == answers[2]["discrete_actions"]
    for a in answers:
        assert chosen_allowed(np.array([a["discrete_actions"]]), masks, [3, 2, 5])


class Controller:
    """Stands in for sys.stdin (and its .buffer): each line it hands the stream is written after reading
    the stream's answer to the previous one, so the memory of answer t goes into line t + 1 -- a closed
    loop in one process, one policy load."""

    def __init__(self, capsys, make_line, steps: int):
        self.capsys, self.make_line, self.steps = capsys, make_line, steps
        self.answers: list = []
        self.buffer = self

    def readline(self, *_):
        out = self.capsys.readouterr().out
        self.answers += [json.loads(l) for l in out.splitlines() if l.strip()]
        if len(self.answers) >= self.steps:
            return b""
        return (
            json.dumps(self.make_line(len(self.answers), self.answers[-1] if self.answers else None)) + "\n"
        ).encode()

    def __iter__(self):
        while True:
            line = self.readline()
            if not line:
                return
            yield line.decode()


def test_stream_lstm_memory_carried_by_the_controller(capsys, monkeypatch):
    """A controller feeds each answer's memory into its next line: 30 steps against the ONNX carried alike."""
    name, ref = "lstm", reference("lstm")
    rng = np.random.RandomState(43)
    steps = 30
    obs = vector_obs(rng, steps, 10)
    masks = random_masks(rng, steps, [4])

    def make_line(t, previous):
        line = {"id": t, "obs": obs[t].tolist(), "action_masks": masks[t].tolist()}
        if previous is not None:
            line["memory"] = previous["memory"]
        return line

    controller = Controller(capsys, make_line, steps)
    monkeypatch.setattr(sys, "stdin", controller)
    code = I.main(["--mode", "stream", "--model-dir", str(folder(name))])
    controller.readline()  # collect the last answer
    assert code == 0
    answers = controller.answers
    assert [a.get("id") for a in answers] == list(range(steps)), answers[:2]
    mem_ref = np.zeros((1, 32), np.float32)
    for t, answer in enumerate(answers):
        want = ref.run([obs[t : t + 1]], masks[t : t + 1], mem_ref)
        check(
            name, None, [answer["discrete_actions"]], [answer["memory"]], want, masks[t : t + 1], 1, f"stream step {t}"
        )
        mem_ref = want["memory"]


@pytest.mark.parametrize("name", ["lstm", "lstm-camera-nonsquare"])
def test_stream_keeps_each_ids_memory_across_single_and_one_row_lines(capsys, monkeypatch, name):
    """Two ids interleaved; each line is one observation, unbatched or as a one-row batch, by turns;
    the stream carries each id's memory itself. Against the ONNX carrying the memory alike."""
    made = EXAMPLES / name
    if name == "lstm":
        model_dir, onnx, inputs, branches, size = folder(name), ZOO / name / "Memory.onnx", [("vector", [10])], [4], 32
    else:
        model_dir, onnx, inputs, branches, size = (
            made,
            made / "LstmCam.onnx",
            [("visual", [1, 24, 30]), ("vector", [3])],
            [3, 2],
            16,
        )
    rng = np.random.RandomState(44)
    steps, ids = 6, ["a", 7]
    obs = {
        i: [image_obs(rng, steps, s) if w == "visual" else vector_obs(rng, steps, s[0]) for w, s in inputs] for i in ids
    }
    masks = {i: random_masks(rng, steps, branches) for i in ids}
    lines = []
    for t in range(steps):
        for i in ids:
            pick = (lambda x: x[t].tolist()) if t % 2 == 0 else (lambda x: x[t : t + 1].tolist())
            values = [pick(x) for x in obs[i]]
            line = {"id": i, "action_masks": pick(masks[i])}
            line.update({"obs": values[0]} if len(values) == 1 else {f"obs_{j}": v for j, v in enumerate(values)})
            lines.append(line)
    answers = stream(capsys, name, lines, model_dir)
    assert all("error" not in a for a in answers), [a for a in answers if "error" in a][:1]
    ref = OnnxReference(onnx)
    memory = {i: np.zeros((1, size), np.float32) for i in ids}
    for n, answer in enumerate(answers):
        t, i = divmod(n, len(ids))
        i = ids[i]
        want = ref.run([x[t : t + 1] for x in obs[i]], masks[i][t : t + 1], memory[i])
        got_memory = np.asarray(answer["memory"], np.float32).reshape(1, size)
        assert np.asarray(answer["discrete_actions"]).reshape(-1).tolist() == want["discrete"].reshape(-1).tolist(), (
            name,
            t,
            i,
        )
        assert max_rel_err(got_memory, want["memory"]) <= 1e-5, (name, t, i)
        memory[i] = want["memory"]


# ---------------------------------------------------------------------------------------------
# export-onnx
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", NAMES)
def test_export_onnx_agrees_with_mlagents_onnx(capsys, tmp_path, name):
    import onnxruntime as ort

    _, inputs, cont, branches, memory = KINDS[name]
    target = tmp_path / "exported.onnx"
    code, result, err = call(capsys, "--mode", "export-onnx", "--model-dir", folder(name), "--output", target)
    assert code == 0, err
    assert result["passed"] is True and target.is_file()
    session = ort.InferenceSession(str(target), providers=["CPUExecutionProvider"])
    names = [i.name for i in session.get_inputs()]
    want_inputs = (
        [f"obs_{j}" for j in range(len(inputs))]
        + (["action_masks"] if branches else [])
        + (["recurrent_in"] if memory else [])
    )
    assert sorted(names) == sorted(want_inputs), names
    outputs = [o.name for o in session.get_outputs()]
    det = (
        (["deterministic_continuous_actions"] if cont else [])
        + (["deterministic_discrete_actions"] if branches else [])
        + (["recurrent_out"] if memory else [])
    )
    assert set(det) <= set(outputs), outputs
    rng = np.random.RandomState(51)
    rows = 200
    obs = make_obs(name, rng, rows)
    masks = random_masks(rng, rows, branches) if branches else None
    mem = random_memories(rng, rows, memory) if memory else None
    ref_model = reference(name)
    feed = ref_model.feed(obs, masks, mem)
    got = dict(zip(det, session.run(det, feed)))
    ref = ref_model.run(obs, masks, mem)
    if cont:
        err = max_rel_err(got["deterministic_continuous_actions"], ref["continuous"])
        assert err <= EXPORT_TOL, f"{name}: exported continuous vs ML-Agents ONNX {err:.3e}"
    if branches:
        genuine, ties, examples = discrete_mismatches(got["deterministic_discrete_actions"], ref, 2e-5)
        assert genuine == 0 and ties <= 1, (name, genuine, ties, examples)
    if memory:
        err = max_rel_err(np.asarray(got["recurrent_out"]).reshape(rows, memory), ref["memory"])
        assert err <= EXPORT_TOL, f"{name}: exported recurrent_out vs ML-Agents ONNX {err:.3e}"


def test_export_onnx_without_an_mlagents_onnx_is_held_to_float64_and_still_agrees(capsys, tmp_path):
    """No ONNX beside the checkpoint: export-onnx verifies against the float64 rebuild; the file it
    writes still gives ML-Agents' own ONNX's (kept elsewhere) discrete actions."""
    import shutil

    import onnxruntime as ort

    name = "discrete-multi"
    source = folder(name) / KINDS[name][0]
    copy = tmp_path / "model" / KINDS[name][0]
    copy.mkdir(parents=True)
    checkpoint = next(source.glob("*.pt"))
    shutil.copy(checkpoint, copy / checkpoint.name)
    target = tmp_path / "exported.onnx"
    code, result, err = call(capsys, "--mode", "export-onnx", "--model-dir", copy.parent, "--output", target)
    assert code == 0, err
    assert result["passed"] is True and "float64" in result["reference"], result
    rng = np.random.RandomState(52)
    obs, masks = make_obs(name, rng, 300), random_masks(rng, 300, KINDS[name][3])
    session = ort.InferenceSession(str(target), providers=["CPUExecutionProvider"])
    got = session.run(["deterministic_discrete_actions"], reference(name).feed(obs, masks, None))[0]
    genuine, ties, examples = discrete_mismatches(got, reference(name).run(obs, masks, None), 2e-5)
    assert genuine == 0 and ties <= 1, (genuine, ties, examples)


# ---------------------------------------------------------------------------------------------
# ML-Agents 1.x files (vector_observation, visual_observation_k, buffer sensors as obs_i)
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name,channels_last",
    [
        ("visual-simple", False),
        ("visual-simple", True),
        ("visual-nature_cnn", False),
        ("attention", False),
        ("lstm", False),
    ],
)
def test_onnx_compare_against_a_1x_interface_file(capsys, tmp_path, name, channels_last):
    """The same ML-Agents graph behind the older serializer's inputs: the input shapes (image side,
    entity count) are read from it, its images in the layout it declares, and it is fed correctly."""
    from mlagents_reference import with_legacy_inputs

    legacy = with_legacy_inputs(ZOO / name / f"{KINDS[name][0]}.onnx", tmp_path / "legacy.onnx", channels_last)
    code, result, err = call(
        capsys, "--mode", "onnx-compare", "--model-dir", folder(name), "--onnx", legacy, "--batch", 300
    )
    assert code == 0, err
    assert result["passed"] is True and result["legacy_interface"] is True, result
    if KINDS[name][2]:
        assert result["max_abs_err"] <= CONT_TOL, result["max_abs_err"]
    if KINDS[name][3]:
        assert result["discrete_mismatches"] == 0, result
    code, info, err = call(capsys, "--mode", "info", "--model-dir", folder(name), "--onnx", legacy)
    assert code == 0, err
    shapes = [i["shape"] for i in info["inputs"]]
    assert shapes == [shape for _, shape in KINDS[name][1]], shapes
