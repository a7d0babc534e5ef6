"""The package reads nothing of the checkout it was built from (issue 33): the best-known results the
diagnosis reads are package data (kernelgym_gap/data/, through importlib.resources), no module names a
results/ path or climbs out of the package from its own __file__, and a non-editable install (a wheel built
from the package, installed into a fresh venv, run from a directory outside the checkout) runs `tasks`,
`eval` and the Gymnasium env.

The built-in tasks and agents are package data too (setup.py maps the checkout's tasks/ and agents/ into the
package; core/builtin.py reads them through importlib.resources): the installed package runs its own
built-in tasks and agents with no --tasks-dir. The one place that names the folder holding the package is
listed below (ALLOWED_OUTSIDE)."""
from __future__ import annotations

import ast
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PKG = ROOT / "kernelgym_gap"

# (module, line's text fragment) -> why it may reach outside the package. Keep this short: each is a gap
# an installed package has.
ALLOWED_OUTSIDE = {
    ("kernelgym_gap/core/builtin.py", "PACKAGE_PARENT = Path(__file__).resolve().parents[2]"):
        "the folder holding the package (site-packages when installed), which the sandbox binds and puts on the "
        "child's PYTHONPATH; and the fallback of an editable install made before setup.py mapped tasks/ and "
        "agents/ into the package (core/builtin.py says so)",
}
ALLOWED_RESULTS = {
    ("kernelgym_gap/cli/bench.py", "results/bench"):
        "`bench`'s default output folder, relative to the user's working directory, not the checkout",
}


# ------------------------------------------------------------------------------------- the source scan

def _docstrings(tree: ast.AST) -> set[int]:
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                out.add(id(first.value))
    return out


def _levels(node: ast.AST) -> int | None:
    """How many directories up from the module's own file `node` points (1: the module's folder), or None
    when `node` is not a path derived from __file__."""
    if isinstance(node, ast.Name) and node.id == "__file__":
        return 0
    if isinstance(node, ast.Call):
        f = node.func
        name = f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", None)
        if name in ("Path", "PurePath", "abspath", "realpath", "normpath") and node.args:
            return _levels(node.args[0])
        if name == "dirname" and node.args:
            up = _levels(node.args[0])
            return None if up is None else up + 1
        if name in ("resolve", "absolute") and isinstance(f, ast.Attribute):
            return _levels(f.value)
    if isinstance(node, ast.Attribute) and node.attr == "parent":
        up = _levels(node.value)
        return None if up is None else up + 1
    if (isinstance(node, ast.Subscript) and isinstance(node.value, ast.Attribute) and node.value.attr == "parents"
            and isinstance(node.slice, ast.Constant) and isinstance(node.slice.value, int)):
        up = _levels(node.value.value)
        return None if up is None else up + node.slice.value + 1
    return None


