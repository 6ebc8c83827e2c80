"""``huddle data check|repair DIR``: what is wrong with a data dir's journal, and a repair.

``check`` exits 0 when the journal is intact (a torn tail, which a start cuts off, counts
as intact), 1 when it is damaged (a coordinator refuses to start on it). ``repair`` keeps
every intact record in a new journal and the damaged file beside it as a backup.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping

from huddle.cli.render import plural, to_json
from huddle.coordinator.storage.journal import DataDirError
from huddle.coordinator.storage.salvage import Salvage, check, repair

__all__ = ["add_arguments", "run"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    for name, text in (
        ("check", "say what is wrong with the journal and what a repair would keep"),
        ("repair", "keep every intact record; the damaged journal stays as a backup"),
    ):
        sub = actions.add_parser(name, help=text, description=text)
        sub.add_argument("directory", metavar="DIR", help="the coordinator's --data-dir")
        sub.add_argument("--json", action="store_true", help="machine-readable output")


def _describe(found: Salvage) -> list[str]:
    records = len(found.records)
    lines = [
        f"journal: {found.size:,} {plural(found.size, 'byte')}, "
        f"{records:,} intact {plural(records, 'record')}"
    ]
    for at, skipped, why in found.damaged:
        lines.append(f"damaged: {skipped:,} {plural(skipped, 'byte')} at byte {at:,}: {why}")
    if found.torn_tail:
        torn = found.torn_tail
        lines.append(f"torn tail: {torn:,} {plural(torn, 'byte')} (a start cuts them off)")
    if found.clean and not found.torn_tail:
        lines.append("intact")
    if found.forgotten_groups:
        forgotten = found.forgotten_groups
        lines.append(
            f"{forgotten:,} {plural(forgotten, 'group')}: the damage may have held newer "
            "records of them, so after a repair they load forgotten (members rejoin as new "
            "ones, after their longest session; offsets kept)"
        )
    return lines


def _as_json(found: Salvage, backup: str | None = None) -> str:
    """The journal as ``check --json`` and ``repair --json`` print it."""
    view: dict[str, object] = {
        "bytes": found.size,
        "intact_records": len(found.records),
        "damaged": [{"at": at, "bytes": n, "reason": why} for at, n, why in found.damaged],
        "torn_tail_bytes": found.torn_tail,
        "clean": found.clean,
    }
    if backup is not None:
        view["backup"] = backup
    return to_json(view)


def run(args: argparse.Namespace, environ: Mapping[str, str]) -> int:
    try:
        if args.action == "check":
            found = check(args.directory)
            if args.json:
                print(_as_json(found))
                return 0 if found.clean else 1
            print("\n".join(_describe(found)))
            if not found.clean:
                print(
                    f"a repair keeps the {len(found.records):,} intact records: "
                    f"huddle data repair {args.directory}"
                )
            return 0 if found.clean else 1
        found, backup = repair(args.directory)
    except (DataDirError, OSError) as exc:
        print(f"huddle data: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(_as_json(found, None if backup is None else str(backup)))
        return 0
    print("\n".join(_describe(found)))
    if backup is None:
        print("nothing to repair")
    else:
        kept = len(found.records)
        print(f"repaired: kept {kept:,} {plural(kept, 'record')}; the old journal is {backup}")
    return 0
