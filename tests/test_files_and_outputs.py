"""Files written and files read. What the program writes: an existing output is never damaged and no temporary file
is left (a failed export or batch, a full disk, a signal: test_signals_and_stdio.py), the output is never an input
(the file, a file inside an input folder, a link to either, ML-Agents' own ONNX), new files get the umask's mode,
suffixes that are not lower case, output names that are folders or under /proc and /sys. What it reads: paths too
long or holding control characters, unreadable files (as an unprivileged user), files that are not regular files
(a FIFO never blocks). Each refusal: exit 2 and one line on stderr.

Tests that need root (tmpfs for a real full disk, setpriv for an unprivileged user) skip elsewhere; they run the
program in a process of its own, the rest through inference.main([...]) in this process."""

from __future__ import annotations

import errno
import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import (
    BUNDLED,
    EXAMPLES,
    ROOT,
    call,
    child_env,
    cli,
    copy_run,
    fixed,
    huggy_obs,
    leftovers,
    ort_deterministic,
    refused,
    run,
)

import inference as I
from mlagents_inference.core.files import atomic_write, npy_size, open_npy_memmap, refuse_same_file
from mlagents_inference.fronts import cli as command_line

LONG = "x" * 300  # one path component longer than NAME_MAX (255)


@pytest.fixture()
def umask():
    """Set the process umask inside a test; restored after."""
    old = os.umask(0o022)
    os.umask(old)
    yield lambda value: os.umask(value)
    os.umask(old)


# --- an existing output is never damaged, no temporary is left ----------------------------------------------


def test_failed_batch_keeps_existing_output(capsys, tmp_path):
    bad_row = np.random.RandomState(0).randn(50, 59).astype(np.float32)
    bad_row[37, 4] = np.nan
    np.save(tmp_path / "nan_row.npy", bad_row)
    target = tmp_path / "precious.npy"
    target.write_bytes(b"keep me")
    refused(
        call(
            capsys,
            "--mode",
            "batch",
            "--obs-file",
            tmp_path / "nan_row.npy",
            "--output",
            target,
            "--chunk",
            "8",
            "--model-dir",
            BUNDLED,
        ),
        "row 37",
    )
    assert target.read_bytes() == b"keep me" and leftovers(tmp_path) == []


def test_export_failing_half_way_leaves_existing_file(capsys, tmp_path, monkeypatch):
    target = tmp_path / "model.onnx"
    target.write_bytes(b"previous export")
    real_write_bytes = Path.write_bytes

    def half_then_fail(path, data):
        real_write_bytes(path, bytes(data)[:1000])
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(Path, "write_bytes", half_then_fail)
    refused(
        run(capsys, "--mode", "export-onnx", "--model-dir", BUNDLED, "--output", target),
        "model.onnx",
        "not written",
        os.strerror(errno.ENOSPC),
        "unchanged",
    )
    monkeypatch.undo()
    assert target.read_bytes() == b"previous export"
    assert [p.name for p in tmp_path.iterdir()] == ["model.onnx"]


def test_reservation_failure_is_clean(tmp_path, monkeypatch):
    """Any machine: posix_fallocate says the disk is full -> UsageError, old file intact,
    nothing left, the writer never called."""
    target = tmp_path / "out.npy"
    target.write_bytes(b"keep me")

    def full(fd, offset, length):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "posix_fallocate", full)
    called = []
    with pytest.raises(I.UsageError, match="No space left on device") as info:
        atomic_write(target, lambda tmp: called.append(tmp), size=10**6)
    assert "\n" not in str(info.value) and ".tmp" not in str(info.value)
    assert not called and target.read_bytes() == b"keep me" and leftovers(tmp_path) == []


def test_writer_os_error_is_a_usage_error(tmp_path):
    target = tmp_path / "out.npy"
    target.write_bytes(b"keep me")

    def half_then_full(tmp):
        Path(tmp).write_bytes(b"half")
        raise OSError(errno.EDQUOT, "Disk quota exceeded", str(tmp))

    with pytest.raises(I.UsageError, match="Disk quota exceeded"):
        atomic_write(target, half_then_full)
    assert target.read_bytes() == b"keep me" and leftovers(tmp_path) == []


