"""Observations refused in one line, or read right: --obs values, observation files (.npy, .npz, .csv) damaged,
disguised or holding keys nobody reads, images that are not one upright 8-bit frame; fuzzed parsers. Parquet
files: test_parquet.py; --mask and --memory: test_options.py."""

import io
import re
import struct
import zipfile
import zlib
from pathlib import Path

import numpy as np
import pytest
from conftest import BUNDLED, BUNDLED_PT, EXAMPLES, call, refused, run
from hypothesis import given, settings
from hypothesis import strategies as st

import inference as I
from mlagents_inference.core.inputs import parse_obs

# --- --obs --------------------------------------------------------------------------------------------------


def test_an_input_named_twice_in_obs_is_refused(capsys):
    refused(
        run(capsys, "--mode", "action", "--model-dir", BUNDLED, "--obs", "obs_0=zeros;obs_0=ones"), "obs_0", "twice"
    )
    refused(
        run(
            capsys,
            "--mode",
            "action",
            "--model-dir",
            EXAMPLES / "visual-simple",
            "--obs",
            "obs_0=zeros;obs_1=ones;obs_1=zeros",
        ),
        "obs_1",
        "twice",
    )


# --- observation files --------------------------------------------------------------------------------------


def obs_file_cases(tmp_path):
    good = np.random.RandomState(0).randn(50, 59).astype(np.float32)
    np.save(tmp_path / "wide.npy", np.zeros((5, 60), np.float32))
    bad_row = good.copy()
    bad_row[37, 4] = np.nan
    np.save(tmp_path / "nan_row.npy", bad_row)
    inf_row = good.copy()
    inf_row[3, 0] = np.inf
    np.save(tmp_path / "inf_row.npy", inf_row)
    np.save(tmp_path / "strings.npy", np.array([["a"] * 59]))
    (tmp_path / "text.npy").write_text("not an array")
    np.save(tmp_path / "objects.npy", np.array([{"a": 1}], dtype=object), allow_pickle=True)
    (tmp_path / "bad.csv").write_text("1,2,x\n")
    np.save(tmp_path / "empty.npy", np.zeros((0, 59), np.float32))
    return {
        "wide.npy": "expected [rows, 59]",
        "nan_row.npy": "nan",
        "inf_row.npy": "inf",
        "strings.npy": "expected numbers",
        "text.npy": "not a readable array",
        "objects.npy": "not a readable array",
        "bad.csv": "not a readable array",
        "empty.npy": "no rows",
    }


def test_bad_obs_files_refused_without_output(capsys, tmp_path):
    for name, words in obs_file_cases(tmp_path).items():
        target = tmp_path / f"out_{name}.npy"
        refused(
            call(
                capsys,
                "--mode",
                "batch",
                "--obs-file",
                tmp_path / name,
                "--output",
                target,
                "--chunk",
                "16",
                "--model-dir",
                BUNDLED,
            ),
            words,
        )
        assert not target.exists(), name
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temporary left behind


def test_bad_obs_file_names_the_row_of_the_file(capsys, tmp_path):
    """A bad row is named by its row number in the file, wherever the chunks fall."""
    obs_file_cases(tmp_path)
    for name, row in (("nan_row.npy", 37), ("inf_row.npy", 3)):
        line = refused(
            run(capsys, "--mode", "batch", "--obs-file", tmp_path / name, "--chunk", "16", "--model-dir", BUNDLED)
        )
        assert re.search(rf"\brow {row}\b", line), (name, line)


# --- .npz archives: unknown keys, repeated names, damaged or disguised files --------------------------------


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
    line = refused(
        run(capsys, "--mode", "batch", "--model-dir", BUNDLED, "--obs-file", path, "--output", target),
        repr(extra),
        "action_masks",
        "memory",
        "obs_0",
    )
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
    return {
        "truncated.npz": "not a readable array",
        "bad_crc.npz": "CRC",
        "encrypted.npz": "encrypted",
        "unknown_method.npz": "compression",
        "npy_named.npz": "named .npz",
        "npz_named.npy": "named .npy",
        "raw_member.npz": "not a .npy array",
    }


