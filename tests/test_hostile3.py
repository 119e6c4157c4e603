"""Hostile and unlucky input, round three (issue 20), run in this process: ML-Agents' own ONNX
never overwritten by an export, .npz keys never ignored, damaged arrays, crafted ONNX shapes and
outputs, the stream's per-line failures and memory bounds, the Python API's arguments, images
that are not one upright 8-bit frame, lenient options. Each refusal: exit 2 (1 for "not this
policy") and one line on stderr, an error answer for a stream line, or inference.UsageError.
(Process-boundary cases, signals, the Hub's environment: test_hostile3_env.py.)"""
import io
import json
import os
import shutil
import struct
import zipfile
import zlib
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import BUNDLED, EXAMPLES, ort_deterministic

import inference as I
from mlagents_inference.core.observations import AgentMemories, check_rows_fit
from mlagents_inference.core.spec import InputSpec, PolicySettings
from mlagents_inference.core import observations as context
from mlagents_inference.services.protocol import stream_answer

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def run(capsys, *args):
    """main() in this process: (exit code, stdout, stderr)."""
    code = I.main([str(a) for a in args])
    out, err = capsys.readouterr()
    return code, out, err


def one_line(err: str, *words) -> str:
    lines = [l for l in err.strip().splitlines() if l.strip()]
    assert len(lines) == 1 and "Traceback" not in err, err
    for word in words:
        assert word in err, (word, err)
    return lines[0]


def refused(result, *words) -> str:
    code, _, err = result
    assert code == 2, (code, err)
    return one_line(err, *words)


def copy_run(src: Path, tmp_path: Path, name: str = "run") -> Path:
    return Path(shutil.copytree(src, tmp_path / name))


def leftovers(folder: Path) -> list:
    return sorted(p.name for p in folder.rglob(".*tmp*"))


# --- 1. export-onnx never replaces the ML-Agents ONNX it is verified against -----------------------

def test_export_onto_the_mlagents_onnx_of_the_checkpoint_is_refused(capsys, tmp_path):
    """Huggy-like: every input normalised, so loading never reads the ONNX beside the checkpoint."""
    run_dir = copy_run(BUNDLED, tmp_path)
    theirs = [run_dir / "Huggy" / "Huggy-600017.onnx", run_dir / "Huggy.onnx"]
    before = {p: p.read_bytes() for p in theirs}
    os.link(theirs[0], tmp_path / "hard_link.onnx")
    (tmp_path / "sym_link.onnx").symlink_to(theirs[1])
    targets = theirs + [run_dir / "Huggy" / ".." / "Huggy.onnx", tmp_path / "hard_link.onnx", tmp_path / "sym_link.onnx"]
    for target in targets:
        for source in (("--model-dir", run_dir), ("--checkpoint", run_dir / "Huggy" / "Huggy-600017.pt")):
            refused(run(capsys, "--mode", "export-onnx", *source, "--output", target), "input file", "--output")
    assert {p: p.read_bytes() for p in theirs} == before
    assert leftovers(tmp_path) == []
    code, out, err = run(capsys, "--mode", "onnx-compare", "--model-dir", run_dir)  # still compared with ML-Agents' file
    assert code == 0, err


def test_export_beside_the_mlagents_onnx_still_writes(capsys, tmp_path):
    run_dir = copy_run(BUNDLED, tmp_path)
    target = run_dir / "Huggy" / "Huggy-rebuilt.onnx"
    code, _, err = run(capsys, "--mode", "export-onnx", "--model-dir", run_dir, "--output", target)
    assert code == 0 and target.is_file(), err
    obs = np.random.RandomState(5).randn(16, 59).astype(np.float32)
    ours, theirs = ort_deterministic(target, obs), ort_deterministic(run_dir / "Huggy" / "Huggy-600017.onnx", obs)
    assert np.abs(ours - theirs).max() < 1e-5


# --- 2. and 7. .npz archives: unknown keys, repeated names, damaged or disguised files -------------

def npz_member(array) -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, array)
    return buffer.getvalue()


OBS = np.random.RandomState(0).randn(4, 59).astype(np.float32)