def test_open_npy_memmap_round_trip(tmp_path):
    for shape in ((7, 3), (0, 3)):
        target = tmp_path / f"m{shape[0]}.npy"

        def write(tmp):
            out = open_npy_memmap(tmp, shape, np.float32)
            out[:] = np.arange(np.prod(shape), dtype=np.float32).reshape(shape)
            if isinstance(out, np.memmap):
                out.flush()
            del out

        atomic_write(target, write, size=npy_size(shape, np.float32))
        assert np.array_equal(np.load(target), np.arange(np.prod(shape), dtype=np.float32).reshape(shape))
        assert target.stat().st_size == npy_size(shape, np.float32)


# --- a real full disk (root: a 1 MiB tmpfs) -----------------------------------------------------------------


@pytest.fixture()
def full_disk(tmp_path):
    """A real 1 MiB tmpfs (root only), unmounted after."""
    if os.geteuid() != 0 or not shutil.which("mount"):
        pytest.skip("needs root to mount a tmpfs")
    mnt = tmp_path / "full"
    mnt.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mnt)], capture_output=True).returncode:
        pytest.skip("cannot mount a tmpfs here")
    try:
        yield mnt
    finally:
        if subprocess.run(["umount", str(mnt)], capture_output=True).returncode:
            subprocess.run(["umount", "-l", str(mnt)], capture_output=True)


def assert_full_disk_refused(result, mnt):
    """A finished process or run()'s (code, out, err): exit 2 (not 135, SIGBUS; not 1, a traceback) and one line."""
    refused(result, "No space left on device")
    assert "SUCCESS" not in (result.stdout if hasattr(result, "stdout") else result[1])
    assert (mnt / "out.npy").read_bytes() == b"keep me" if (mnt / "out.npy").exists() else True
    assert leftovers(mnt) == []


def test_full_disk_in_memory_batch(capsys, full_disk):
    (full_disk / "out.npy").write_bytes(b"keep me")
    result = run(capsys, "--mode", "batch", "--batch", 20000, "--output", full_disk / "out.npy", "--model-dir", BUNDLED)
    assert_full_disk_refused(result, full_disk)
    assert (full_disk / "out.npy").read_bytes() == b"keep me"


def test_full_disk_export_onnx(capsys, full_disk):
    (full_disk / "model.onnx").write_bytes(b"keep me")
    refused(
        run(capsys, "--mode", "export-onnx", "--output", full_disk / "model.onnx", "--model-dir", BUNDLED),
        "No space left on device",
    )
    assert (full_disk / "model.onnx").read_bytes() == b"keep me" and leftovers(full_disk) == []


def test_full_disk_memory_mapped_file_batch(full_disk, tmp_path):
    """The file batch writes through a memory map: without its space reserved first, a full
    disk is a SIGBUS (exit -7 / 135) that leaves the temporary file behind. Needs batch_file to
    write through open_npy_memmap (not np.lib.format.open_memmap, which makes a sparse file). (A process of its
    own: a SIGBUS would end this one.)"""
    obs = np.lib.format.open_memmap(tmp_path / "in.npy", mode="w+", dtype=np.float32, shape=(20000, 59))
    del obs  # 20000 x 21 float32 actions = 1.7 MB > 1 MiB
    (full_disk / "out.npy").write_bytes(b"keep me")
    result = cli(
        "--mode", "batch", "--obs-file", tmp_path / "in.npy", "--output", full_disk / "out.npy", "--model-dir", BUNDLED
    )
    assert_full_disk_refused(result, full_disk)
    assert (full_disk / "out.npy").read_bytes() == b"keep me"


# --- the output is never an input ---------------------------------------------------------------------------


def test_output_onto_the_input_is_refused(capsys, tmp_path):
    source = tmp_path / "in.npy"
    np.save(source, np.random.RandomState(0).randn(8, 59).astype(np.float32))
    original = source.read_bytes()
    (tmp_path / "link.npy").symlink_to(source)
    os.link(source, tmp_path / "hard.npy")
    (tmp_path / "sub").mkdir()
    for output in (source, tmp_path / "link.npy", tmp_path / "hard.npy", tmp_path / "sub" / ".." / "in.npy"):
        refused(
            run(capsys, "--mode", "batch", "--obs-file", source, "--output", output, "--model-dir", BUNDLED),
            "is the input file",
        )
        assert source.read_bytes() == original
    refused(
        run(capsys, "--mode", "batch", "--obs-file", tmp_path / "link.npy", "--output", source, "--model-dir", BUNDLED),
        "is the input file",
    )
    assert source.read_bytes() == original
    assert leftovers(tmp_path) == []


