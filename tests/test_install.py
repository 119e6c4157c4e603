"""Installable as what it is: `pip install .` gives the package `mlagents_inference` with its
`__version__`, the entry point `inference`, the dependencies of requirements-ascend.txt and the command
`mlagents-infer`; inference.py copied without its package says so in one line (the one file to
copy is the .pyz: tests/test_architecture.py)."""

import ast
import importlib.util
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from conftest import EXAMPLES, ROOT, child_env

tomllib = pytest.importorskip("tomllib")  # Python 3.11+


def without_site_packages(folder: Path, script: Path, *args) -> subprocess.CompletedProcess:
    """`script` run from `folder` with -S -E: no site-packages (where an installed package could answer for what the
    script must find beside itself) and no PYTHON* variables."""
    return subprocess.run(
        [sys.executable, "-S", "-E", str(script), *map(str, args)],
        cwd=folder,
        env=child_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )


def requirement_lines(path: Path) -> list[str]:
    lines = (line.split("#")[0].strip() for line in path.read_text().splitlines())
    return [line for line in lines if line and not line.startswith("-")]


def pyproject() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def source_version() -> str:
    """`__version__` as setuptools reads it: a literal in the source, found without importing."""
    tree = ast.parse((ROOT / "mlagents_inference" / "__init__.py").read_text())
    found = [
        node.value.value
        for node in tree.body
        if isinstance(node, ast.Assign)
        and [getattr(t, "id", None) for t in node.targets] == ["__version__"]
        and isinstance(node.value, ast.Constant)
        and isinstance(node.value.value, str)
    ]
    assert len(found) == 1, "one literal __version__ = '...' at module level"
    return found[0]


