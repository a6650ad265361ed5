"""What gets installed: one `voxrelay` package (its data and C extension included) that
works outside the repository, sources that import only through that namespace, and a
Dockerfile whose steps are checked as far as they can be without building it."""

import ast
import json
import re
import shlex
import shutil
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import psutil
import pytest

ROOT = Path(__file__).resolve().parents[1]
STAGE_PACKAGES = ("asr", "llm", "tts", "ipc", "pipeline")  # installed as voxrelay.<name>
SOURCE_DIRS = (*STAGE_PACKAGES, "bench", "tests")
# Copied for the wheel build: the tree as git would see it, less what .gitignore drops.
NOT_SOURCES = {".venv", ".git", "build", "__pycache__", ".pytest_cache", ".ruff_cache",
               ".mypy_cache", ".hypothesis", "reply.wav", "traces.jsonl"}  # fmt: skip
# Calls whose first argument names a module: a string there can regress the namespace too.
MODULE_NAME_CALLS = {"import_module", "__import__", "find_spec", "patch", "setattr"}


def _ignore(directory: str, names: list[str]) -> set[str]:
    return {n for n in names if n in NOT_SOURCES or n.endswith((".so", ".egg-info"))}


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """The wheel `pip wheel` builds from a copy of the tree (so no build/ or egg-info
    lands in the working tree other engineers share)."""
    work = tmp_path_factory.mktemp("wheel")
    source = work / "src"
    shutil.copytree(ROOT, source, symlinks=True, ignore=_ignore)
    command = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation"]
    built = subprocess.run(
        [*command, "-w", str(work / "dist"), str(source)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
    (found,) = (work / "dist").glob("voxrelay-*.whl")
    return found


def _package_sources() -> list[str]:
    """voxrelay/<package>/<path> of every Python file and data file the stages ship."""
    shipped = []
    for package in STAGE_PACKAGES:
        for path in sorted((ROOT / package).rglob("*")):
            relative = path.relative_to(ROOT / package)
            if "__pycache__" in relative.parts or not path.is_file():
                continue
            if path.suffix == ".py" or path.name in ("manifest.toml", "index.html"):
                shipped.append(f"voxrelay/{package}/{relative}")
    return shipped


@pytest.mark.slow
def test_wheel_installs_only_voxrelay_with_its_data_and_extension(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    top = {name.split("/")[0] for name in names}
    assert top == {"voxrelay", "voxrelay-0.1.0.dist-info"}, sorted(top)
    dist_info = "voxrelay-0.1.0.dist-info"
    text = {n: zipfile.ZipFile(wheel).read(n).decode() for n in names if n.startswith(dist_info)}
    assert text.get(f"{dist_info}/top_level.txt", "voxrelay\n").split() == ["voxrelay"]
    assert "voxrelay = voxrelay.pipeline.cli:main" in text[f"{dist_info}/entry_points.txt"]
    missing = sorted(set(_package_sources()) - set(names))
    assert not missing, f"in the tree but not in the wheel (pyproject.toml packages?): {missing}"
    for data in ("voxrelay/pipeline/manifest.toml", "voxrelay/pipeline/web/index.html"):
        assert data in names
    kernels = [n for n in names if re.fullmatch(r"voxrelay/llm/_kernels.*\.so", n)]
    if list((ROOT / "llm").glob("_kernels*.so")):  # this machine compiles the extension
        assert len(kernels) == 1, kernels
    assert not [n for n in names if "__pycache__" in n or n.endswith(".c")]


@pytest.mark.slow
def test_unpacked_wheel_runs_from_outside_the_repository(wheel, tmp_path):
    unpacked = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(unpacked)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {"PYTHONPATH": str(unpacked), "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    cli = subprocess.run(
        [sys.executable, "-m", "voxrelay.pipeline.cli", "--help"],
        cwd=elsewhere,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert cli.returncode == 0, cli.stderr
    assert "serve" in cli.stdout and "models" in cli.stdout
    probe = (
        "import importlib.util, json, voxrelay, voxrelay.pipeline.cli as cli\n"
        "from voxrelay.pipeline import models, ws\n"
        "kernels = importlib.util.find_spec('voxrelay.llm._kernels')\n"
        "print(json.dumps({'voxrelay': voxrelay.__file__, 'cli': cli.__file__,"
        " 'page': str(ws.PAGE), 'page_exists': ws.PAGE.is_file(),"
        " 'assets': sorted(models.load_manifest()),"
        " 'kernels': kernels.origin if kernels else None,"
        " 'top_level': [m for m in ('asr', 'llm', 'tts', 'ipc', 'pipeline', 'bench', 'tests')"
        " if importlib.util.find_spec(m) is not None]}))\n"
    )
    found = subprocess.run(
        [sys.executable, "-c", probe],
        cwd=elsewhere,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    where = json.loads(found.stdout)
    for key in ("voxrelay", "cli", "page"):
        assert where[key].startswith(str(unpacked)), where
    assert where["page_exists"] and "smollm2" in where["assets"]
    assert where["top_level"] == [], "a top-level stage package is importable"
    if list((ROOT / "llm").glob("_kernels*.so")):
        assert where["kernels"] and where["kernels"].startswith(str(unpacked)), where


def _stray_imports(path: Path, root: Path = ROOT) -> list[str]:
    """Imports of a top-level stage package (`import llm`, `from pipeline.x import y`, a
    module name string handed to importlib, mock or `python -m`) in one source file."""
    tree = ast.parse(path.read_text(), str(path))
    stray = []

    def check(name: str | None, line: int) -> None:
        if name and name.split(".")[0] in STAGE_PACKAGES:
            stray.append(f"{path.relative_to(root)}:{line}: {name}")

    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                check(alias.name, node.lineno)
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            check(node.module, node.lineno)
        elif isinstance(node, ast.Call) and node.args:
            func = node.func
            called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            first = node.args[0]
            if called in MODULE_NAME_CALLS and isinstance(first, ast.Constant):
                check(str(first.value), node.lineno)
        elif isinstance(node, ast.List | ast.Tuple):
            items = [e.value if isinstance(e, ast.Constant) else None for e in node.elts]
            for flag, module in zip(items, items[1:], strict=False):
                if flag == "-m" and isinstance(module, str):
                    check(module, node.lineno)
    return stray


def test_no_source_imports_a_top_level_stage_package():
    files = [p for d in SOURCE_DIRS for p in sorted((ROOT / d).rglob("*.py"))]
    assert len(files) > 100, "the walk found too few sources"
    stray = [hit for path in files for hit in _stray_imports(path)]
    assert not stray, "import through voxrelay.<package> instead:\n" + "\n".join(stray)


def test_the_import_check_catches_each_form(tmp_path):
    sample = tmp_path / "sample.py"
    sample.write_text(
        "import llm.engine\n"
        "from pipeline.run import Pipeline\n"
        "from . import sibling\n"
        "import voxrelay.asr.stream\n"
        "importlib.import_module('tts.voice')\n"
        "cmd = [sys.executable, '-m', 'pipeline.worker']\n"
        "label = 'pipeline.out'\n"
    )
    hits = [hit.split(": ")[1] for hit in _stray_imports(sample, tmp_path)]
    assert hits == ["llm.engine", "pipeline.run", "tts.voice", "pipeline.worker"]


# The Dockerfile: no registry for base images here, so it is read, not built.


def _instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) of the Dockerfile, continuation lines joined."""
    text = (ROOT / "Dockerfile").read_text()
    joined = re.sub(r"\\\n", " ", "\n".join(line for line in text.splitlines()
                                             if not line.lstrip().startswith("#")))  # fmt: skip
    steps = []
    for line in joined.splitlines():
        if line.strip():
            instruction, _, arguments = line.strip().partition(" ")
            steps.append((instruction.upper(), " ".join(arguments.split())))
    return steps


def _index(steps: list[tuple[str, str]], pattern: str) -> int:
    for index, (instruction, arguments) in enumerate(steps):
        if re.search(pattern, f"{instruction} {arguments}"):
            return index
    raise AssertionError(f"no Dockerfile step matches {pattern!r}")


def test_dockerfile_installs_cpu_torch_before_the_package_and_fetches_the_models():
    steps = _instructions()
    assert steps[0][0] == "FROM" and steps[0][1].startswith("python:3.11-slim")
    makefile_pin = re.search(r"pip install .*?(torch==[\d.]+)", (ROOT / "Makefile").read_text())
    assert makefile_pin is not None
    torch = _index(steps, rf"RUN .*pip install .*{re.escape(makefile_pin.group(1))}")
    index = re.search(r"--index-url \S+", steps[torch][1])
    assert index is not None, "torch must come from the CPU index"
    arguments = dict(a.partition("=")[::2] for i, a in steps if i == "ARG")
    url = re.sub(r'"?\$\{?(\w+)\}?"?', lambda m: arguments.get(m.group(1), "?"), index.group())
    assert "download.pytorch.org/whl/cpu" in url, "torch must come from the CPU index"
    # The package itself: its wheel (or the source tree) installed, not an editable install.
    package = _index(steps, r"RUN .*pip install [^&]*(voxrelay\S*\.whl|\s\.(\s|$))")
    assert torch < package
    assert " -e " not in steps[package][1] and "--editable" not in steps[package][1]
    home = _index(steps, r"ENV .*VOXRELAY_HOME=")
    fetch = _index(steps, r"RUN .*voxrelay models fetch")
    assert package < fetch and home < fetch
    fetched = steps[fetch][1].split("voxrelay models fetch", 1)[1].split("&&")[0].split()
    assert fetched == [], f"fetch the manifest's default set (no names), got {fetched}"
    user = _index(steps, r"^USER ")
    assert steps[user][1] not in ("root", "0") and fetch < user


def _health_command() -> list[str]:
    health = _instructions()[_index(_instructions(), r"^HEALTHCHECK ")][1]
    return json.loads(health.split(" CMD ", 1)[1])


def test_dockerfile_serves_on_all_interfaces_with_a_health_check_on_a_served_path():
    steps = _instructions()
    cmd = json.loads(steps[_index(steps, r"^CMD ")][1])
    assert cmd[:2] == ["voxrelay", "serve"] and cmd[cmd.index("--host") + 1] == "0.0.0.0"
    port = cmd[cmd.index("--port") + 1] if "--port" in cmd else "8765"
    assert steps[_index(steps, r"^EXPOSE ")][1].split() == [port]
    health = " ".join(_health_command())
    url = re.search(r"http://(?:127\.0\.0\.1|localhost):(\d+)(/[\w/.]*)", health)
    assert url is not None and url.group(1) == port, health
    served = (ROOT / "pipeline" / "ws.py").read_text()
    assert f'"{url.group(2)}"' in served, f"{url.group(2)} is not a path pipeline/ws.py serves"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """A real `voxrelay serve` that does not restart a stage that dies."""
    from tests.pipeline.serve_process import ServeProcess

    workdir = tmp_path_factory.mktemp("health")
    with pytest.MonkeyPatch.context() as env:
        env.setenv("VOXRELAY_PIPELINE_MAX_RESTARTS", "0")
        process = ServeProcess(workdir)
    yield process
    process.stop()


def _health(port: int, token: str | None) -> subprocess.CompletedProcess[str]:
    """The Dockerfile's HEALTHCHECK command, run here against `port`."""
    command = [arg.replace(":8765/", f":{port}/") for arg in _health_command()]
    command[0] = sys.executable if command[0] == "python" else command[0]
    env = {"PATH": "/usr/bin:/bin", **({"VOXRELAY_TOKEN": token} if token else {})}
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=30)


@pytest.mark.slow
def test_health_check_passes_on_a_running_server_and_fails_without_its_token(server):
    from tests.pipeline.serve_process import TOKEN

    healthy = _health(server.port, TOKEN)
    assert healthy.returncode == 0, healthy.stderr
    refused = _health(server.port, None)  # /metrics is behind the token
    assert refused.returncode != 0 and "401" in refused.stderr


@pytest.mark.slow
def test_health_check_fails_once_a_stage_is_down_for_good(server):
    from tests.pipeline.serve_process import TOKEN

    victim = psutil.Process(server.stage_pids()["tts"])
    victim.kill()
    victim.wait(10)
    deadline = time.monotonic() + 10
    while _health(server.port, TOKEN).returncode == 0:
        assert time.monotonic() < deadline, "still healthy 10 s after the TTS died for good"
        time.sleep(0.5)


def test_every_path_the_dockerfile_copies_exists():
    for instruction, arguments in _instructions():
        if instruction not in ("COPY", "ADD"):
            continue
        if "--from=" in arguments:
            continue  # from an earlier build stage, not from the repository
        words = [w for w in shlex.split(arguments) if not w.startswith("--")]
        for source in words[:-1]:
            assert (ROOT / source).exists(), f"{instruction} {source}: no such path"
            assert not _ignored_by_dockerignore(source), f"{source} is in .dockerignore"


def _ignored_by_dockerignore(source: str) -> bool:
    patterns = [
        line.strip()
        for line in (ROOT / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    top = source.strip("/").split("/")[0]
    return any(p.strip("/") == top for p in patterns if not p.startswith("!"))


def test_scaling_doc_cites_only_figures_bench_results_has():
    results = json.loads((ROOT / "bench" / "results.json").read_text())
    text = (ROOT / "docs" / "scaling.md").read_text()
    cited = set(re.findall(r"`((?:ws|sip|e2e|asr|llm|tts|ipc)\.[\w.]+)`", text))
    assert {"ws.ttfa_ms.p50.4", "sip.ttfa_ms.p95.4"} <= cited
    assert not cited - set(results), f"not in bench/results.json: {sorted(cited - set(results))}"
