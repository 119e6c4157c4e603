"""The house rules of the package layout (docs/architecture.md): a short door, modules of a
readable size in import-linter's layers, no torch behind `import inference`, ruff clean, the
architecture page naming every module, no stray copies, and one file to copy (the .pyz) that
answers as `python inference.py` does."""

from __future__ import annotations

import ast
import json
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT, child_env

PACKAGE = ROOT / "mlagents_inference"
MODULES = sorted(p for p in PACKAGE.rglob("*.py") if "__pycache__" not in p.parts)
LONGEST_CHAIN = 10  # modules in the longest import chain, the command line included


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(path: Path, top_level_only: bool = False) -> list:
    """(module imported, names) of each of the package's imports in `path`: inside functions too unless
    `top_level_only`; never under `if TYPE_CHECKING:` (annotations: no import at run time)."""
    here = module_name(path).split(".")
    package = here if path.name == "__init__.py" else here[:-1]
    found = []

    def visit(node):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                continue
            if isinstance(child, ast.ImportFrom):
                if child.level:
                    base = package[: len(package) - child.level + 1]
                    target = ".".join(base + ([child.module] if child.module else []))
                else:
                    target = child.module or ""
                if target.startswith("mlagents_inference"):
                    found.append((target, [a.name for a in child.names]))
            elif not top_level_only or not isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                visit(child)

    visit(ast.parse(path.read_text()))
    return found


def import_graph(top_level_only: bool = False) -> dict:
    """module -> the package's modules it imports (`from .pkg import module` counted as that module), and the command
    line -> every mode's module (it imports them by name, importlib)."""
    known = {module_name(p) for p in MODULES}
    graph = {}
    for path in MODULES:
        deps = set()
        for target, names in imports(path, top_level_only):
            submodules = [f"{target}.{n}" for n in names if f"{target}.{n}" in known]
            deps.update(submodules or [target])
        graph[module_name(path)] = deps - {module_name(path)}
    if not top_level_only:
        from mlagents_inference.fronts.cli import MODES

        cli = "mlagents_inference.fronts.cli"
        graph[cli] |= {f"mlagents_inference.fronts.{module}" for module, _, _ in MODES.values()}
        graph[cli].add("mlagents_inference.fronts.ray_serve")  # (serve --ray)
    return graph


def longest_chain(graph: dict) -> list:
    memo: dict = {}

    def chain(m, trail=()):
        assert m not in trail, f"import cycle: {' -> '.join(trail + (m,))}"
        if m not in memo:
            memo[m] = [m] + max((chain(d, trail + (m,)) for d in graph.get(m, ()) if d in graph), key=len, default=[])
        return memo[m]

    return max((chain(m) for m in graph), key=len)


def lines(path: Path) -> int:
    return len(path.read_text().splitlines())


def test_the_door_is_short_and_the_rooms_readable():
    assert lines(ROOT / "inference.py") <= 80
    sizes = {module_name(p): lines(p) for p in MODULES}
    assert max(sizes.values()) <= 900, sizes


def test_the_longest_import_chain_is_at_most_ten_modules():
    """Imports inside functions and the command line's dispatch by name counted, TYPE_CHECKING not."""
    chain = longest_chain(import_graph())
    assert len(chain) <= LONGEST_CHAIN, " -> ".join(m.replace("mlagents_inference.", "") for m in chain)