@pytest.mark.parametrize("extra", ["action_mask", "memories", "obs_5", "../../x", "obs_0 "])
def test_npz_with_an_unknown_key_is_refused_naming_it(capsys, tmp_path, extra):
    path = tmp_path / "in.npz"
    np.savez(path, **{"obs_0": OBS, extra: np.ones((4, 2), np.float32)})
    target = tmp_path / "out.npz"
    line = refused(run(capsys, "--mode", "batch", "--model-dir", BUNDLED, "--obs-file", path, "--output", target),
                   repr(extra), "action_masks", "memory", "obs_0")
    assert "unknown" in line
    assert not target.exists()


def test_npz_memories_key_of_a_memory_policy_is_refused(capsys, tmp_path):
    """The LSTM would have started from zeros with the memory under the wrong name ignored."""
    path = tmp_path / "in.npz"
    np.savez(path, obs_0=np.zeros((3, 10), np.float32), memories=np.ones((3, 32), np.float32))
    refused(run(capsys, "--mode", "batch", "--model-dir", EXAMPLES / "lstm", "--obs-file", path), "'memories'")
    np.savez(path, obs_0=np.zeros((3, 10), np.float32), memory=np.ones((3, 32), np.float32))
    assert run(capsys, "--mode", "batch", "--model-dir", EXAMPLES / "lstm", "--obs-file", path)[0] == 0


def test_npz_with_a_name_held_twice_is_refused(capsys, tmp_path):
    path = tmp_path / "twice.npz"
    with pytest.warns(UserWarning), zipfile.ZipFile(path, "w") as archive:  # (zipfile warns, and writes it)
        archive.writestr("obs_0.npy", npz_member(OBS))
        archive.writestr("obs_0.npy", npz_member(OBS * 2))
    refused(run(capsys, "--mode", "batch", "--model-dir", BUNDLED, "--obs-file", path), "obs_0.npy", "more than once")