def test_damaged_or_disguised_obs_files_are_one_line(capsys, tmp_path):
    for name, words in damaged_arrays(tmp_path).items():
        target = tmp_path / f"out_{name}.npz"
        refused(
            run(capsys, "--mode", "batch", "--model-dir", BUNDLED, "--obs-file", tmp_path / name, "--output", target),
            name,
            words,
        )
        assert not target.exists()


def test_an_npz_given_as_an_npy_observation_is_one_line(capsys, tmp_path):
    damaged_arrays(tmp_path)
    refused(
        run(capsys, "--mode", "action", "--model-dir", BUNDLED, "--obs", f"obs_0={tmp_path / 'npz_named.npy'}"),
        "npz_named.npy",
        ".npz archive",
    )


# --- images: one upright 8-bit frame, or refused ------------------------------------------------------------


def png16(path: Path, pixels: np.ndarray) -> Path:
    """A 16-bit RGB or RGBA PNG, written by hand (Pillow cannot write one)."""
    height, width, channels = pixels.shape
    rows = b"".join(b"\x00" + pixels[y].astype(">u2").tobytes() for y in range(height))

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    header = struct.pack(">IIBBBBB", width, height, 16, {3: 2, 4: 6}[channels], 0, 0, 0)
    path.write_bytes(
        b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b"")
    )
    return path


def frames(side: int, n: int = 3) -> list:
    from PIL import Image

    return [Image.fromarray((np.random.RandomState(i).rand(side, side, 3) * 255).astype(np.uint8)) for i in range(n)]


def image_cases(tmp_path: Path) -> dict:
    from PIL import Image

    rng = np.random.RandomState(2)
    out = {
        "rgb16.png": ("visual-simple", "16 bits"),
        "rgba16.png": ("visual-simple", "16 bits"),
        "board16.png": ("visual-match3", "16 bits"),
        "animated_gif.png": ("visual-simple", "3 frames"),
        "animated.png": ("visual-simple", "3 frames"),
        "pages_tiff.png": ("visual-simple", "3 frames"),
        "turned.jpg": ("visual-simple", "EXIF orientation 6"),
    }
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
        code, _, err = run(
            capsys,
            "--mode",
            "action",
            "--model-dir",
            EXAMPLES / "visual-simple",
            "--obs",
            f"obs_0={tmp_path / name};obs_1=zeros",
        )
        assert code == 0, (name, err)


# --- fuzzed parsers -----------------------------------------------------------------------------------------

FUZZ_POLICY = I.load(BUNDLED_PT)


@settings(max_examples=300, deadline=None)
@given(
    text=st.one_of(
        st.text(max_size=80),
        st.lists(st.floats(allow_nan=True, allow_infinity=True, width=64), min_size=1, max_size=70).map(
            lambda xs: ",".join(repr(x) for x in xs)
        ),
    )
)
def test_fuzzed_observations_parse_or_refuse(text):
    try:
        obs = parse_obs(text, FUZZ_POLICY.settings, 0, FUZZ_POLICY.normalizers)
    except I.UsageError as exc:
        assert str(exc).startswith("--obs")
        return
    assert len(obs) == 1 and obs[0].dtype == np.float32 and obs[0].shape == (59,) and np.isfinite(obs[0]).all()


@settings(max_examples=100, deadline=None)
@given(values=st.lists(st.floats(allow_nan=False, allow_infinity=False, width=32), min_size=59, max_size=59))
def test_fuzzed_lists_round_trip(values):
    obs = parse_obs(",".join(repr(v) for v in values), FUZZ_POLICY.settings, 0, FUZZ_POLICY.normalizers)
    assert len(obs) == 1 and np.array_equal(obs[0], np.asarray(values, np.float32))
