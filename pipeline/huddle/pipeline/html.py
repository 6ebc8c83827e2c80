"""Self-contained HTML pages: tables, and images inline as data URIs. One file to open in
any browser, with no server and no network."""

from __future__ import annotations

import base64
import html
from collections.abc import Sequence
from pathlib import Path
from typing import Any
from urllib.parse import quote

_STYLE = """
body { font: 15px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; color: #1b1b1b;
       max-width: 1180px; margin: 2em auto; padding: 0 1.2em; }
h1 { font-size: 1.6em; margin-bottom: 0.2em; }
h2 { font-size: 1.2em; margin-top: 1.8em; border-bottom: 1px solid #ddd; padding-bottom: 0.2em; }
p.lead { color: #444; }
table { border-collapse: collapse; margin: 0.6em 0; font-variant-numeric: tabular-nums;
        display: block; max-width: 100%; overflow-x: auto; }
th, td { border: 1px solid #d0d0d0; padding: 0.25em 0.7em; text-align: left; }
th { background: #f2f2f2; }
td.num { text-align: right; }
.figures td:first-child { color: #333; }
.bad { color: #b00020; font-weight: 600; }
.good { color: #006b3c; font-weight: 600; }
img { max-width: 100%; height: auto; border: 1px solid #e3e3e3; margin: 0.4em 0; }
code { font-size: 0.9em; }
.side { display: flex; flex-wrap: wrap; gap: 1.2em; align-items: flex-start; }
.side > div { flex: 1 1 420px; min-width: 0; }
.side li { margin-bottom: 0.5em; }
p.closing, p.held, p.missed { border-left: 3px solid #0072B2; padding-left: 0.8em; }
p.held { border-color: #009E73; }
p.missed { border-color: #D55E00; }
"""


def cell(value: Any) -> str:
    if value is None:
        return "<td></td>"
    if isinstance(value, float):
        return f'<td class="num">{value:,.3f}</td>'
    if isinstance(value, int) and not isinstance(value, bool):
        return f'<td class="num">{value:,}</td>'
    return f"<td>{html.escape(str(value))}</td>"


def table(header: Sequence[str], rows: Sequence[Sequence[Any]], css: str = "") -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(cell(v) for v in row) + "</tr>" for row in rows)
    klass = f' class="{css}"' if css else ""
    return f"<table{klass}><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def image(path: Path, alt: str) -> str:
    """The PNG at ``path``, inline."""
    data = base64.b64encode(path.read_bytes()).decode("ascii")
    return f'<img src="data:image/png;base64,{data}" alt="{html.escape(alt)}">'


def page(title: str, parts: Sequence[str]) -> str:
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{html.escape(title)}</title><style>{_STYLE}</style></head><body>\n"
        + "\n".join(parts)
        + "\n</body></html>\n"
    )


def heading(text: str, level: int = 2) -> str:
    return f"<h{level}>{html.escape(text)}</h{level}>"


def paragraph(text: str, css: str = "") -> str:
    klass = f' class="{css}"' if css else ""
    return f"<p{klass}>{html.escape(text)}</p>"


def links(lead: str, targets: Sequence[tuple[str, str]]) -> str:
    """Relative links (to files beside this one: still no network)."""
    items = ", ".join(
        f'<a href="{html.escape(quote(href))}">{html.escape(text)}</a>' for text, href in targets
    )
    return f"<p>{html.escape(lead)} {items}</p>"


def bullets(items: Sequence[str]) -> str:
    return "<ul>" + "".join(f"<li>{html.escape(i)}</li>" for i in items) + "</ul>"


def side_by_side(left: str, right: str) -> str:
    """Two blocks of HTML beside each other (one under the other on a narrow screen)."""
    return f'<div class="side"><div>{left}</div><div>{right}</div></div>'
