"""One import namespace and a layered command: what a user of the installed package sees."""

from __future__ import annotations

import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PARTS = ("huddle.chaos", "huddle.client", "huddle.pipeline", "huddle.sim")


def python(code: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code], cwd=cwd, capture_output=True, text=True, timeout=60
    )


def test_every_package_in_the_tree_is_packaged() -> None:
    """pyproject lists packages and their folders by hand; a new subpackage must be added."""
    setuptools = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
    roots = ("cli", "protocol", "coordinator", "client", "chaos", "testing", "pipeline", "sim")
    found = {
        ".".join(init.parent.relative_to(REPO / root).parts)
        for root in roots
        for init in (REPO / root).glob("huddle/**/__init__.py")
    }
    assert found == set(setuptools["packages"])
    for package, folder in setuptools["package-dir"].items():
        assert (REPO / folder / "__init__.py").is_file(), package


@pytest.mark.e2e
def test_huddle_serve_loads_no_member_chaos_or_pipeline_code() -> None:
    code = """
import sys
import huddle.coordinator.server as server

async def serve(config):
    print(" ".join(sorted(m for m in sys.modules if m.startswith("huddle"))))

server.serve = serve
from huddle.cli import main
sys.exit(main(["serve", "--port", "0", "--log-level", "warning"]))
"""
    result = python(code)
    assert result.returncode == 0, result.stderr
    loaded = result.stdout.split()
    assert "huddle.cli.serve" in loaded
    assert "huddle.coordinator.server" in loaded
    assert [m for m in loaded if m.startswith(PARTS)] == []


@pytest.mark.e2e
def test_a_client_py_and_a_protocol_py_beside_the_users_code_break_nothing(
    tmp_path: Path,
) -> None:
    for name in ("client", "protocol", "coordinator", "chaos", "pipeline"):
        (tmp_path / f"{name}.py").write_text("raise SystemExit('the wrong module was imported')\n")
    (tmp_path / "client.py").write_text(
        "from huddle.client import Admin, Member, RebalanceListener, TopicPartition\n"
        "from huddle.protocol.messages import ListTopicsRequest\n"
        "import huddle.coordinator.server\n"
        "print(Member.__module__, ListTopicsRequest.__module__)\n"
    )
    script = subprocess.run(
        [sys.executable, "client.py"], cwd=tmp_path, capture_output=True, text=True, timeout=60
    )
    assert script.returncode == 0, script.stderr
    assert script.stdout.split() == ["huddle.client.member", "huddle.protocol.admin_messages"]
    command = subprocess.run(
        [sys.executable, "-m", "huddle", "topics", "--help"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert command.returncode == 0, command.stderr
    assert "create" in command.stdout


def test_the_root_of_the_namespace() -> None:
    import huddle
    from huddle.protocol.errors import HuddleError

    assert huddle.HuddleError is HuddleError
    assert isinstance(huddle.__version__, str)
    with pytest.raises(AttributeError):
        _ = huddle.nothing_here


@pytest.mark.e2e
def test_huddle_report_without_the_pipeline_extra_says_what_to_install() -> None:
    code = """
import sys
sys.modules["pyspark"] = None  # as if PySpark were not installed
from huddle.cli import main
sys.exit(main(["report", "runs/x"]))
"""
    result = python(code)
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1, result.stderr
    assert "pip install 'huddle[pipeline]'" in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.e2e
def test_the_wheel_installs_only_the_huddle_namespace(tmp_path: Path) -> None:
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp_path), str(REPO)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert built.returncode == 0, built.stderr
    (wheel,) = tmp_path.glob("huddle-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    top = {name.split("/")[0] for name in names}
    assert {t for t in top if not t.endswith(".dist-info")} == {"huddle"}
    for module in (
        "huddle/__init__.py",
        "huddle/cli/__init__.py",
        "huddle/logs.py",
        "huddle/client/member.py",
        "huddle/client/assignors/deferred/assignor.py",
        "huddle/coordinator/server.py",
        "huddle/protocol/py.typed",
    ):
        assert module in names


@pytest.mark.e2e
def test_static_tools_resolve_huddle_from_another_directory(tmp_path: Path) -> None:
    """The editable install is a static path entry (no import hook): mypy sees the types."""
    (tmp_path / "uses_huddle.py").write_text(
        "from huddle.client import Member\n"
        "from huddle.protocol.embedded import TopicPartition\n"
        "partition: int = TopicPartition('t', 1).partition\n"
        "wrong: str = TopicPartition('t', 1).partition\n"
    )
    checked = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-incremental", "uses_huddle.py"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert "Found 1 error" in checked.stdout, checked.stdout
    assert (
        'uses_huddle.py:4: error: Incompatible types in assignment (expression has type "int"'
        in checked.stdout
    )