def test_pyproject_installs_the_package_the_door_its_command_and_the_ascend_requirements():
    meta = pyproject()
    assert meta["tool"]["setuptools"]["py-modules"] == ["inference"]
    # the package, each of its layers, and every package inside one (examples/, tests/, tools/ stay in the clone)
    packages = meta["tool"]["setuptools"]["packages"]
    assert packages[:8] == ["mlagents_inference"] + [
        f"mlagents_inference.{n}" for n in ("core", "model", "loaders", "engines", "api", "services", "fronts")
    ]
    every = (".".join(p.parent.relative_to(ROOT).parts) for p in (ROOT / "mlagents_inference").rglob("__init__.py"))
    assert sorted(packages) == sorted(every)
    assert meta["project"]["scripts"] == {"mlagents-infer": "mlagents_inference.fronts.cli:main"}
    assert meta["project"]["dynamic"] == ["version"]
    assert meta["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "mlagents_inference.__version__"}
    assert meta["project"]["dependencies"] == requirement_lines(ROOT / "requirements-ascend.txt")
    assert not any(d.lower().startswith("torch") for d in meta["project"]["dependencies"])  # CANN's stays
    assert [d for d in meta["project"]["optional-dependencies"]["torch"] if d.startswith("torch")]


def test_version_is_a_literal_the_module_exposes():
    import inference

    assert re.fullmatch(r"\d+\.\d+\.\d+([ab]|rc)?\d*", source_version())
    assert inference.__version__ == source_version()


def test_main_returns_the_exit_code_the_command_exits_with(capsys):
    """The console script calls sys.exit(main()): main must return each code, not exit itself."""
    import inference

    assert inference.main(["--mode", "checkpoints", "--model-dir", str(EXAMPLES / "vector")]) == 0
    assert inference.main(["--mode", "checkpoints", "--model-dir", str(EXAMPLES / "no-such")]) == 2
    assert (
        inference.main(
            ["--mode", "onnx-compare", "--model-dir", str(EXAMPLES / "vector"), "--engine", "torch", "--tol", "1e-30"]
        )
        == 1
    )
    capsys.readouterr()


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """The wheel `pip install .` would install, built from a copy of the files it needs, then
    installed into a folder of its own."""
    setuptools = importlib.util.find_spec("setuptools")
    if setuptools is None:
        pytest.skip("setuptools is not installed here (pip's build isolation would fetch it)")
    import setuptools as st

    if int(st.__version__.split(".")[0]) < 61:
        pytest.skip(f"setuptools {st.__version__} cannot read pyproject.toml (61 or later can)")
    major, minor = (int(part) for part in st.__version__.split(".")[:2])
    if (major, minor) < (70, 1) and importlib.util.find_spec("wheel") is None:  # (a venv's own setuptools 65)
        pytest.skip(f"setuptools {st.__version__} builds no wheel without the wheel package (70.1 or later does)")
    base = tmp_path_factory.mktemp("install")
    source = base / "source"
    source.mkdir()
    for name in ("pyproject.toml", "inference.py", "README.md"):
        shutil.copy(ROOT / name, source / name)
    shutil.copytree(
        ROOT / "mlagents_inference", source / "mlagents_inference", ignore=shutil.ignore_patterns("__pycache__")
    )
    (source / "examples").mkdir()  # a folder beside the module must not end up in the wheel
    (source / "examples" / "__init__.py").write_text("")
    built = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "--no-index",
            "-q",
            "-w",
            str(base / "wheel"),
            str(source),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert built.returncode == 0, built.stderr[-3000:]
    (wheel,) = (base / "wheel").glob("*.whl")
    site = base / "site"
    done = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-deps", "--no-index", "-q", "--target", str(site), str(wheel)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return wheel, site


def test_the_wheel_holds_the_package_the_door_its_version_dependencies_and_command(installed):
    wheel, _ = installed
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        info = next(n.split("/")[0] for n in names if n.endswith(".dist-info/METADATA"))
        metadata = archive.read(f"{info}/METADATA").decode()
        entry_points = archive.read(f"{info}/entry_points.txt").decode()
    package = sorted(
        p.relative_to(ROOT).as_posix()
        for p in (ROOT / "mlagents_inference").rglob("*.py")
        if "__pycache__" not in p.parts
    )
    assert sorted(n for n in names if not n.startswith(info + "/")) == sorted(["inference.py", *package])
    assert re.search(rf"^Version: {re.escape(source_version())}$", metadata, re.M)
    requires = re.findall(r"^Requires-Dist: (.+)$", metadata, re.M)
    assert [r for r in requires if "extra ==" not in r] == requirement_lines(ROOT / "requirements-ascend.txt")
    assert any(r.startswith("torch") and 'extra == "torch"' in r for r in requires)
    assert re.search(r"^mlagents-infer = mlagents_inference.fronts.cli:main$", entry_points, re.M)


def test_the_installed_module_imports_from_another_folder(installed, tmp_path):
    _, site = installed
    env = child_env(PYTHONPATH=str(site))
    done = subprocess.run(
        [sys.executable, "-c", "import inference; print(inference.__version__, inference.__file__)"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    version, where = done.stdout.split()
    assert version == source_version() and Path(where) == site / "inference.py"


def test_the_installed_command_is_inference_py(installed, tmp_path):
    _, site = installed
    command = site / "bin" / "mlagents-infer"
    env = child_env(PYTHONPATH=str(site))

    def run(*args):
        return subprocess.run(
            [str(command), *map(str, args)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
        )

    ok = run("--mode", "onnx-compare", "--model-dir", EXAMPLES / "hybrid", "--json")
    assert ok.returncode == 0, ok.stderr
    assert '"passed": true' in ok.stdout
    failed = run("--mode", "onnx-compare", "--model-dir", EXAMPLES / "vector", "--engine", "torch", "--tol", "1e-30")
    assert failed.returncode == 1, failed.stderr
    # no bundled sample is installed: offline and without a model, one line says what to do
    missing = run("--mode", "info")
    assert missing.returncode == 2 and "Traceback" not in missing.stderr
    (line,) = missing.stderr.strip().splitlines()
    assert line.startswith("error: no model:") and "no bundled sample" in line and "--model-dir" in line


def test_the_installed_command_never_writes_into_its_installation(installed, tmp_path):
    """export-onnx without --output writes huggy_rebuilt.onnx in the current folder, not site-packages/assets/
    (which pip uninstall would leave behind): after export-onnx, batch and onnx-compare from another folder, every
    file and folder of the installation is as pip left it (issue 26)."""
    _, site = installed
    env = child_env(PYTHONPATH=str(site), PYTHONDONTWRITEBYTECODE="1")  # (Python's own .pyc files are not ours)

    def snapshot() -> dict:
        return {p: (p.is_dir(), p.stat().st_size, p.stat().st_mtime_ns) for p in site.rglob("*")}

    before = snapshot()
    for args in (["--mode", "export-onnx"], ["--mode", "batch", "--batch", "4"], ["--mode", "onnx-compare"]):
        done = subprocess.run(
            [str(site / "bin" / "mlagents-infer"), *args, "--model-dir", str(EXAMPLES / "vector")],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert done.returncode == 0, done.stderr
    assert snapshot() == before
    assert (tmp_path / "huggy_rebuilt.onnx").stat().st_size > 1000
    assert sorted(p.name for p in tmp_path.iterdir()) == ["huggy_rebuilt.onnx"]


def test_inference_py_copied_without_its_package_says_so(tmp_path):
    """The copy runs with -S -E (no site-packages, no PYTHONPATH): after `pip install .` in the same environment the
    installed package would answer for the missing folder, and a user who installs and then runs the suite sees it
    pass all the same. With the folder copied beside it (found first, as the script's own folder), it runs."""
    alone = tmp_path / "inference.py"
    shutil.copy(ROOT / "inference.py", alone)
    ran = without_site_packages(tmp_path, alone, "--mode", "info", "--model-dir", EXAMPLES / "vector")
    assert ran.returncode == 2 and not ran.stdout
    (line,) = ran.stderr.strip().splitlines()
    assert line.startswith("error: inference.py needs the folder mlagents_inference/ beside it") and "build_pyz" in line
    shutil.copytree(ROOT / "mlagents_inference", tmp_path / "mlagents_inference")  # with it, it runs
    ran = subprocess.run(
        [sys.executable, str(alone), "--mode", "info", "--model-dir", str(EXAMPLES / "vector")],
        cwd=tmp_path,
        env=child_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert ran.returncode == 0 and ran.stdout.rstrip().endswith("SUCCESS"), ran.stderr
    missing = subprocess.run(
        [sys.executable, str(alone), "--mode", "info"],
        cwd=tmp_path,
        env=child_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert missing.returncode == 2
    (line,) = missing.stderr.strip().splitlines()
    assert line.startswith("error: no model:") and "no bundled sample beside" in line and "--model-dir" in line


def test_the_required_packages_named_on_a_missing_one_are_pyprojects():
    from mlagents_inference.core.extras import REQUIRED

    assert sorted(REQUIRED.values()) == sorted(pyproject()["project"]["dependencies"])


def test_the_pyz_without_numpy_names_the_packages_to_install(tmp_path):
    """A .pyz user has no requirements.txt: without numpy (site-packages off: -S -E) the one line names the packages,
    with their versions."""
    pyz = tmp_path / "mlagents-infer.pyz"
    subprocess.run(
        [sys.executable, str(ROOT / "tools" / "build_pyz.py"), "--output", str(pyz)], check=True, timeout=300
    )
    ran = without_site_packages(tmp_path, pyz, "--mode", "info")
    assert ran.returncode == 2 and not ran.stdout
    (line,) = ran.stderr.strip().splitlines()
    assert line.startswith("error: the Python package 'numpy' is not installed; run: pip install "), line
    assert "requirements.txt" not in line
    for requirement in ("numpy>=1.24", "onnxruntime>=1.17", "Pillow>=9"):
        assert requirement in line, line
