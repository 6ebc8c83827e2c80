"""What a py-spy recording (``--format raw``: collapsed stacks) spends its samples on.

    python -m bench.profile_summary FILE [--top 30] [--match huddle]

Prints, per function (``name (file)``), the share of samples it is on the stack in
(inclusive) and at the top of (self), highest first; ``--match`` keeps the functions whose
file or name holds that text.
"""

from __future__ import annotations

import argparse
import re
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

_LINE = re.compile(r"^(?P<stack>.*) (?P<count>\d+)$")


def frame_name(frame: str) -> str:
    """``func (path/file.py:12)`` without the line number and the path's head."""
    name, _, where = frame.partition(" (")
    where = where.rstrip(")").rsplit(":", 1)[0]
    parts = where.split("/")
    return f"{name} ({'/'.join(parts[-2:])})"


def summary(lines: Sequence[str]) -> tuple[int, Counter[str], Counter[str]]:
    total = 0
    inclusive: Counter[str] = Counter()
    top: Counter[str] = Counter()
    for line in lines:
        found = _LINE.match(line.strip())
        if found is None:
            continue
        count = int(found["count"])
        frames = [frame_name(f) for f in found["stack"].split(";") if f]
        total += count
        for name in set(frames):
            inclusive[name] += count
        if frames:
            top[frames[-1]] += count
    return total, inclusive, top


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("file", type=Path)
    parser.add_argument("--top", type=int, default=30)
    parser.add_argument("--match", default="")
    args = parser.parse_args(argv)
    total, inclusive, top = summary(args.file.read_text().splitlines())
    print(f"{total} samples")
    print(f"{'inclusive':>9} {'self':>6}  function")
    shown = [n for n, _ in inclusive.most_common() if args.match in n][: args.top]
    for name in shown:
        print(f"{inclusive[name] / total:9.1%} {top[name] / total:6.1%}  {name}")
    print("\nby self time:")
    for name, count in top.most_common(args.top):
        print(f"{count / total:6.1%}  {name}")


if __name__ == "__main__":
    main()