def test_refuse_same_file_helper(tmp_path):
    a, b = tmp_path / "a.npy", tmp_path / "b.npy"
    a.write_bytes(b"a")
    refuse_same_file(b, [a])  # different, and b does not exist yet
    refuse_same_file(None, [a])
    with pytest.raises(I.UsageError, match="is the input file"):
        refuse_same_file(a, [b, a])


def test_output_inside_an_input_folder_or_behind_a_link_is_refused(capsys, tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    pq.write_table(pa.table({"obs": fixed(huggy_obs(50))}), data / "a.parquet")
    pq.write_table(pa.table({"obs": fixed(huggy_obs(30, 1))}), tmp_path / "real.parquet")
    (data / "b.parquet").symlink_to(tmp_path / "real.parquet")  # an input of the folder, stored outside it
    (tmp_path / "to_a.parquet").symlink_to(data / "a.parquet")
    os.link(data / "a.parquet", tmp_path / "hard_a.parquet")
    (tmp_path / "via").symlink_to(data)
    before = {p: p.read_bytes() for p in (data / "a.parquet", tmp_path / "real.parquet")}
    targets = [
        data / "a.parquet",
        data / "new.parquet",
        data / "new.npz",
        data / "b.parquet",
        tmp_path / "real.parquet",
        tmp_path / "to_a.parquet",
        tmp_path / "hard_a.parquet",
        tmp_path / "via" / "a.parquet",
        data / ".." / "data" / "x.npy",
    ]
    for target in targets:
        for source in (data, tmp_path / "via"):
            refused(
                run(capsys, "--mode", "batch", "--obs-file", source, "--output", target, "--model-dir", BUNDLED),
                "--output",
                "input",
            )
        assert not (data / "new.parquet").exists() and not (data / "new.npz").exists()
    refused(
        run(
            capsys,
            "--mode",
            "batch",
            "--obs-file",
            tmp_path / "real.parquet",
            "--output",
            data / "b.parquet",
            "--model-dir",
            BUNDLED,
        ),
        "is the input file",
    )
    assert {p: p.read_bytes() for p in before} == before
    assert leftovers(tmp_path) == []
    code, _, err = run(
        capsys, "--mode", "batch", "--obs-file", data, "--output", tmp_path / "out.parquet", "--model-dir", BUNDLED
    )  # beside the folder: written
    assert code == 0, err
    assert pq.read_table(tmp_path / "out.parquet").num_rows == 80


def test_refuse_same_file_takes_folders(tmp_path):
    folder = tmp_path / "in"
    (folder / "sub").mkdir(parents=True)
    refuse_same_file(tmp_path / "out.npz", [folder])
    refuse_same_file(tmp_path / "in2" / "out.npz", [folder])  # a name that only starts like the folder's
    for output in (folder, folder / "out.npz", folder / "sub" / "out.npz", tmp_path / "x" / ".." / "in" / "o.npy"):
        with pytest.raises(I.UsageError, match="input folder"):
            refuse_same_file(output, [folder])


def test_export_onto_the_mlagents_onnx_of_the_checkpoint_is_refused(capsys, tmp_path):
    """Huggy-like: every input normalised, so loading never reads the ONNX beside the checkpoint."""
    run_dir = copy_run(BUNDLED, tmp_path)
    theirs = [run_dir / "Huggy" / "Huggy-600017.onnx", run_dir / "Huggy.onnx"]
    before = {p: p.read_bytes() for p in theirs}
    os.link(theirs[0], tmp_path / "hard_link.onnx")
    (tmp_path / "sym_link.onnx").symlink_to(theirs[1])
    targets = theirs + [
        run_dir / "Huggy" / ".." / "Huggy.onnx",
        tmp_path / "hard_link.onnx",
        tmp_path / "sym_link.onnx",
    ]
    for target in targets:
        for source in (("--model-dir", run_dir), ("--checkpoint", run_dir / "Huggy" / "Huggy-600017.pt")):
            refused(run(capsys, "--mode", "export-onnx", *source, "--output", target), "input file", "--output")
    assert {p: p.read_bytes() for p in theirs} == before
    assert leftovers(tmp_path) == []
    code, out, err = run(capsys, "--mode", "onnx-compare", "--model-dir", run_dir)  # still compared with theirs
    assert code == 0, err


def test_export_beside_the_mlagents_onnx_still_writes(capsys, tmp_path):
    run_dir = copy_run(BUNDLED, tmp_path)
    target = run_dir / "Huggy" / "Huggy-rebuilt.onnx"
    code, _, err = run(capsys, "--mode", "export-onnx", "--model-dir", run_dir, "--output", target)
    assert code == 0 and target.is_file(), err
    obs = np.random.RandomState(5).randn(16, 59).astype(np.float32)
    ours, theirs = ort_deterministic(target, obs), ort_deterministic(run_dir / "Huggy" / "Huggy-600017.onnx", obs)
    assert np.abs(ours - theirs).max() < 1e-5


# --- output names -------------------------------------------------------------------------------------------


def test_output_paths_refused(capsys, tmp_path):
    a_file = tmp_path / "file"
    a_file.write_text("x")
    for target, words in (
        (a_file / "x.onnx", "is a file, not a folder"),
        (tmp_path / "no" / "x.onnx", "does not exist"),
        (tmp_path, "expected a .onnx"),
        (tmp_path / "x.txt", "expected a .onnx"),
    ):
        refused(call(capsys, "--mode", "export-onnx", "--model-dir", BUNDLED, "--output", target), words)


@pytest.mark.parametrize("option,mode", [("--output", "batch"), ("--output", "export-onnx"), ("--plot", "benchmark")])
def test_an_output_name_ending_in_a_slash_is_refused(capsys, tmp_path, option, mode):
    suffix = {"batch": ".npy", "export-onnx": ".onnx", "benchmark": ".png"}[mode]
    target = f"{tmp_path / ('x' + suffix)}/"
    refused(
        run(capsys, "--mode", mode, "--model-dir", BUNDLED, option, target, "--runs", "1")
        if mode == "benchmark"
        else run(capsys, "--mode", mode, "--model-dir", BUNDLED, option, target),
        "names a folder",
        option,
    )
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("target", ["/proc/x.npy", "/proc/self/x.npy", "/sys/x.npy"])
def test_output_under_proc_or_sys(capsys, target):
    code, out, err = run(capsys, "--mode", "batch", "--batch", 2, "--output", target, "--model-dir", BUNDLED)
    refused((code, out, err), target)
    assert "SUCCESS" not in out


@pytest.mark.parametrize("name", ["out.NPY", "out.Npy", "out.npy"])
def test_upper_case_npy_output_holds_the_result(capsys, tmp_path, name):
    target = tmp_path / name
    code, out, err = run(capsys, "--mode", "batch", "--batch", 4, "--output", target, "--model-dir", BUNDLED, "--json")
    assert code == 0, err
    assert np.load(target).shape == (4, 21)
    assert np.array_equal(np.load(target), np.asarray(json.loads(out)["actions"], np.float32))
    assert sorted(p.name for p in tmp_path.iterdir()) == [name]  # no "out.NPY.npy" beside it


@pytest.mark.parametrize(
    "name,save,load",
    [
        ("a.NPY", lambda tmp: np.save(tmp, np.arange(5)), lambda p: np.load(p)),
        ("a.NPZ", lambda tmp: np.savez(tmp, x=np.arange(5)), lambda p: np.load(p)["x"]),
    ],
)
def test_writers_that_append_a_suffix(tmp_path, name, save, load):
    target = tmp_path / name
    atomic_write(target, save)
    assert np.array_equal(load(target), np.arange(5))
    assert [p.name for p in tmp_path.iterdir()] == [name]


def test_upper_case_onnx(tmp_path):
    import onnx
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])],
    )
    model = helper.make_model(graph)
    atomic_write(tmp_path / "m.ONNX", lambda tmp: onnx.save(model, str(tmp)))
    assert onnx.load(str(tmp_path / "m.ONNX")).graph.node[0].op_type == "Identity"
    assert [p.name for p in tmp_path.iterdir()] == ["m.ONNX"]