def damaged_arrays(tmp_path: Path) -> dict:
    np.savez(tmp_path / "good.npz", obs_0=OBS)
    good = (tmp_path / "good.npz").read_bytes()
    local, central = good.find(b"PK\x03\x04"), good.find(b"PK\x01\x02")
    cases = {"truncated.npz": good[: len(good) // 2]}
    crc = bytearray(good)
    crc[local + 30 + len("obs_0.npy") + 200] ^= 0xFF  # a byte of the array's data
    cases["bad_crc.npz"] = bytes(crc)
    encrypted = bytearray(good)
    encrypted[local + 6] |= 1  # general purpose flag bit 0: encrypted
    encrypted[central + 8] |= 1
    cases["encrypted.npz"] = bytes(encrypted)
    method = bytearray(good)
    method[local + 8], method[central + 10] = 99, 99  # compression method 99 (AES), unsupported
    cases["unknown_method.npz"] = bytes(method)
    buffer = io.BytesIO()
    np.save(buffer, OBS)
    cases["npy_named.npz"] = buffer.getvalue()
    cases["npz_named.npy"] = good
    raw = io.BytesIO()
    with zipfile.ZipFile(raw, "w") as archive:
        archive.writestr("obs_0.npy", b"not an array")
    cases["raw_member.npz"] = raw.getvalue()
    for name, data in cases.items():
        (tmp_path / name).write_bytes(data)
    return {"truncated.npz": "not a readable array", "bad_crc.npz": "CRC", "encrypted.npz": "encrypted",
            "unknown_method.npz": "compression", "npy_named.npz": "named .npz", "npz_named.npy": "named .npy",
            "raw_member.npz": "not a .npy array"}


def test_damaged_or_disguised_obs_files_are_one_line(capsys, tmp_path):
    for name, words in damaged_arrays(tmp_path).items():
        target = tmp_path / f"out_{name}.npz"
        refused(run(capsys, "--mode", "batch", "--model-dir", BUNDLED, "--obs-file", tmp_path / name,
                    "--output", target), name, words)
        assert not target.exists()


def test_an_npz_given_as_an_npy_observation_is_one_line(capsys, tmp_path):
    damaged_arrays(tmp_path)
    refused(run(capsys, "--mode", "action", "--model-dir", BUNDLED, "--obs", f"obs_0={tmp_path / 'npz_named.npy'}"),
            "npz_named.npy", ".npz archive")


# --- 3. and 4. the stream: one line's failure is its answer; memory per id bounded in bytes --------

@pytest.fixture(scope="module")
def lstm_policy():
    return I.load(EXAMPLES / "lstm")


@pytest.fixture(scope="module")
def attention_policy():
    return I.load(EXAMPLES / "attention")


def attention_line(rows: int, ident) -> dict:
    return {"obs_0": [[[0.5] * 5] * 6] * rows, "obs_1": [[0.2] * 8] * rows, "id": ident}


@pytest.mark.parametrize("failure", [MemoryError(), RuntimeError("DefaultCPUAllocator: can't allocate memory"),
                                     RuntimeError("[ONNXRuntimeError] : 6 : RUNTIME_EXCEPTION : something else")])
def test_an_engine_failure_on_one_line_is_that_lines_answer(attention_policy, monkeypatch, failure):
    memories = AgentMemories()
    good = stream_answer(attention_policy, attention_line(2, "a"), memories)
    calls = []

    def fail_once(flat, names=None):
        calls.append(1)
        raise failure
    with monkeypatch.context() as patch:
        patch.setattr(attention_policy.engine, "run", fail_once)
        with pytest.raises(I.UsageError) as info:
            stream_answer(attention_policy, attention_line(2, "a"), memories)
    assert calls and "failed on this line" in str(info.value)
    if not str(failure) or "alloc" in str(failure):
        assert "out of memory" in str(info.value)
    assert stream_answer(attention_policy, attention_line(2, "a"), memories) == good


def test_a_line_with_more_rows_than_memory_allows_is_refused(attention_policy, monkeypatch):
    monkeypatch.setattr(context, "available_memory", lambda: 64 << 20)
    with pytest.raises(I.UsageError, match="would need about .* GiB"):
        stream_answer(attention_policy, attention_line(3000, 1), AgentMemories())
    assert "discrete_actions" in stream_answer(attention_policy, attention_line(3, 1), AgentMemories())


def test_the_entity_attention_counts_in_the_memory_estimate(attention_policy, monkeypatch):
    """4 heads of N x N scores per row: a buffer of N entities needs more than N times one entity."""
    monkeypatch.setattr(context, "available_memory", lambda: 1 << 40)
    s = attention_policy.settings
    many = PolicySettings([InputSpec("obs_0", "entities", (4000, 5))] + s.inputs[1:], s.hidden_units,
                            s.num_layers, s.normalize, discrete_branches=s.discrete_branches)
    with pytest.raises(I.UsageError, match="GiB"):
        check_rows_fit(10_000, many, "per line")  # 10,000 x 4 x 4000^2 floats: 2.5 TB


def test_a_long_id_is_refused_and_the_stream_answers_on(lstm_policy):
    memories = AgentMemories()
    line = {"obs": [0.1] * 10}
    with pytest.raises(I.UsageError, match="longer than 256"):
        stream_answer(lstm_policy, {**line, "id": "x" * 257}, memories)
    assert len(memories) == 0
    assert "memory" in stream_answer(lstm_policy, {**line, "id": "x" * 256}, memories)
    assert list(memories) == [json.dumps("x" * 256)]


def test_a_long_id_is_not_echoed(capsys, monkeypatch):
    """A refused 1 MB id is answered with "id": null, not sent back."""
    long_id = "x" * 1_000_000
    lines = [json.dumps({"obs": [0.1] * 10, "id": long_id}), json.dumps({"obs": [0.1] * 10, "id": "ok"})]
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(("\n".join(lines) + "\n").encode())))
    code, out, err = run(capsys, "--mode", "stream", "--model-dir", EXAMPLES / "lstm")
    answers = [json.loads(line) for line in out.splitlines()]
    assert code == 0 and len(out) < 10_000, err
    assert answers[0] == {"id": None, "error": '"id" is longer than 256 characters'}
    assert answers[1]["id"] == "ok" and "discrete_actions" in answers[1]


def test_stream_memory_is_bounded_in_bytes(lstm_policy):
    """Batch ids of 200 rows (200 x 32 floats = 25.6 kB each) against a 256 kB budget: the bytes
    kept never pass it; the id answered last is always kept."""
    memories = AgentMemories(max_ids=1000, max_bytes=256 << 10)
    batch = {"obs": [[0.1] * 10] * 200}
    for i in range(40):
        stream_answer(lstm_policy, {**batch, "id": i}, memories)
        kept = sum(len(k) + v.nbytes for k, v in memories.items())
        assert kept <= memories.max_bytes and memories.nbytes >= kept
        assert json.dumps(i) in memories
    assert 5 <= len(memories) < 11