def checkout_reads(rel: str, source: str) -> list[tuple[str, int, str]]:
    """The places in one module (`rel`, a path from the checkout root) that read the checkout's layout:
    ("outside", line, text) for a path from __file__ that climbs above kernelgym_gap/, ("results", line,
    text) for a results/ path (a string starting with results/, or a path joined with "results")."""
    tree = ast.parse(source)
    lines = source.splitlines()
    docs = _docstrings(tree)
    limit = len(Path(rel).parts) - 1          # kernelgym_gap/a/b.py: 2 levels up is kernelgym_gap/ itself
    found = []
    for node in ast.walk(tree):
        line = getattr(node, "lineno", 0)
        text = lines[line - 1].strip() if line else ""
        up = _levels(node)
        if up is not None and up > limit:
            found.append(("outside", line, text))
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs:
            if node.value.startswith(("results/", "./results/")):
                found.append(("results", line, node.value))
        if (isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div)
                and any(isinstance(s, ast.Constant) and s.value == "results" for s in (node.left, node.right))):
            found.append(("results", line, text))
        if isinstance(node, ast.Call) and any(isinstance(a, ast.Constant) and a.value == "results"
                                              for a in node.args):
            f = node.func
            if (f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", None)) in ("Path", "join", "joinpath"):
                found.append(("results", line, text))
    return sorted(set(found), key=lambda x: x[1])


def _allowed(rel: str, kind: str, text: str) -> bool:
    table = ALLOWED_OUTSIDE if kind == "outside" else ALLOWED_RESULTS
    return any(rel == m and frag in text for (m, frag) in table)


def test_the_scan_catches_what_the_issue_named():
    old = 'from pathlib import Path\nBEST_KNOWN = Path(__file__).resolve().parents[2] / "results" / "best_known.json"\n'
    kinds = {k for k, _, _ in checkout_reads("kernelgym_gap/judge/measure.py", old)}
    assert kinds == {"outside", "results"}
    climbs = ("import os\nfrom pathlib import Path\n"
              "A = Path(__file__).parent.parent.parent / 'tasks'\n"
              "B = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))\n"
              "C = Path('results/x.json')\n")
    assert [(k, n) for k, n, _ in checkout_reads("kernelgym_gap/a/b.py", climbs)] == [
        ("outside", 3), ("outside", 4), ("results", 5)]
    inside = ("from pathlib import Path\nHERE = Path(__file__).resolve().parent\n"
              "PKG = Path(__file__).resolve().parents[1]\n"
              "def f():\n    '''reads results/ never'''\n    return 'results database'\n")
    assert checkout_reads("kernelgym_gap/a/b.py", inside) == []


def test_no_module_reads_results_or_climbs_out_of_the_package():
    offending, used = [], set()
    for path in sorted(PKG.rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        for kind, line, text in checkout_reads(rel, path.read_text()):
            if _allowed(rel, kind, text):
                used.add((rel, kind))
            else:
                offending.append(f"{rel}:{line}: {kind}: {text}")
    assert offending == [], "the package reads the checkout:\n" + "\n".join(offending)
    # every exception is still needed (a stale one would hide a new read in the same module)
    assert used == {(m, "outside") for m, _ in ALLOWED_OUTSIDE} | {(m, "results") for m, _ in ALLOWED_RESULTS}


def test_best_known_is_package_data_read_through_importlib_resources():
    from kernelgym_gap.judge import measure
    path = Path(str(measure.BEST_KNOWN))
    assert path == PKG / "data" / "best_known.json" and path.is_file()
    assert not (ROOT / "results" / "best_known.json").exists()     # moved, not copied: one file to update
    data = json.loads(path.read_text())
    device, tasks = next(iter(data.items()))
    task, by_dsl = next(iter(tasks.items()))
    dsl, e = next(iter(by_dsl.items()))
    assert measure.best_known_efficiency(task, dsl, device) == e
    assert measure.best_known_efficiency(task, dsl, "No Such GPU") is None
    assert '"kernelgym_gap" = ["data/*.json"]' in (ROOT / "pyproject.toml").read_text()


# ------------------------------------------------------------------------------ a non-editable install

GELU = ROOT / "tasks" / "elementwise" / "gelu"


def _run(argv, cwd, env, timeout=150):
    return subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def installed():
    """A wheel built from a copy of the package (the checkout gets no build/ folder), installed with pip
    --no-deps into a fresh venv. torch, triton and gymnasium come from this interpreter's site-packages,
    named in a .pth file of the new venv: a plain path line, so that folder's own .pth files (the editable
    install's finder) are not run and the venv's non-editable copy is the kernelgym_gap it imports."""
    # not pytest's tmp_path: it sits under a 0700 directory that the sandbox's unprivileged uid cannot enter,
    # and the child runs the venv's python and reads the tasks from here
    base = Path(tempfile.mkdtemp(prefix="kgg-installed-"))
    base.chmod(0o755)
    try:
        yield _install(base)
    finally:
        shutil.rmtree(base, ignore_errors=True)


def _install(base: Path) -> dict:
    src = base / "src"
    src.mkdir()
    for name in ("pyproject.toml", "setup.py", "README.md"):
        shutil.copy(ROOT / name, src / name)
    for name in ("kernelgym_gap", "tasks", "agents"):      # what setup.py builds the package from
        shutil.copytree(ROOT / name, src / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    build = _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", str(src),
                  "-w", str(base / "wheel")], base, None, timeout=240)
    assert build.returncode == 0, build.stdout[-2000:] + build.stderr[-2000:]
    wheel = next((base / "wheel").glob("kernelgym_gap-*.whl"))
    venv = base / "venv"
    made = _run([sys.executable, "-m", "venv", "--without-pip", str(venv)], base, None)
    assert made.returncode == 0, made.stderr
    python = venv / "bin" / "python"
    inst = _run([sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-deps", str(wheel)],
                base, None, timeout=240)
    assert inst.returncode == 0, inst.stdout[-2000:] + inst.stderr[-2000:]
    site = Path(_run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                     base, None).stdout.strip())
    (site / "zz_checkout_deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    work = base / "elsewhere"                     # outside the checkout: nothing of it on sys.path
    tasks = work / "my_tasks" / "elementwise"
    shutil.copytree(GELU, tasks / "gelu", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    shutil.copy(GELU / "solutions" / "triton_blocked.py", work / "gelu_blocked.py")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "KERNELGYM"))}
    env.update(PATH=f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}", PYTHONNOUSERSITE="1",
               KERNELGYM_GAP_DB=str(base / "none.sqlite3"))
    return {"venv": venv, "python": python, "site": site, "work": work, "tasks": work / "my_tasks", "env": env}


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_the_installed_package_is_its_own_copy_with_its_data(installed):
    probe = ("import kernelgym_gap, json\n"
             "from kernelgym_gap.judge import measure\n"
             "print(json.dumps([kernelgym_gap.__file__, str(measure.BEST_KNOWN), measure.BEST_KNOWN.is_file()]))")
    proc = _run([str(installed["python"]), "-c", probe], installed["work"], installed["env"])
    assert proc.returncode == 0, proc.stderr[-2000:]
    pkg_file, best, present = json.loads(proc.stdout.strip().splitlines()[-1])
    assert Path(pkg_file).is_relative_to(installed["site"]), pkg_file      # not the checkout's editable copy
    assert Path(best).is_relative_to(installed["site"]) and present


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_installed_carries_its_built_in_tasks_and_agents(installed):
    """No --tasks-dir: the installed package lists and evaluates its own built-in tasks, read from inside
    itself (kernelgym_gap/builtin_tasks), and finds its agents there too."""
    env, work = installed["env"], installed["work"]
    listed = _run(["kernelgym-gap", "tasks", "--json"], work, env)
    assert listed.returncode == 0, listed.stderr[-2000:]
    ids = {t["id"] for t in json.loads(listed.stdout)}
    assert "kernelgym_gap/GELU-v1" in ids and "kernelgym_gap/LayerNorm-v1" in ids
    shipped = installed["site"] / "kernelgym_gap" / "builtin_tasks"
    assert len(ids) == len(list(shipped.glob("*/*/task.py"))) > 40      # every task folder shipped is listed
    probe = ("import json\nfrom kernelgym_gap.core import registry\nfrom kernelgym_gap.api import agent\n"
             "print(json.dumps([str(registry.DEFAULT_TASKS_DIR), str(agent.AGENTS_DIR), agent.available_agents()]))")
    proc = _run([str(installed["python"]), "-c", probe], work, env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    tasks_dir, agents_dir, agents = json.loads(proc.stdout.strip().splitlines()[-1])
    assert Path(tasks_dir) == installed["site"] / "kernelgym_gap" / "builtin_tasks"
    assert Path(agents_dir) == installed["site"] / "kernelgym_gap" / "builtin_agents"
    assert agents == sorted(p.stem for p in (ROOT / "agents").glob("*.py") if not p.stem.startswith("_"))
    ev = _run(["kernelgym-gap", "eval", "--task", "GELU", "--backend", "cpu", "--json", "gelu_blocked.py"],
              work, env, timeout=300)
    assert ev.returncode == 0, ev.stdout[-2000:] + ev.stderr[-3000:]
    record = json.loads(ev.stdout)
    assert record["task"] == "kernelgym_gap/GELU-v1" and record["status"] == "ok" and record["correct"] is True


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_installed_runs_tasks_and_eval_with_a_tasks_dir(installed):
    env, work, tasks = installed["env"], installed["work"], str(installed["tasks"])
    listed = _run(["kernelgym-gap", "tasks", "--tasks-dir", tasks], work, env)
    assert listed.returncode == 0, listed.stderr[-2000:]
    assert "kernelgym_gap/GELU-v1" in listed.stdout
    ev = _run(["kernelgym-gap", "eval", "--task", "GELU", "--backend", "cpu", "--tasks-dir", tasks, "--json",
               "gelu_blocked.py"], work, env, timeout=300)
    assert ev.returncode == 0, ev.stdout[-2000:] + ev.stderr[-3000:]
    record = json.loads(ev.stdout)
    assert record["task"] == "kernelgym_gap/GELU-v1" and record["status"] == "ok" and record["correct"] is True


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_installed_env_steps(installed):
    script = ("import json, gymnasium as gym, kernelgym_gap\n"
              "from kernelgym_gap.core.registry import TaskRegistry\n"
              f"kernelgym_gap.register_envs(TaskRegistry({str(installed['tasks'])!r}))\n"
              "env = gym.make('kernelgym_gap/GELU-v1', backend='cpu', max_steps=1)\n"
              "obs, info = env.reset(seed=0)\n"
              "obs, reward, term, trunc, info = env.step(open('gelu_blocked.py').read())\n"
              "env.close()\n"
              "print(json.dumps({'reward': reward, 'done': term or trunc, 'status': info['status'], "
              "'correct': info['correct'], 'file': kernelgym_gap.__file__}))\n")
    proc = _run([str(installed["python"]), "-c", script], installed["work"], installed["env"], timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert Path(out["file"]).is_relative_to(installed["site"])
    assert out["status"] == "ok" and out["correct"] is True and out["reward"] == 1.0 and out["done"]
