"""The model repository (services.repository, loaders.run_folder): run folders' behaviours as models and their
checkpoints as versions, finished checkpoints only, verification before a version serves, versions / pin / rollback /
unload, the follower thread, and the confinement of a load to the folders served.

Checkpoints are written into a scratch run folder as mlagents-learn writes them (TorchModelSaver: the .pt, then the
.onnx; training_status.json after): real ML-Agents 1.1.0 checkpoints from examples/, saved again under a new step,
some with their weights perturbed."""

import json
import os
import shutil
import subprocess
import sys
import threading

import numpy as np
import pytest
from conftest import EXAMPLES, ROOT, child_env, copy_run, list_checkpoint, two_behaviour_run, write_checkpoint

import inference
from mlagents_inference.core.errors import UsageError
from mlagents_inference.loaders.run_folder import CheckpointWatch, confine, discover, several_models
from mlagents_inference.services.repository import ModelNotFound, Repository, parse_pin, probe_problem

VECTOR = EXAMPLES / "vector"  # Vector: 50000 (with its ONNX beside it), 100000 (the final: Vector.onnx)
LSTM = EXAMPLES / "lstm"  # Memory: 50000, 100000


def first_rows(policy_or_path, rows: int = 16) -> np.ndarray:
    obs = np.random.RandomState(3).randn(rows, 8).astype(np.float32)
    policy = policy_or_path if hasattr(policy_or_path, "act") else inference.load(policy_or_path)
    return policy.act(obs)["continuous_actions"]


class Lines(list):
    def __call__(self, line: str) -> None:
        assert "\n" not in line
        self.append(line)


@pytest.fixture
def vector_run(tmp_path):
    return copy_run(VECTOR, tmp_path, "vector")


# -- discovery
def test_a_folder_of_run_folders_lists_each_behaviour_with_its_checkpoints_steps(tmp_path):
    results = tmp_path / "results"
    results.mkdir()
    copy_run(VECTOR, results, "run-a")
    copy_run(LSTM, results, "run-b")
    (results / "notes").mkdir()  # (not a run folder)
    repo = Repository([results], versions=2)
    repo.poll()
    index = {m["name"]: m for m in repo.models()}
    assert sorted(index) == ["Memory", "Vector"]
    assert index["Vector"]["versions"] == [50000, 100000] and index["Memory"]["versions"] == [50000, 100000]
    assert index["Vector"]["serving"] == 100000 and index["Vector"]["ready"]
    with pytest.raises(ModelNotFound, match="name the model"):
        repo.lookup()


def test_one_run_folder_with_two_behaviours_and_several_model_dirs(tmp_path):
    run = copy_run(VECTOR, tmp_path, "soccer")
    shutil.copytree(LSTM / "Memory", run / "Memory")
    status = json.loads((run / "run_logs" / "training_status.json").read_text())
    status["Memory"] = json.loads((LSTM / "run_logs" / "training_status.json").read_text())["Memory"]
    (run / "run_logs" / "training_status.json").write_text(json.dumps(status))
    assert discover([run]) == {"Memory": run, "Vector": run}
    other = copy_run(LSTM, tmp_path, "other")
    with pytest.raises(UsageError, match="behaviour Memory is in two run folders"):
        discover([run, other])
    single = copy_run(VECTOR, tmp_path, "single")
    assert discover([single, other]) == {"Memory": other, "Vector": single}


# -- finished checkpoints
def test_a_listed_checkpoint_counts_at_once_an_unlisted_one_when_its_size_held_still(vector_run):
    now = [1000.0]
    watch = CheckpointWatch(settle_s=5.0, clock=lambda: now[0], wall=lambda: 0.0)
    assert [f.step for f in watch.finished(vector_run, "Vector")] == [50000, 100000]
    write_checkpoint(vector_run, "Vector", 150000, VECTOR / "Vector" / "Vector-50000.pt", listed=False)
    assert [f.step for f in watch.finished(vector_run, "Vector")] == [50000, 100000]  # (newer than the list)
    now[0] += 4.0
    assert 150000 not in [f.step for f in watch.finished(vector_run, "Vector")]
    now[0] += 1.5
    settled = watch.finished(vector_run, "Vector")
    assert [(f.step, f.how) for f in settled][-1] == (150000, "settled")
    assert settled[0].onnx.name == "Vector-50000.onnx" and settled[1].onnx.name == "Vector.onnx"  # (the final's)