def test_stream_memory_drops_the_least_recently_answered_id(lstm_policy):
    memories = AgentMemories(max_ids=3)
    line = {"obs": [0.1] * 10}
    for ident in ["a", "b", "c", "a", "d"]:  # "a" answered again: "b" is the oldest when "d" comes
        stream_answer(lstm_policy, {**line, "id": ident}, memories)
    assert list(memories) == ['"c"', '"a"', '"d"']


# --- 5. load(onnx=...) takes a regular file only (a FIFO would block for ever) ---------------------

@pytest.mark.parametrize("kind", ["folder", "absent", "device"])
def test_load_with_an_onnx_that_is_not_a_regular_file(tmp_path, kind):
    """(A FIFO, which would block this process for ever if opened: test_hostile3_env.)"""
    target = {"folder": tmp_path, "absent": tmp_path / "x.onnx", "device": Path("/dev/null")}[kind]
    words = {"folder": "is a folder", "absent": "no such file", "device": "not a regular file"}[kind]
    with pytest.raises(I.UsageError, match=words):
        I.load(EXAMPLES / "vector", onnx=target)


# --- 6. crafted ONNX shapes and outputs -------------------------------------------------------------

def crafted_attention(tmp_path: Path, entities: int) -> Path:
    import onnx
    folder = copy_run(EXAMPLES / "attention", tmp_path, f"attention_{entities}")
    model = onnx.load(str(folder / "Attention.onnx"))
    model.graph.input[0].type.tensor_type.shape.dim[1].dim_value = entities  # obs_0: [batch, entities, 5]
    onnx.save(model, str(folder / "Attention.onnx"))
    return folder


@pytest.mark.parametrize("entities", [0, -3, 100_000])
def test_crafted_entity_counts_are_one_line(capsys, tmp_path, entities):
    folder = crafted_attention(tmp_path, entities)
    refused(run(capsys, "--mode", "export-onnx", "--model-dir", folder, "--output", tmp_path / "out.onnx"),
            "Attention.onnx", f"[{entities}, 5]")
    assert not (tmp_path / "out.onnx").exists()


def test_an_entity_count_of_a_billion_is_refused_before_anything_is_allocated(tmp_path):
    with pytest.raises(I.UsageError, match="more than 4096 entities"):
        I.load(crafted_attention(tmp_path, 10**9), engine="torch")


def wider_outputs(tmp_path: Path) -> Path:
    """The vector example's ONNX, its deterministic actions concatenated with themselves: [batch, 4]."""
    import onnx
    from onnx import helper
    model = onnx.load(str(EXAMPLES / "vector" / "Vector.onnx"))
    name = "deterministic_continuous_actions"
    for node in model.graph.node:
        node.output[:] = ["inner" if o == name else o for o in node.output]
    model.graph.node.append(helper.make_node("Concat", ["inner", "inner"], [name], axis=1))
    onnx.save(model, str(tmp_path / "wide.onnx"))
    return tmp_path / "wide.onnx"


def test_a_reference_with_wider_outputs_is_not_this_policy(capsys, tmp_path):
    wide = wider_outputs(tmp_path)
    code, out, err = run(capsys, "--mode", "onnx-compare", "--model-dir", EXAMPLES / "vector", "--onnx", wide, "--json")
    result = json.loads(out)
    assert code == 1 and not result["passed"] and "[64, 4]" in result["not_this_policy"], (out, err)
    assert "Traceback" not in err
    code, out, err = run(capsys, "--mode", "export-onnx", "--model-dir", EXAMPLES / "vector", "--onnx", wide,
                         "--output", tmp_path / "out.onnx", "--json")  # named with --onnx: a failure, never "no ONNX"
    result = json.loads(out)
    assert code == 1 and not result["passed"] and "[64, 4]" in result["not_this_policy"], (out, err)
    assert not (tmp_path / "out.onnx").exists()


def legacy_vector_onnx(tmp_path: Path, name: str = "legacy.onnx", mu_only: bool = False) -> Path:
    """The vector example's ONNX with ML-Agents 1.x's input (vector_observation); `mu_only`: without
    the deterministic outputs either, as 1.x files were (the reference then reads mu)."""
    import onnx
    from mlagents_reference import with_legacy_inputs
    path = with_legacy_inputs(EXAMPLES / "vector" / "Vector.onnx", tmp_path / name)
    if mu_only:
        model = onnx.load(str(path))
        kept = [o for o in model.graph.output if not o.name.startswith("deterministic_")]
        del model.graph.output[:]
        model.graph.output.extend(kept)
        onnx.save(model, str(path))
    return path