def test_upper_case_png(tmp_path):
    matplotlib = pytest.importorskip("matplotlib")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, _ = plt.subplots()
    atomic_write(tmp_path / "p.PNG", lambda tmp: fig.savefig(tmp, format="png"))
    plt.close(fig)
    assert (tmp_path / "p.PNG").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert [p.name for p in tmp_path.iterdir()] == ["p.PNG"]


# --- permissions and the umask ------------------------------------------------------------------------------


@pytest.mark.parametrize("mask,mode", [(0o022, 0o644), (0o077, 0o600), (0o002, 0o664)])
def test_new_file_gets_the_umask_mode(tmp_path, umask, mask, mode):
    umask(mask)
    target = tmp_path / "a.npy"
    atomic_write(target, lambda tmp: np.save(tmp, np.arange(3)))
    assert stat.S_IMODE(target.stat().st_mode) == mode
    plain = tmp_path / "plain"
    plain.write_text("x")  # what open(..., "w") gives, for comparison
    assert stat.S_IMODE(plain.stat().st_mode) == mode


def test_existing_file_keeps_its_mode(tmp_path, umask):
    umask(0o022)
    target = tmp_path / "a.npy"
    target.write_bytes(b"old")
    target.chmod(0o640)
    atomic_write(target, lambda tmp: np.save(tmp, np.arange(3)))
    assert stat.S_IMODE(target.stat().st_mode) == 0o640
    assert np.array_equal(np.load(target), np.arange(3))


