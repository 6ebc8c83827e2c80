"""Every example in the README runs, one after another, as a reader pastes them.

A ``huddle serve`` stands in for ``make serve``: addresses 127.0.0.1:9292 and the port 9393
of the secured example become free ports. Shell blocks run in one directory with bash (a
block's background jobs are stopped at the end); Python blocks run as pasted into ``python
-m asyncio`` (top-level ``await``). The line before a block may say, in an HTML comment,
what else it is (``tests/docs/readme.py``): ``skip: why``, ``run by tests/...`` (checked there),
``synopsis`` (each command and flag is checked to exist), ``pytest`` (a test file, run by
pytest), ``needs FILE ...`` (files this test makes first).
"""

from __future__ import annotations

import contextlib
import importlib
import io
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import trustme
from huddle.testing import CoordinatorProcess, free_port

from huddle.cli import main
from tests.docs.readme import README, Example, examples, flat

STEP_TIMEOUT_S = 90.0  # one block, or one pytest run
STOP_TIMEOUT_S = 15.0

# What `python -m asyncio` does with pasted code: top-level await on one event loop.
ASYNCIO_REPL = """
import ast, asyncio, sys

code = compile(sys.stdin.read(), "README.md", "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)


async def pasted():
    done = eval(code, {"__name__": "__main__"})
    if done is not None:
        await done


asyncio.run(pasted())
"""