def test_a_legacy_input_declared_1e12_wide_is_one_line(capsys, tmp_path):
    import onnx
    path = legacy_vector_onnx(tmp_path)
    model = onnx.load(str(path))
    model.graph.input[0].type.tensor_type.shape.dim[1].dim_value = 10**12
    onnx.save(model, str(path))
    refused(run(capsys, "--mode", "onnx-compare", "--model-dir", EXAMPLES / "vector", "--onnx", path), "legacy.onnx")


@pytest.mark.parametrize("where", ["outside", "absolute", "missing"])
def test_legacy_onnx_with_external_data_it_cannot_read_is_one_line(capsys, tmp_path, where):
    import onnx
    legacy = legacy_vector_onnx(tmp_path, mu_only=True)
    assert run(capsys, "--mode", "onnx-compare", "--model-dir", EXAMPLES / "vector", "--onnx", legacy)[0] == 0
    folder = tmp_path / "model"
    folder.mkdir()
    model = onnx.load(str(legacy))
    onnx.save(model, str(folder / "x.onnx"), save_as_external_data=True, all_tensors_to_one_file=True,
              location="x.bin", size_threshold=0)
    shutil.copy(folder / "x.bin", tmp_path / "outside.bin")
    location = {"outside": "../outside.bin", "absolute": str(tmp_path / "outside.bin"), "missing": "gone.bin"}[where]
    model = onnx.load(str(folder / "x.onnx"), load_external_data=False)
    for tensor in model.graph.initializer:
        for entry in tensor.external_data:
            if entry.key == "location":
                entry.value = location
    onnx.save(model, str(folder / "x.onnx"))
    refused(run(capsys, "--mode", "onnx-compare", "--model-dir", EXAMPLES / "vector", "--onnx", folder / "x.onnx"),
            "x.onnx")


def test_a_zero_width_legacy_slice_is_no_phantom_input(capsys, tmp_path):
    import onnx
    from onnx import helper
    run_dir = copy_run(EXAMPLES / "vector", tmp_path)
    path = legacy_vector_onnx(tmp_path)
    model = onnx.load(str(path))
    model.graph.node.insert(0, helper.make_node("Slice", ["vector_observation"], ["nothing"], axes=[1], starts=[8],
                                                ends=[8]))
    onnx.save(model, str(run_dir / "Vector.onnx"))
    (run_dir / "Vector" / "Vector-50000.onnx").unlink(missing_ok=True)
    line = refused(run(capsys, "--mode", "info", "--model-dir", run_dir), "Vector.onnx", "[0]")
    assert "obs_1" not in line


# --- 8. the Python API's arguments ---------------------------------------------------------------------

@pytest.fixture(scope="module")
def huggy():
    return I.load(BUNDLED)


X = np.random.RandomState(1).randn(59).astype(np.float32)


@pytest.mark.parametrize("kwargs,words", [
    ({"deterministic": "false"}, "deterministic"), ({"deterministic": None}, "deterministic"),
    ({"deterministic": False, "seed": 2**70}, "seed"), ({"deterministic": False, "seed": 1.5}, "seed"),
    ({"deterministic": False, "seed": "3"}, "seed"), ({"deterministic": False, "generator": 123}, "generator"),
])
def test_act_arguments_are_usage_errors(huggy, kwargs, words):
    with pytest.raises(I.UsageError, match=words):
        huggy.act(X, **kwargs)


def test_act_with_input_names_that_are_not_text(huggy):
    with pytest.raises(I.UsageError, match="input names"):
        huggy.act({0: X})
    with pytest.raises(I.UsageError, match="input names"):
        huggy.act({"obs_0": X, 1: X})


