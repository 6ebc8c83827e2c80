"""The ``huddle`` command as the README describes it: usage errors in one line and a hint,
every flag's default in ``--help``, one JSON shape per kind of answer, and the hints a
new operator needs (TLS, a password on standard input, what a member owns)."""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from huddle.testing import wait_settled

from huddle.cli import COMMANDS, build_parser, main
from huddle.cli.admin import render_cluster
from huddle.client import Member, TopicPartition
from huddle.client.admin import Admin
from huddle.coordinator.storage.journal import JOURNAL
from huddle.coordinator.storage.records import TopicRecord, encode_frames
from huddle.protocol.messages import ClusterNodeInfo, DescribeClusterResponse, ShardInfo
from tests.cli.test_cli import CLI_TIMEOUT_S, huddle_argv
from tests.helpers import fast_server_config, running_server
from tests.security_setup import make_pki
from tests.storage.test_salvage import damaged_journal


def exit_of(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    """The exit status of a command line that argparse refuses, and what it printed."""
    with pytest.raises(SystemExit) as stopped:
        main(argv, {})
    captured = capsys.readouterr()
    assert captured.out == ""
    return int(stopped.value.code or 0), captured.err


# --- usage errors ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "line"),
    [
        (
            ["topics", "create"],
            "huddle topics create: the following arguments are required: name, --partitions",
        ),
        (["topics", "list", "--timeout", "-1"], "huddle topics list: argument --timeout: '-1'"),
        (["ping", "--timeout", "0"], "huddle ping: argument --timeout: '0'"),
        (["ping", "--timeout", "nan"], "huddle ping: argument --timeout: 'nan'"),
        (["ping", "--timeout", "soon"], "huddle ping: argument --timeout: 'soon'"),
        (["serve", "--port", "x"], "huddle serve: argument --port: invalid int value: 'x'"),
        (["nope"], "huddle: argument COMMAND: invalid choice: 'nope'"),
    ],
)
def test_a_usage_error_is_one_line_and_a_hint(
    argv: list[str], line: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, err = exit_of(argv, capsys)
    assert code == 2
    first, hint = err.splitlines()
    assert first.startswith(line)
    assert hint.startswith("(see huddle")
    assert hint.endswith(" --help)")


def test_a_timeout_must_be_above_zero(capsys: pytest.CaptureFixture[str]) -> None:
    code, err = exit_of(["groups", "list", "--timeout", "-5"], capsys)
    assert code == 2
    assert "the timeout must be above 0 seconds" in err


def parsers() -> Iterator[argparse.ArgumentParser]:
    """Every parser of the command: each subcommand's, and theirs, all the way down."""
    for name in COMMANDS:
        todo = [build_parser([name])]
        while todo:
            parser = todo.pop()
            if parser.prog != "huddle" or name == "serve":  # the root once is enough
                yield parser
            for action in parser._actions:
                if isinstance(action, argparse._SubParsersAction):
                    todo.extend(
                        sub
                        for word, sub in action.choices.items()
                        if parser.prog != "huddle" or word == name
                    )


def test_help_shows_every_flag_s_default() -> None:
    """What ``--help`` prints for each flag of every subcommand names its default (or says
    it is required), a flag given no help text too."""
    seen = 0
    for parser in parsers():
        formatter = parser._get_formatter()
        parser.format_help()  # every help text formats
        for action in parser._actions:
            if (
                not action.option_strings
                or isinstance(action, argparse._HelpAction)
                or action.help == argparse.SUPPRESS
            ):
                continue
            shown = " ".join(formatter._format_action(action).split())  # as --help shows it
            assert "default" in shown or "(required)" in shown, (parser.prog, shown)
            seen += 1
    assert seen > 150


def test_a_flag_without_help_text_shows_its_default(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit):
        main(["demo", "--help"], {})
    text = " ".join(capsys.readouterr().out.split())
    assert "--members MEMBERS (default: 4)" in text


def test_serve_help_shows_the_configuration_s_defaults(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as stopped:
        main(["serve", "--help"], {})
    code = int(stopped.value.code or 0)
    text = " ".join(capsys.readouterr().out.split())
    assert code == 0
    assert "lowest session timeout (default 6000) [env HUDDLE_MIN_SESSION_TIMEOUT_MS]" in text
    assert "(default on) [env HUDDLE_NOTICES]" in text
    assert "(default 16777216) [env HUDDLE_MAX_FRAME_BYTES]" in text


# --- JSON: one shape per kind of answer -----------------------------------------------------


async def huddle(bootstrap: str, capsys: pytest.CaptureFixture[str], *argv: str) -> object:
    code = await asyncio.to_thread(main, [*argv, "--bootstrap", bootstrap, "--json"], {})
    out, err = capsys.readouterr()
    assert code == 0, err
    assert out.count("\n") == 1, "one JSON document on one line"
    return json.loads(out)


async def test_deletions_answer_in_one_shape(
    bootstrap: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """``topics delete`` and ``groups delete`` say the same: what was deleted, and that it
    was; the identifier is named as the listing names it (``name``, ``group_id``)."""
    await huddle(bootstrap, capsys, "topics", "create", "t", "--partitions", "1")
    async with Admin(bootstrap) as admin:
        await admin.set_offsets("g", {TopicPartition("t", 0): 5})
    listed_group = (await huddle(bootstrap, capsys, "groups", "list"))[0]  # type: ignore[index]
    listed_topic = (await huddle(bootstrap, capsys, "topics", "list"))[0]  # type: ignore[index]
    group = await huddle(bootstrap, capsys, "groups", "delete", "g")
    topic = await huddle(bootstrap, capsys, "topics", "delete", "t")
    assert group == {"group_id": "g", "deleted": True}
    assert topic == {"name": "t", "deleted": True}
    assert listed_group["group_id"] == "g"
    assert listed_topic["name"] == "t"


async def test_ping_answers_in_json(bootstrap: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert await huddle(bootstrap, capsys, "ping") == {
        "address": bootstrap,
        "protocol_version": 2,
        "node_id": bootstrap,
        "principal": None,
        "authentication_required": False,
    }


def test_data_check_and_repair_answer_in_json(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    original = damaged_journal(tmp_path)
    assert main(["data", "check", str(tmp_path), "--json"], {}) == 1  # damaged: exit 1
    found = json.loads(capsys.readouterr().out)
    ((damage,),) = (found.pop("damaged"),)
    assert found == {
        "bytes": len(original),
        "intact_records": 11,
        "torn_tail_bytes": 0,
        "clean": False,
    }
    assert set(damage) == {"at", "bytes", "reason"}
    assert main(["data", "repair", str(tmp_path), "--json"], {}) == 0
    repaired = json.loads(capsys.readouterr().out)
    assert repaired["intact_records"] == 11
    assert Path(repaired["backup"]).read_bytes() == original
    assert main(["data", "check", str(tmp_path), "--json"], {}) == 0
    assert json.loads(capsys.readouterr().out)["clean"] is True


# --- what a member owns, and the committed offsets --------------------------------------


async def test_describe_shows_what_each_member_owns_now_and_the_offsets(
    bootstrap: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A cooperative member alone in its group joined owning nothing and was given every
    partition: OWNED is what it holds now, not its join's claim ("-"); ``--json`` carries
    the committed offsets the text shows."""
    async with Admin(bootstrap) as admin:
        await admin.create_topic("orders", 3)
    async with Member(
        bootstrap, group_id="g", topics=["orders"], assignors=["cooperative-sticky"]
    ) as member:
        await wait_settled([member], {"orders": 3}, within=10)
        await member.commit({TopicPartition("orders", 1): 42})
        code = await asyncio.to_thread(
            main, ["groups", "describe", "g", "--bootstrap", bootstrap], {}
        )
        text = capsys.readouterr().out
        described = await huddle(bootstrap, capsys, "groups", "describe", "g")
    assert code == 0
    members_row = next(line for line in text.splitlines() if line.startswith(member.member_id))
    assert members_row.split()[-1] == "orders:0-2"
    assert "OWNED" in text
    assert "ASSIGNED" not in text
    assert isinstance(described, dict)
    (shown,) = described["members"]
    assert shown["owned"] == [["orders", 0], ["orders", 1], ["orders", 2]]
    assert shown["claimed"] == []
    assert described["offsets"] == [
        {"topic": "orders", "partition": 0, "offset": None, "owner": member.member_id},
        {"topic": "orders", "partition": 1, "offset": 42, "owner": member.member_id},
        {"topic": "orders", "partition": 2, "offset": None, "owner": member.member_id},
    ]


# --- hints ----------------------------------------------------------------------------------


async def test_a_plain_client_at_a_tls_listener_is_told_it_probably_needs_tls(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pki = make_pki(tmp_path)
    config = fast_server_config(tls_cert=pki.server, tls_key=pki.server)
    async with running_server(config) as server:
        bootstrap = f"127.0.0.1:{server.port}"
        for command in (["ping"], ["topics", "list"]):
            code = await asyncio.to_thread(main, [*command, "--bootstrap", bootstrap], {})
            err = capsys.readouterr().err
            assert code == 1
            assert err.count("\n") == 1
            assert "it probably requires TLS" in err
            assert "--tls-ca" in err


def test_users_add_reads_the_password_from_standard_input_without_a_terminal(
    tmp_path: Path,
) -> None:
    """Scripts and ``docker run -i`` pipe the password in; no prompt, no flag needed."""
    added = subprocess.run(
        huddle_argv("users", "add", "app", "--data-dir", str(tmp_path)),
        input="s3cret\n",
        capture_output=True,
        text=True,
        timeout=CLI_TIMEOUT_S,
        check=False,
    )
    assert added.returncode == 0, added.stderr
    assert added.stdout.startswith("user app (SCRAM-SHA-256, SCRAM-SHA-512) kept in")
    assert "s3cret" not in (tmp_path / "security.json").read_text()


# --- counts read as English -----------------------------------------------------------------


async def test_one_of_a_thing_is_not_plural(
    bootstrap: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """1 partition, 1 record, 1 node, 1 shard; 2 partitions."""
    code = await asyncio.to_thread(
        main, ["topics", "create", "t", "--partitions", "1", "--bootstrap", bootstrap], {}
    )
    assert (code, capsys.readouterr().out) == (0, 'created topic "t" with 1 partition\n')
    code = await asyncio.to_thread(
        main, ["topics", "alter", "t", "--partitions", "2", "--bootstrap", bootstrap], {}
    )
    assert (code, capsys.readouterr().out) == (0, 'topic "t" now has 2 partitions\n')

    (tmp_path / JOURNAL).write_bytes(encode_frames([TopicRecord("t", 1)]))
    assert main(["data", "check", str(tmp_path)], {}) == 0
    assert ", 1 intact record\n" in capsys.readouterr().out

    cluster = DescribeClusterResponse(
        node_id="n1",
        shard_count=1,
        nodes=[ClusterNodeInfo(node_id="n1", host="127.0.0.1", port=9292)],
        shards=[ShardInfo(shard=0, owner="n1", epoch=1)],
    )
    head = render_cluster(cluster, {}, shards=False).splitlines()[0]
    assert head == "1 node, 1 shard, all owned (as n1 sees it)"