class Reader:
    """The reader's shell and Python, in one directory, against the README's addresses."""

    def __init__(self, directory: Path, addresses: dict[str, str]) -> None:
        self.directory = directory
        self.addresses = addresses
        self.groups: list[int] = []  # process groups of shell blocks (their background jobs)
        path = os.pathsep.join((str(Path(sys.executable).parent), os.environ.get("PATH", "")))
        self.env = {**os.environ, "PATH": path, "HUDDLE_BOOTSTRAP": addresses["127.0.0.1:9292"]}

    def localised(self, code: str) -> str:
        for written, real in self.addresses.items():
            code = code.replace(written, real)
        return code

    def run(self, argv: list[str], code: str, example: Example, cwd: Path | None = None) -> None:
        log = self.directory / f"readme-line-{example.line}.log"
        with log.open("w") as out:
            process = subprocess.Popen(
                argv,
                stdin=subprocess.PIPE,
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=cwd or self.directory,
                env=self.env,
                text=True,
                start_new_session=True,  # its background jobs in a group of its own
            )
            self.groups.append(process.pid)
            try:
                process.communicate(code, timeout=STEP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        assert process.returncode == 0, (
            f"README.md line {example.line} failed ({process.returncode}):\n"
            f"{code}\n---\n{log.read_text()}"
        )

    def shell(self, example: Example) -> None:
        self.run(["bash", "-e", "-o", "pipefail"], self.localised(example.code), example)

    def python(self, example: Example) -> None:
        self.run([sys.executable, "-c", ASYNCIO_REPL], self.localised(example.code), example)

    def pytest(self, example: Example) -> None:
        folder = self.directory / f"readme-test-{example.line}"
        folder.mkdir()
        (folder / "test_from_the_readme.py").write_text(example.code)
        argv = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"]
        argv += ["-o", "asyncio_default_fixture_loop_scope=function"]
        self.run([*argv, "-o", "asyncio_mode=auto", str(folder)], "", example, cwd=folder)

    def stop(self) -> None:
        """SIGTERM to the process groups this reader started, then SIGKILL to what is left."""
        for signum in (signal.SIGTERM, signal.SIGKILL):
            deadline = time.monotonic() + STOP_TIMEOUT_S
            for group in self.groups:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(group, signum)
            while time.monotonic() < deadline and any(map(_alive, self.groups)):
                time.sleep(0.05)  # polling the groups' exit, with a deadline


def _alive(group: int) -> bool:
    try:
        os.killpg(group, 0)
    except ProcessLookupError:
        return False
    return True


def make_files(directory: Path, names: list[str]) -> None:
    """The files a block needs: a CA, a certificate for 127.0.0.1, passwords."""
    ca = trustme.CA()
    issued = ca.issue_cert("127.0.0.1", "localhost")
    made = {
        "ca.pem": ca.cert_pem.bytes(),
        "server.pem": b"".join(blob.bytes() for blob in issued.cert_chain_pems),
        "server.key": issued.private_key_pem.bytes(),
    }
    for name in names:
        path = directory / name
        if name.endswith(".pw"):
            path.write_text(f"{name.removesuffix('.pw')}-secret-{os.getpid()}\n")
        else:
            path.write_bytes(made[name])


def check_synopsis(example: Example) -> None:
    """Each ``huddle ...`` line names a command that exists, and flags it takes."""
    for line in example.commands:
        line = line.partition(" #")[0]
        words = line.split()
        assert words[0] == "huddle", line
        path: list[list[str]] = []
        for word in words[1:]:
            if not re.fullmatch(r"[a-z][a-z-]*(\|[a-z][a-z-]*)*", word):
                break
            path.append(word.split("|"))
        flags = set(re.findall(r"(?<![\w-])--[a-z][a-z-]*", line))
        for command in _expanded(path):
            shown = io.StringIO()
            with contextlib.redirect_stdout(shown), pytest.raises(SystemExit) as stopped:
                main([*command, "--help"], {})
            assert stopped.value.code == 0, line
            for flag in flags:
                assert flag in shown.getvalue(), f"{line}: {' '.join(command)} has no {flag}"


def _expanded(path: list[list[str]]) -> Iterator[list[str]]:
    if not path:
        yield []
        return
    for word in path[0]:
        for rest in _expanded(path[1:]):
            yield [word, *rest]


@pytest.fixture
def reader(tmp_path: Path) -> Iterator[Reader]:
    kafka_port = free_port()
    with CoordinatorProcess(["--kafka-port", str(kafka_port)], keep_data=False) as coordinator:
        addresses = {
            "127.0.0.1:9292": coordinator.bootstrap,
            "127.0.0.1:9092": f"127.0.0.1:{kafka_port}",
            "9393": str(free_port()),
        }
        reader = Reader(tmp_path, addresses)
        try:
            yield reader
        finally:
            reader.stop()


@pytest.mark.e2e
def test_the_readme_s_examples_run_one_after_another(reader: Reader) -> None:
    ran = []
    for example in examples():
        kind, _, detail = example.marker.partition(":")
        if kind.startswith(("skip", "run by ")):
            assert detail.strip() or kind.startswith("run by "), "say why it does not run"
            continue
        if kind == "synopsis":
            check_synopsis(example)
        elif kind == "pytest":
            reader.pytest(example)
        else:
            if kind.startswith("needs "):
                make_files(reader.directory, kind.removeprefix("needs ").split())
            else:
                assert kind == "", f"README.md line {example.line}: unknown marker {kind!r}"
            if example.language == "sh":
                reader.shell(example)
            else:
                reader.python(example)
        ran.append(example.line)
    assert len(ran) >= 7  # the synopsis, members, logging, the test, wire, security (2)


def test_every_example_that_does_not_run_says_why() -> None:
    for example in examples():
        kind, _, why = example.marker.partition(":")
        if kind == "skip":
            assert len(why.strip()) > 20, f"README.md line {example.line}: say why it is skipped"


def test_every_name_the_readme_imports_exists() -> None:
    """Each ``from huddle... import ...`` the README writes, in an example or in its prose
    (the errors a test catches from ``huddle.testing``), imports as written."""
    text = README.read_text()
    statement = r"from (huddle[\w.]*) import (\w+(?:, \w+)*)"
    imports = re.findall(f"^{statement}$", text, re.MULTILINE)  # in the examples
    imports += re.findall(f"`{statement}`", flat(text))  # in the prose, which wraps
    assert len(imports) >= 8
    for module, names in imports:
        imported = importlib.import_module(module)
        for name in names.split(","):
            assert hasattr(imported, name.strip()), f"README: from {module} import {name}"