def test_tensors_are_taken_as_cpu_arrays(huggy):
    """A tensor that requires grad (or a float64, a bfloat16 one) gives the numpy answer."""
    want = huggy.act(X)["continuous_actions"]
    reference = ort_deterministic(BUNDLED / "Huggy" / "Huggy-600017.onnx", X[None])[0]
    assert np.abs(want - reference).max() < 1e-5
    for value in (torch.tensor(X, requires_grad=True), {"obs_0": torch.tensor(X, dtype=torch.float64)},
                  [torch.tensor(X)]):
        assert np.array_equal(huggy.act(value)["continuous_actions"], want)
    rows = torch.tensor(np.stack([X, X]), requires_grad=True)
    assert np.array_equal(huggy.act(rows)["continuous_actions"], np.stack([want, want]))
    sampled = huggy.act(X, deterministic=np.bool_(False), seed=np.int64(3))["continuous_actions"]
    assert np.array_equal(sampled, huggy.act(X, deterministic=False, seed=3)["continuous_actions"])
    generated = huggy.act(X, deterministic=False, generator=torch.Generator().manual_seed(3))["continuous_actions"]
    assert np.array_equal(generated, sampled)


@pytest.mark.parametrize("kwargs,words", [
    ({"path": None}, "path None"), ({"path": 123}, "path 123"), ({"path": ""}, "path"),
    ({"device": torch.device("meta")}, "meta"), ({"device": None}, "device None"),
    ({"engine": "bogus"}, "engine 'bogus'"), ({"engine": "Torch"}, "engine 'Torch'"), ({"engine": None}, "engine"),
    ({"dtype": "float8"}, "dtype"), ({"dtype": torch.float32}, "dtype"), ({"expect_sha256": 5}, "expect_sha256"),
])
def test_load_arguments_are_usage_errors(kwargs, words):
    kwargs = {"path": BUNDLED, **kwargs}
    with pytest.raises(I.UsageError, match=words.replace("(", r"\(")):
        I.load(**kwargs)


@pytest.mark.skipif(torch.cuda.is_available(), reason="a host with a CUDA GPU")
def test_load_on_an_absent_gpu_is_a_usage_error():
    with pytest.raises(I.UsageError, match="no CUDA GPU"):
        I.load(BUNDLED, device=torch.device("cuda:0"))


def test_an_unknown_engine_name_is_not_taken_as_auto(huggy):
    with pytest.raises(I.UsageError, match="engine"):
        I.Policy(huggy.checkpoint, "cpu", "float32", "ONNXRUNTIME")


# --- 10. images: one upright 8-bit frame, or refused ------------------------------------------------

def png16(path: Path, pixels: np.ndarray) -> Path:
    """A 16-bit RGB or RGBA PNG, written by hand (Pillow cannot write one)."""
    height, width, channels = pixels.shape
    rows = b"".join(b"\x00" + pixels[y].astype(">u2").tobytes() for y in range(height))

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)
    header = struct.pack(">IIBBBBB", width, height, 16, {3: 2, 4: 6}[channels], 0, 0, 0)
    path.write_bytes(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(rows))
                     + chunk(b"IEND", b""))
    return path


def frames(side: int, n: int = 3) -> list:
    from PIL import Image
    return [Image.fromarray((np.random.RandomState(i).rand(side, side, 3) * 255).astype(np.uint8)) for i in range(n)]


def image_cases(tmp_path: Path) -> dict:
    from PIL import Image
    rng = np.random.RandomState(2)
    out = {"rgb16.png": ("visual-simple", "16 bits"), "rgba16.png": ("visual-simple", "16 bits"),
           "board16.png": ("visual-match3", "16 bits"), "animated_gif.png": ("visual-simple", "3 frames"),
           "animated.png": ("visual-simple", "3 frames"), "pages_tiff.png": ("visual-simple", "3 frames"),
           "turned.jpg": ("visual-simple", "EXIF orientation 6")}
    png16(tmp_path / "rgb16.png", (rng.rand(36, 36, 3) * 65535).astype(np.uint16))
    png16(tmp_path / "rgba16.png", (rng.rand(36, 36, 4) * 65535).astype(np.uint16))
    png16(tmp_path / "board16.png", (rng.rand(6, 6, 4) * 65535).astype(np.uint16))
    first, *rest = frames(36)
    first.save(tmp_path / "animated_gif.png", format="GIF", save_all=True, append_images=rest)
    first.save(tmp_path / "animated.png", format="PNG", save_all=True, append_images=rest)
    first.save(tmp_path / "pages_tiff.png", format="TIFF", save_all=True, append_images=rest)
    exif = Image.Exif()
    exif[0x0112] = 6  # rotated 90 degrees clockwise for display
    first.save(tmp_path / "turned.jpg", exif=exif.tobytes())
    return out