def test_every_module_declares_its_public_names_and_no_underscored_name_crosses_modules():
    crossing = []
    for path in MODULES + [
        ROOT / "inference.py",
        *sorted((ROOT / "tools").glob("*.py")),
        *sorted(Path(__file__).parent.glob("*.py")),
    ]:
        for target, names in imports(path):
            crossing += [
                f"{path.relative_to(ROOT)}: {target}.{n}"
                for n in names
                if n.startswith("_") and n != "__version__" and not (n == "__doc__" and target == "mlagents_inference")
            ]
    assert not crossing, crossing
    missing, stale = [], []
    for path in MODULES:
        tree = ast.parse(path.read_text())
        declared = next(
            (
                ast.literal_eval(node.value)
                for node in tree.body
                if isinstance(node, ast.Assign)
                and any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets)
            ),
            None,
        )
        if declared is None:
            missing.append(module_name(path))
            continue
        defined = set()
        for node in tree.body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                defined.add(node.name)
            for target in getattr(node, "targets", [getattr(node, "target", None)]):
                for name in getattr(target, "elts", [target]):
                    if isinstance(name, ast.Name):
                        defined.add(name.id)
        public = {n for n in defined if not n.startswith("_")}
        if path.name != "__init__.py" and set(declared) != public:
            stale.append(f"{module_name(path)}: {sorted(set(declared) ^ public)}")
    assert not missing and not stale, (missing, stale)
    used = {}  # every name another module imports is in its module's __all__
    for path in MODULES:
        for target, names in imports(path):
            used.setdefault(target, set()).update(names)
    for path in MODULES:
        tree = ast.parse(path.read_text())
        declared = next(
            ast.literal_eval(node.value)
            for node in tree.body
            if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets)
        )
        known_sub = {module_name(p).rsplit(".", 1)[-1] for p in MODULES}
        extra = {
            n
            for n in used.get(module_name(path), ())
            if n not in declared and n not in known_sub and not n.startswith("__")
        }
        assert not extra, (module_name(path), extra)