def test_batch_output_mode_through_main(capsys, tmp_path, umask):
    umask(0o022)
    target = tmp_path / "out.npy"
    code, out, err = run(capsys, "--mode", "batch", "--batch", 4, "--output", target, "--model-dir", BUNDLED)
    assert code == 0, err
    assert stat.S_IMODE(target.stat().st_mode) == 0o644


def test_symlinked_output_is_written_through(tmp_path):
    real = tmp_path / "real.npy"
    real.write_bytes(b"old")
    link = tmp_path / "link.npy"
    link.symlink_to(real)
    atomic_write(link, lambda tmp: np.save(tmp, np.arange(4)))
    assert link.is_symlink() and np.array_equal(np.load(real), np.arange(4))


# --- every OSError is one line: long names, control characters, unreadable files ----------------------------


@pytest.mark.parametrize(
    "args",
    [
        ["--mode", "action", "--checkpoint", f"/tmp/{LONG}.pt"],
        ["--mode", "action", "--model-dir", f"/tmp/{LONG}"],
        ["--mode", "action", "--model-dir", f"/tmp/{LONG}/sub"],
        ["--mode", "batch", "--model-dir", BUNDLED, "--obs-file", f"/tmp/{LONG}.npy"],
        ["--mode", "batch", "--model-dir", BUNDLED, "--batch", "2", "--output", f"/tmp/{LONG}.npy"],
        ["--mode", "onnx-compare", "--model-dir", BUNDLED, "--onnx", f"/tmp/{LONG}.onnx"],
        ["--mode", "export-onnx", "--model-dir", BUNDLED, "--output", f"/tmp/{LONG}/m.onnx"],
        ["--mode", "benchmark", "--model-dir", BUNDLED, "--runs", "3", "--plot", f"/tmp/{LONG}.png"],
    ],
)
def test_name_too_long_in_any_path_option(capsys, args):
    assert len(refused(run(capsys, *args), "too long")) < 600  # the 300-character name is shortened in the message


def test_name_too_long_in_huggy_model_dir(capsys, monkeypatch):
    monkeypatch.setenv("HUGGY_MODEL_DIR", f"/tmp/{LONG}")
    refused(run(capsys, "--mode", "action"), "HUGGY_MODEL_DIR", "too long")


def test_control_characters_in_a_path_stay_on_one_line(capsys, tmp_path):
    refused(run(capsys, "--mode", "action", "--checkpoint", tmp_path / "a\nb\rc.pt"), "no such file")


def test_os_error_and_memory_error_reaching_main(capsys, monkeypatch):
    def denied(ctx):
        raise PermissionError(errno.EACCES, "Permission denied", "/some/where/file.bin")

    def no_memory(ctx):
        raise MemoryError()

    monkeypatch.setattr(command_line, "mode_functions", lambda mode, *_, **__: (denied, None))
    refused(run(capsys, "--mode", "info"), "/some/where/file.bin", "Permission denied")
    monkeypatch.setattr(command_line, "mode_functions", lambda mode, *_, **__: (no_memory, None))
    refused(run(capsys, "--mode", "info"), "out of memory")


AS_NOBODY = """
import contextlib, io, json, sys
try:  # (a venv inside a private temporary folder, as CI may make, is not reachable)
    import numpy, torch
    sys.path.insert(0, sys.argv[1])
    import inference
except Exception as exc:
    print(json.dumps({"unreachable": repr(exc)}))
    sys.exit(0)
answers = []
for argv in json.loads(sys.argv[2]):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = inference.main(argv)
    answers.append([code, out.getvalue(), err.getvalue()])
print(json.dumps({"answers": answers}))
"""