def test_images_that_are_not_one_upright_8bit_frame_are_refused(capsys, tmp_path):
    for name, (example, words) in image_cases(tmp_path).items():
        value = f"obs_0={tmp_path / name};obs_1=zeros"
        refused(run(capsys, "--mode", "action", "--model-dir", EXAMPLES / example, "--obs", value), name, words)


def test_plain_images_still_read(capsys, tmp_path):
    from PIL import Image
    first = frames(36, 1)[0]
    first.save(tmp_path / "plain.png")
    exif = Image.Exif()
    exif[0x0112] = 1  # upright
    first.save(tmp_path / "upright.jpg", exif=exif.tobytes())
    for name in ("plain.png", "upright.jpg"):
        code, _, err = run(capsys, "--mode", "action", "--model-dir", EXAMPLES / "visual-simple",
                           "--obs", f"obs_0={tmp_path / name};obs_1=zeros")
        assert code == 0, (name, err)


# --- 12. misleading or lenient ---------------------------------------------------------------------

def test_an_unusable_onnx_beside_the_checkpoint_says_why(capsys, tmp_path):
    run_dir = copy_run(EXAMPLES / "visual-simple", tmp_path)
    shutil.copy(EXAMPLES / "vector" / "Vector.onnx", run_dir / "VisualSimple.onnx")  # another policy's ONNX
    code, out, err = run(capsys, "--mode", "info", "--model-dir", run_dir, "--json")
    source = json.loads(out)["settings_source"]
    assert code == 0 and "VisualSimple.onnx not used" in source and "[[8]]" in source, source
    assert "no ML-Agents ONNX beside it" not in source
    run_dir = copy_run(EXAMPLES / "attention", tmp_path, "attention")
    shutil.copy(EXAMPLES / "vector" / "Vector.onnx", run_dir / "Attention.onnx")
    line = refused(run(capsys, "--mode", "info", "--model-dir", run_dir), "Attention.onnx not used", "--onnx")
    assert "beside it or pass" not in line


def test_the_checkpoint_decides_the_trainer_not_the_configuration(capsys, tmp_path):
    run_dir = copy_run(EXAMPLES / "vector", tmp_path)
    config = run_dir / "configuration.yaml"
    assert "trainer_type: ppo" in config.read_text()
    config.write_text(config.read_text().replace("trainer_type: ppo", "trainer_type: sac"))
    code, out, err = run(capsys, "--mode", "info", "--model-dir", run_dir, "--json")
    assert code == 0 and json.loads(out)["trainer"] == "ppo", err


@pytest.mark.parametrize("option,mode", [("--output", "batch"), ("--output", "export-onnx"), ("--plot", "benchmark")])
def test_an_output_name_ending_in_a_slash_is_refused(capsys, tmp_path, option, mode):
    suffix = {"batch": ".npy", "export-onnx": ".onnx", "benchmark": ".png"}[mode]
    target = f"{tmp_path / ('x' + suffix)}/"
    refused(run(capsys, "--mode", mode, "--model-dir", BUNDLED, option, target, "--runs", "1") if mode == "benchmark"
            else run(capsys, "--mode", mode, "--model-dir", BUNDLED, option, target), "names a folder", option)
    assert list(tmp_path.iterdir()) == []


def test_an_input_named_twice_in_obs_is_refused(capsys):
    refused(run(capsys, "--mode", "action", "--model-dir", BUNDLED, "--obs", "obs_0=zeros;obs_0=ones"), "obs_0", "twice")
    refused(run(capsys, "--mode", "action", "--model-dir", EXAMPLES / "visual-simple",
                "--obs", "obs_0=zeros;obs_1=ones;obs_1=zeros"), "obs_1", "twice")


def test_empty_items_in_mask_and_memory_are_refused(capsys):
    lstm = EXAMPLES / "lstm"  # discrete [4], memory 32
    zeros = ",".join(["0"] * 32)
    refused(run(capsys, "--mode", "action", "--model-dir", lstm, "--mask", "1,,1,1,1"), "--mask", "empty item")
    refused(run(capsys, "--mode", "action", "--model-dir", lstm, "--memory", "0,," + zeros[4:]), "--memory", "empty item")
    for args in (("--mask", "1,0,1,1,"), ("--memory", zeros + ","), ("--mask", "1,0,1,1")):  # one trailing comma is fine
        code, _, err = run(capsys, "--mode", "action", "--model-dir", lstm, *args)
        assert code == 0, (args, err)