def test_an_unlisted_checkpoint_older_than_training_status_never_counts(vector_run):
    now = [0.0]
    watch = CheckpointWatch(settle_s=1.0, clock=lambda: now[0], wall=lambda: 0.0)
    path = write_checkpoint(vector_run, "Vector", 150000, VECTOR / "Vector" / "Vector-50000.pt", listed=False)
    status = vector_run / "run_logs" / "training_status.json"
    stamp = path.stat().st_mtime_ns + 1_000_000_000
    os.utime(status, ns=(stamp, stamp))  # (the trainer wrote its list after the file, and left it out)
    for _ in range(3):
        now[0] += 5.0
        assert [f.step for f in watch.finished(vector_run, "Vector")] == [50000, 100000]


def test_without_training_status_a_growing_file_never_counts(tmp_path):
    run = copy_run(VECTOR, tmp_path, "live")
    (run / "run_logs" / "training_status.json").unlink()
    now = [0.0]
    watch = CheckpointWatch(settle_s=2.0, clock=lambda: now[0], wall=lambda: 0.0)  # (files as if just written)
    growing = run / "Vector" / "Vector-150000.pt"
    data = (VECTOR / "Vector" / "Vector-50000.pt").read_bytes()
    for part in range(1, 4):
        growing.write_bytes(data[: part * len(data) // 4])
        now[0] += 1.5
        assert 150000 not in [f.step for f in watch.finished(run, "Vector")]
    growing.write_bytes(data)
    now[0] += 1.0
    assert 150000 not in [f.step for f in watch.finished(run, "Vector")]  # (first seen whole: 2 s from here)
    now[0] += 1.5
    assert 150000 not in [f.step for f in watch.finished(run, "Vector")]
    now[0] += 0.5
    assert 150000 in [f.step for f in watch.finished(run, "Vector")]


# -- verification
@pytest.mark.parametrize("damage", ["truncated .pt", "corrupt .onnx", "fails onnx-compare"])
def test_a_checkpoint_that_fails_verification_leaves_the_old_version_with_one_line(vector_run, damage):
    changes, lines = [], Lines()
    repo = Repository([vector_run], on_change=lambda m, v: changes.append(v and v.step), log=lines)
    repo.poll()
    assert changes == [100000] and not lines
    source, onnx = VECTOR / "Vector" / "Vector-50000.pt", VECTOR / "Vector" / "Vector-50000.onnx"
    if damage == "truncated .pt":
        path = write_checkpoint(vector_run, "Vector", 150000, source, listed=False)
        path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
        list_checkpoint(vector_run, "Vector", 150000)
    elif damage == "corrupt .onnx":
        path = write_checkpoint(vector_run, "Vector", 150000, source, listed=False)
        path.with_suffix(".onnx").write_bytes(b"\x08\x07garbage" * 50)
        list_checkpoint(vector_run, "Vector", 150000)
    else:  # the head's weights changed, ML-Agents' ONNX of 50000 beside it
        path = write_checkpoint(vector_run, "Vector", 150000, source, scale=1.5, onnx=onnx)
    for _ in range(3):
        repo.poll()
    assert len(lines) == 1, lines
    assert "Vector-150000.pt" in lines[0] and "not served" in lines[0] and "100000 keeps answering" in lines[0]
    assert {
        "truncated .pt": "damaged/truncated",
        "corrupt .onnx": "Vector-150000.onnx: not an ONNX file",
        "fails onnx-compare": "differs from Vector-150000.onnx",
    }[damage] in lines[0]
    assert changes == [100000] and repo.lookup("Vector").step == 100000
    assert repo.models()[0]["versions"] == [100000]


def test_a_newest_checkpoint_refused_at_the_first_scan_or_a_load_leaves_the_one_before_serving(vector_run):
    """A run whose newest listed checkpoint is truncated when serve starts (or when the repository API loads the
    model again): the one before it serves at once, not after another scan, and the file is one line."""
    source = VECTOR / "Vector" / "Vector-50000.pt"
    path = write_checkpoint(vector_run, "Vector", 150000, source, listed=False)
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    list_checkpoint(vector_run, "Vector", 150000)
    for versions, served in ((1, [100000]), (2, [50000, 100000])):
        lines = Lines()
        repo = Repository([vector_run], versions=versions, log=lines)
        repo.poll()  # (the first scan alone: serve opens its sockets after it)
        assert repo.models()[0]["versions"] == served and repo.lookup().step == 100000
        assert len(lines) == 1 and "Vector-150000.pt" in lines[0] and "damaged/truncated" in lines[0], lines
    repo.unload("Vector")
    assert repo.load("Vector") == ["Vector"]  # (no follower thread here: this load alone must find it)
    assert repo.lookup().step == 100000 and repo.models()[0]["versions"] == [50000, 100000] and len(lines) == 1


def test_a_verified_version_answers_as_load_of_its_checkpoint(vector_run):
    repo = Repository([vector_run])
    repo.poll()
    path = write_checkpoint(
        vector_run,
        "Vector",
        150000,
        VECTOR / "Vector" / "Vector-50000.pt",
        onnx=VECTOR / "Vector" / "Vector-50000.onnx",
    )
    repo.poll()
    version = repo.lookup("Vector")
    assert version.step == 150000 and version.checks["onnx_compare"]["max_abs_err"] < 1e-5
    np.testing.assert_allclose(first_rows(version.policy), first_rows(path), atol=1e-6)
    assert np.abs(first_rows(version.policy) - first_rows(VECTOR / "Vector" / "Vector-100000.pt")).max() > 1e-3


def test_the_probe_refuses_answers_that_cannot_be_served():
    policy = inference.load(LSTM)  # discrete [4], memory 32
    s = policy.settings
    masks = np.ones((2, 4), np.float32)
    good = {"discrete_actions": np.array([[0], [3]]), "memory": np.zeros((2, 32), np.float32)}
    assert probe_problem(s, good, masks) is None
    assert "NaN or infinite" in probe_problem(s, {**good, "memory": np.full((2, 32), np.nan, np.float32)}, masks)
    assert "leave branch 0" in probe_problem(s, {**good, "discrete_actions": np.array([[0], [4]])}, masks)
    masks[1, 3] = 0
    assert "masked action" in probe_problem(s, good, masks)
    vector = inference.load(VECTOR).settings
    assert "leave [-1, 1]" in probe_problem(vector, {"continuous_actions": np.array([[0.5, 1.01]])}, None)


# -- versions, pin, rollback, unload
def test_versions_keep_the_newest_n_and_a_request_may_name_one(vector_run):
    repo = Repository([vector_run], versions=2)
    repo.poll()
    write_checkpoint(vector_run, "Vector", 150000, VECTOR / "Vector" / "Vector-50000.pt", scale=0.5)
    repo.poll()
    assert repo.models()[0]["versions"] == [100000, 150000]
    assert repo.lookup("Vector", 100000).step == 100000 and repo.lookup("Vector").step == 150000
    with pytest.raises(ModelNotFound, match="version 50000 is not loaded"):
        repo.lookup("Vector", 50000)
    with pytest.raises(ModelNotFound, match="not served"):
        repo.lookup("Striker")
    for model, version in ((["Vector"], None), ("Vector", "100000"), ("Vector", 1e5)):
        with pytest.raises(ModelNotFound, match="expected"):
            repo.lookup(model, version)


def test_a_pin_holds_while_newer_versions_arrive(vector_run):
    changes = []
    repo = Repository([vector_run], pins=["Vector:50000"], on_change=lambda m, v: changes.append(v and v.step))
    repo.poll()
    assert repo.lookup().step == 50000
    write_checkpoint(vector_run, "Vector", 150000, VECTOR / "Vector" / "Vector-50000.pt", scale=0.5)
    repo.poll()
    assert repo.lookup().step == 50000 and repo.models()[0]["versions"] == [50000, 150000]
    assert repo.unpin("Vector").step == 150000
    assert changes == [50000, 150000]
    with pytest.raises(UsageError, match="MODEL:VERSION"):
        parse_pin("Vector:latest")


def test_rollback_serves_the_previous_verified_version_and_holds_it(vector_run):
    repo = Repository([vector_run])  # (one version kept: the previous one is loaded and verified again)
    repo.poll()
    assert repo.lookup().step == 100000
    assert repo.rollback("Vector").step == 50000
    assert repo.lookup().step == 50000 and repo.models()[0]["versions"] == [50000]
    np.testing.assert_allclose(
        first_rows(repo.lookup().policy), first_rows(VECTOR / "Vector" / "Vector-50000.pt"), atol=1e-6
    )
    write_checkpoint(vector_run, "Vector", 150000, VECTOR / "Vector" / "Vector-50000.pt", scale=0.5)
    repo.poll()
    assert repo.lookup().step == 50000  # (held)
    with pytest.raises(ModelNotFound, match="no version before 50000"):
        repo.rollback("Vector")
    assert repo.unpin("Vector").step == 150000
    repo.poll()
    assert 100000 not in repo.models()[0]["versions"]  # (withdrawn: never back through the follower)


def test_unload_a_version_or_the_model_and_load_it_again(vector_run):
    repo = Repository([vector_run], versions=2)
    repo.poll()
    held = repo.lookup()
    repo.unload("Vector", 100000)
    assert repo.lookup().step == 50000
    assert held.policy.act(np.zeros(8, np.float32))["continuous_actions"].shape == (2,)  # (an engine call in flight)
    repo.unload("Vector")
    repo.poll()
    with pytest.raises(ModelNotFound):
        repo.lookup("Vector")
    assert repo.load("Vector") == ["Vector"] and repo.lookup().step == 100000


def test_a_refused_file_written_again_whole_is_verified_again(vector_run):
    lines = Lines()
    repo = Repository([vector_run], log=lines)
    repo.poll()
    path = write_checkpoint(vector_run, "Vector", 150000, VECTOR / "Vector" / "Vector-50000.pt", listed=False)
    whole = path.read_bytes()
    path.write_bytes(whole[: len(whole) // 2])
    list_checkpoint(vector_run, "Vector", 150000)
    repo.poll()
    assert repo.lookup().step == 100000 and len(lines) == 1
    path.write_bytes(whole)
    repo.poll()
    assert repo.lookup().step == 150000 and len(lines) == 1


def test_a_pin_names_a_served_behaviour(vector_run):
    with pytest.raises(UsageError, match="--pin Striker:5: no behaviour Striker under the served folders"):
        Repository([vector_run], pins=["Striker:5"])


def test_a_load_while_another_runs_is_refused_in_one_line(vector_run):
    refusals = []

    def on_change(model, version):  # (called inside the first load: the second finds it still running)
        if not refusals:
            with pytest.raises(UsageError) as refused:
                repo.load("Vector")
            refusals.append(str(refused.value))

    repo = Repository([vector_run], on_change=on_change, busy_s=0.2)
    repo.poll()
    assert refusals == ["load Vector: another load is still running; try again"]
    assert repo.lookup().step == 100000


# -- confinement
def test_a_load_comes_only_from_under_the_folders_served(tmp_path):
    served = tmp_path / "served"
    served.mkdir()
    run = copy_run(VECTOR, served, "run")
    outside = copy_run(LSTM, tmp_path, "outside")
    (served / "escape").symlink_to(outside, target_is_directory=True)
    (run / "Memory").symlink_to(outside / "Memory", target_is_directory=True)
    assert confine([served], "run/Vector") == (run / "Vector").resolve()
    refusals = {
        "run/../../outside": "'..' is refused",
        "escape": "leads outside the served folders",
        "escape/Memory": "leads outside the served folders",
        str(outside): "leads outside the served folders",
        "a" * 300: "longer than",
        "run/Vec\0tor": "control character",
        "nothing/here": "no such file or folder",
    }
    for value, words in refusals.items():
        with pytest.raises(UsageError, match=words) as refused:
            confine([served], value)
        assert "\n" not in str(refused.value)
    assert discover([served]) == {"Vector": run}  # (the linked behaviour folder is not served)
    repo = Repository([served])
    repo.poll()
    assert [m["name"] for m in repo.models()] == ["Vector"]
    for value in ("escape/Memory", "Memory", "run/../../outside/Memory", "x" * 256):
        with pytest.raises(UsageError):
            repo.load(value)
    assert repo.load("run/Vector") == ["Vector"]


# -- the follower
def test_the_follower_picks_up_a_new_checkpoint_and_swaps_it_in(vector_run):
    swapped = threading.Event()
    seen = []

    def on_change(model, version):
        seen.append((model, version and version.step))
        if version is not None and version.step == 150000:
            swapped.set()

    repo = Repository([vector_run], on_change=on_change, poll_s=0.05)
    with repo:
        assert repo.lookup().step == 100000
        in_flight = repo.lookup().policy
        write_checkpoint(vector_run, "Vector", 150000, VECTOR / "Vector" / "Vector-50000.pt", scale=0.5)
        assert swapped.wait(60), seen
        assert repo.lookup().step == 150000
    assert seen == [("Vector", 100000), ("Vector", 150000)]
    np.testing.assert_allclose(first_rows(in_flight), first_rows(VECTOR / "Vector" / "Vector-100000.pt"), atol=1e-6)
    assert not any(t.name == "model-repository" for t in threading.enumerate())  # (stopped and joined)


def test_a_checkpoint_the_trainer_lists_is_picked_up_before_the_next_scan(vector_run):
    """The follower looks at training_status.json between its scans: with a scan an hour away, a checkpoint written
    and then listed (mlagents-learn's order) is still verified and swapped in (the swap comes within a listing's
    look and a verification, whatever poll_s; docs/performance.md measures it under load)."""
    swapped = threading.Event()

    def on_change(model, version):
        if version is not None and version.step == 150000:
            swapped.set()

    repo = Repository([vector_run], on_change=on_change, poll_s=3600)
    with repo:
        assert repo.lookup().step == 100000
        write_checkpoint(vector_run, "Vector", 150000, VECTOR / "Vector" / "Vector-50000.pt", scale=0.5)
        assert swapped.wait(120), "the listed checkpoint waited for the next scan"
        assert repo.lookup().step == 150000
    assert not any(t.name == "model-repository" for t in threading.enumerate())  # (stopped at once, mid-wait)


def test_a_checkpoint_listed_while_a_scan_is_under_way_is_picked_up_before_the_next_scan(vector_run):
    """A listing written while a scan is under way, after it read training_status.json (here: as it swaps in the
    checkpoint listed before), is a change the follower's next look sees: with a scan an hour away, the second
    checkpoint is still swapped in. (The listings the looks compare against are taken before each scan; taken after
    it, a listing written during one waited for the next scan.)"""
    swapped = {150000: threading.Event(), 200000: threading.Event()}

    def on_change(model, version):
        if version is None or version.step not in swapped:
            return
        if version.step == 150000:  # (in the scan, after it read the listings)
            write_checkpoint(vector_run, "Vector", 200000, VECTOR / "Vector" / "Vector-50000.pt", scale=0.25)
        swapped[version.step].set()

    repo = Repository([vector_run], on_change=on_change, poll_s=3600)
    with repo:
        write_checkpoint(vector_run, "Vector", 150000, VECTOR / "Vector" / "Vector-50000.pt", scale=0.5)
        assert swapped[150000].wait(120), "the listed checkpoint waited for the next scan"
        assert swapped[200000].wait(120), "the checkpoint listed during a scan waited for the next scan"
        assert repo.lookup().step == 200000


def test_lookups_during_swaps_always_get_one_whole_version(vector_run):
    repo = Repository([vector_run], versions=2)
    repo.poll()
    torn, looked = [], [0]
    done = threading.Event()

    def reader():
        for _ in range(200_000):  # (bounded: the swaps below take far fewer)
            if done.is_set():
                return
            version = repo.lookup("Vector")
            looked[0] += 1
            if version.policy.checkpoint.path.name != f"Vector-{version.step}.pt":
                torn.append(version.step)

    thread = threading.Thread(target=reader)
    thread.start()
    try:
        for step in (150000, 200000, 250000):
            write_checkpoint(vector_run, "Vector", step, VECTOR / "Vector" / "Vector-50000.pt", scale=0.5)
            repo.poll()
        repo.rollback("Vector")
        repo.unpin("Vector")
        write_checkpoint(vector_run, "Vector", 300000, VECTOR / "Vector" / "Vector-50000.pt", scale=0.5)
        repo.poll()
    finally:
        done.set()
        thread.join(60)
    assert not torn and looked[0] > 0
    assert repo.lookup("Vector").step == 300000 and repo.models()[0]["versions"] == [200000, 300000]


def test_a_new_run_folder_appearing_under_results_is_followed(tmp_path):
    results = tmp_path / "results"
    results.mkdir()
    copy_run(VECTOR, results, "first")
    repo = Repository([results])
    repo.poll()
    copy_run(LSTM, results, "second")
    repo.poll()
    assert [m["name"] for m in repo.models()] == ["Memory", "Vector"]
    assert os.path.samefile(repo.models()[0]["run"], results / "second")


def test_without_torch_a_version_is_its_ml_agents_onnx_and_a_checkpoint_alone_is_refused(vector_run):
    write_checkpoint(vector_run, "Vector", 150000, VECTOR / "Vector" / "Vector-50000.pt")  # (no ONNX beside it)
    code = f"""
import json, sys
from mlagents_inference.services.repository import Repository
repo = Repository([{str(vector_run)!r}], versions=3, log=print)
repo.poll()
print(json.dumps([repo.models(), repo.lookup(version=50000).checks["onnx_compare"], sys.modules.get("torch")]))
"""
    result = subprocess.run(
        [sys.executable, str(ROOT / "tests" / "no_torch.py"), "--code", code],
        capture_output=True,
        text=True,
        timeout=300,
        env=child_env(),
    )
    assert result.returncode == 0, result.stderr[-2000:]
    line, answer = result.stdout.strip().splitlines()
    assert "Vector-150000.pt: not served (this checkpoint has no ML-Agents ONNX beside it" in line
    models, compared, torch_module = json.loads(answer)
    assert models[0]["versions"] == [50000, 100000] and models[0]["serving"] == 100000
    assert compared == "the ML-Agents ONNX itself runs (no torch)" and torch_module is None


def test_which_model_dirs_hold_several_models(tmp_path):
    """serve and serve --ray answer through the repository where one --model-dir holds several models: a run folder
    of two behaviours, a folder of run folders; not a run folder of one behaviour, nor a folder holding a checkpoint
    alone (no run folder at all)."""
    assert not several_models(VECTOR)
    assert several_models(two_behaviour_run(tmp_path / "a"))
    runs = tmp_path / "runs"
    runs.mkdir()
    copy_run(VECTOR, runs, "first")
    assert several_models(runs)
    loose = tmp_path / "loose"
    loose.mkdir()
    shutil.copyfile(VECTOR / "Vector" / "Vector-100000.pt", loose / "Vector-100000.pt")
    assert not several_models(loose) and not several_models(tmp_path / "missing")