def as_nobody(*argvs) -> list:
    """Command lines run by user nobody (65534), through setpriv, in one interpreter: [(exit code, stdout, stderr)]."""
    if os.geteuid() != 0 or not shutil.which("setpriv"):
        pytest.skip("needs root and setpriv to run as an unprivileged user")
    done = subprocess.run(
        [
            "setpriv",
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            sys.executable,
            "-c",
            AS_NOBODY,
            str(ROOT),
            json.dumps([[str(a) for a in argv] for argv in argvs]),
        ],
        capture_output=True,
        text=True,
        env=child_env(HOME="/nonexistent"),
        timeout=300,
        cwd="/",
    )
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    if "unreachable" in result:
        pytest.skip(
            f"this interpreter, its packages or inference.py are not readable by an unprivileged user "
            f"({result['unreachable']})"
        )
    return result["answers"]


@pytest.fixture()
def public_dir():
    """A folder user nobody can reach (pytest's tmp_path is private to root)."""
    folder = Path(tempfile.mkdtemp(prefix="files-and-outputs-", dir="/tmp"))
    folder.chmod(0o755)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def test_permission_denied_as_unprivileged_user(public_dir):
    run = Path(shutil.copytree(BUNDLED, public_dir / "run"))
    for p in [run, *run.rglob("*")]:
        p.chmod(0o755 if p.is_dir() else 0o644)
    private = Path(shutil.copytree(run, public_dir / "private"))
    (private / "Huggy" / "Huggy-600017.pt").chmod(0o600)  # root's: nobody cannot read it
    locked = public_dir / "locked"
    locked.mkdir(mode=0o700)  # root's: nobody can neither look inside nor write
    np.save(locked / "in.npy", np.zeros((3, 59), np.float32))
    unreadable, unwritable, unlisted = as_nobody(
        ["--mode", "action", "--model-dir", private],
        ["--mode", "batch", "--model-dir", run, "--batch", "2", "--output", locked / "out.npy"],
        ["--mode", "batch", "--model-dir", run, "--obs-file", locked / "in.npy"],
    )
    refused(unreadable, "Permission denied", "Huggy-600017.pt")
    refused(unwritable, "Permission denied")
    refused(unlisted, "Permission denied")
    assert sorted(p.name for p in locked.iterdir()) == ["in.npy"]


# --- files that are not regular files -----------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["folder", "absent", "device"])
def test_load_with_an_onnx_that_is_not_a_regular_file(tmp_path, kind):
    """(A FIFO, which would block this process for ever if opened: test_load_with_a_fifo_as_onnx_returns_at_once.)"""
    target = {"folder": tmp_path, "absent": tmp_path / "x.onnx", "device": Path("/dev/null")}[kind]
    words = {"folder": "is a folder", "absent": "no such file", "device": "not a regular file"}[kind]
    with pytest.raises(I.UsageError, match=words):
        I.load(EXAMPLES / "vector", onnx=target)


def test_load_with_a_fifo_as_onnx_returns_at_once(tmp_path):
    """In a process of its own, killed if it blocks: load(onnx=FIFO), then the command line with --onnx FIFO."""
    fifo = tmp_path / "policy.onnx"
    os.mkfifo(fifo)
    program = (
        f"import sys; sys.path.insert(0, {str(ROOT)!r}); import inference\n"
        f"try:\n    inference.load({str(EXAMPLES / 'vector')!r}, onnx={str(fifo)!r})\n"
        f"except inference.UsageError as exc:\n    print('refused:', exc)\n"
        f"sys.exit(inference.main(['--mode', 'info', '--model-dir', {str(EXAMPLES / 'vector')!r}, "
        f"'--onnx', {str(fifo)!r}]))\n"
    )
    try:
        done = subprocess.run(
            [sys.executable, "-c", program], capture_output=True, text=True, timeout=120, env=child_env()
        )
    except subprocess.TimeoutExpired:  # (subprocess.run has killed it)
        raise AssertionError("load() or --onnx blocked on the FIFO")
    assert "refused:" in done.stdout and "not a regular file" in done.stdout, (done.stdout, done.stderr)
    refused(done, "not a regular file")