def python(code: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", code],
        cwd=cwd,
        env=child_env(PYTHONPATH=str(ROOT)),
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_import_inference_and_help_need_no_torch():
    r = python("import sys; sys.modules['torch'] = None; import inference; inference.main(['--help'])")
    assert r.returncode == 0, r.stderr
    assert "--mode" in r.stdout and not r.stderr


def test_the_torch_free_bottom_and_the_door_import_no_torch():
    bottom = [module_name(p).replace("mlagents_inference.", "") for p in MODULES if p.parent.name == "core"] + [
        "engines.devices",
        "engines.factory",
        "loaders.onnx_file",
        "api.contract",
        "api.policy",
        "services.protocol",
        "services.context",
        "fronts.show",
        "fronts.cli",
        "fronts.remote",
        "fronts.stream",
        "fronts.serve",
    ]
    r = python(
        "import sys, importlib, inference\n"
        f"for m in {bottom!r}: importlib.import_module('mlagents_inference.' + m)\n"
        "print(sorted(m for m in sys.modules if m == 'torch' or m.startswith('torch.')))"
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "[]"


def test_checkpoints_lists_without_torch(tmp_path):
    """`--mode checkpoints` lists files: it runs with torch unimportable (the mode imports it when needed)."""
    code = (
        "import sys; sys.modules['torch'] = None; import inference; "
        f"sys.exit(inference.main(['--mode', 'checkpoints', '--model-dir', {str(ROOT / 'examples' / 'vector')!r}, "
        f"'--json']))"
    )
    r = python(code, tmp_path)
    assert r.returncode == 0, r.stderr
    assert [row["file"] for row in json.loads(r.stdout)["checkpoints"]]
    r = python(code.replace("'checkpoints'", "'export-onnx'"), tmp_path)  # a mode that needs torch says so in one line
    assert r.returncode == 2 and r.stderr.strip().count("\n") == 0 and 'pip install ".[torch]"' in r.stderr, r.stderr


def test_version():
    r = subprocess.run(
        [sys.executable, str(ROOT / "inference.py"), "--version"],
        env=child_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    import mlagents_inference

    assert r.returncode == 0 and r.stdout.strip() == f"mlagents-inference {mlagents_inference.__version__}"


def tool(name: str) -> str:
    found = shutil.which(name, path=str(Path(sys.executable).parent)) or shutil.which(name)
    if found is None:
        pytest.skip(f"{name} is not installed (pip install -r requirements.txt)")
    return found


def test_ruff_is_clean_and_the_code_formatted():
    """pyflakes, import order, lines of at most 120 characters, mccabe complexity at most 15; `ruff format`."""
    r = subprocess.run(
        [tool("ruff"), "check", "--no-cache", "."], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert r.returncode == 0, r.stdout + r.stderr
    r = subprocess.run(
        [tool("ruff"), "format", "--check", "--no-cache", "."], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert r.returncode == 0, r.stdout + r.stderr


def test_layers_contract_holds():
    r = subprocess.run([tool("lint-imports"), "--no-cache"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and "0 broken" in r.stdout, r.stdout[-3000:] + r.stderr[-2000:]


def test_no_module_level_import_cycle():
    """Module-level imports between the package's modules form no cycle (imports inside functions are the layers'
    business, checked by lint-imports)."""
    longest_chain(import_graph(top_level_only=True))  # (it refuses a cycle)


def test_architecture_page_names_every_module():
    page = (ROOT / "docs" / "architecture.md").read_text()
    missing = [
        module_name(p)
        for p in MODULES
        if p.name != "__init__.py" and f"`{module_name(p).split('.', 1)[1]}`" not in page
    ]
    assert not missing, missing


def test_no_stray_copies_are_tracked():
    if not (ROOT / ".git").exists() or shutil.which("git") is None:
        pytest.skip("not a git checkout")
    tracked = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    assert [f for f in tracked if "/" not in f and f.endswith(".py")] == ["inference.py"]
    assert not [f for f in tracked if Path(f).name.startswith(".bis_") or f.endswith((".orig", ".rej"))]


@pytest.fixture(scope="module")
def pyz(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("dist") / "mlagents-infer.pyz"
    r = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "build_pyz.py"), "--output", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr
    return out


def test_the_pyz_runs_from_anywhere_offline(pyz, tmp_path):
    r = subprocess.run(
        [sys.executable, str(pyz), "--mode", "info", "--json"],
        cwd=tmp_path,
        env=child_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr
    info = json.loads(r.stdout)
    assert info["passed"] and info["behavior"] == "Huggy" and info["source"] == "bundled sample"
    assert not list(tmp_path.iterdir())  # nothing written where it ran


def test_the_pyz_answers_as_inference_py(pyz, tmp_path):
    args = [
        "--mode",
        "action",
        "--model-dir",
        str(ROOT / "examples" / "vector"),
        "--obs",
        "random",
        "--seed",
        "0",
        "--json",
    ]
    answers = []
    for program in (pyz, ROOT / "inference.py"):
        r = subprocess.run(
            [sys.executable, str(program), *args],
            cwd=tmp_path,
            env=child_env(),
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert r.returncode == 0, r.stderr
        answers.append(json.loads(r.stdout))
    assert answers[0]["continuous_actions"] == answers[1]["continuous_actions"]
    assert len(answers[0]["continuous_actions"]) > 0


def test_the_pyz_unpacks_its_sample_into_a_private_temporary_folder(pyz, tmp_path, monkeypatch):
    from mlagents_inference.core import sources

    monkeypatch.setattr(sources, "HERE", pyz)
    monkeypatch.setattr(sources, "BUNDLED_MODEL_DIR", pyz / sources.SAMPLE)
    monkeypatch.setattr(sources.tempfile, "tempdir", str(tmp_path))
    folder = sources.bundled_model_dir.__wrapped__()
    assert folder.parent == tmp_path and folder.name.startswith("mlagents-infer-sample-")
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    assert sources.find_behavior(folder) == "Huggy"
    assert (folder / "Huggy" / "Huggy-600017.pt").read_bytes() == (
        ROOT / sources.SAMPLE / "Huggy" / "Huggy-600017.pt"
    ).read_bytes()


def test_the_pyz_removes_its_unpacked_sample_at_exit(pyz, tmp_path):
    env = {**child_env(), "TMPDIR": str(tmp_path)}
    run_in = tmp_path / "cwd"
    run_in.mkdir()
    for args in (["--mode", "action", "--json"], ["--mode", "checkpoints", "--model-dir", "no-such-folder"]):
        r = subprocess.run(
            [sys.executable, str(pyz), *args], cwd=run_in, env=env, capture_output=True, text=True, timeout=300
        )
        assert r.returncode == (0 if args[1] == "action" else 2), r.stderr
    assert not list(tmp_path.glob("mlagents-infer-*")) and not list(run_in.iterdir())
    assert os.path.getsize(pyz) > 1 << 20
