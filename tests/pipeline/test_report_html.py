"""The reports a person opens: a self-contained report.html per run and a comparison.html,
checked as written and as headless Chromium renders them; and a quiet console."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from huddle.pipeline.analysis import analyse
from huddle.pipeline.compare import write_comparison
from huddle.pipeline.plots import MEMBER_COLOURS, UNAVAILABLE, member_style
from huddle.pipeline.report import write_report
from tests.pipeline.test_pipeline import base_log, spark

__all__ = ["spark"]  # the fixture
pytestmark = pytest.mark.spark


def chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        if os.environ.get("HUDDLE_REQUIRE_CHROMIUM"):
            pytest.fail("HUDDLE_REQUIRE_CHROMIUM is set and chromium is not installed")
        pytest.skip(
            "chromium is not installed (apt-get install chromium): the report is not rendered"
        )
    return found


def dump_dom(browser: str, page: Path) -> str:
    """The page's DOM once Chromium has loaded and laid it out."""
    done = subprocess.run(
        [browser, "--headless", "--no-sandbox", "--disable-gpu", "--dump-dom", page.as_uri()],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return done.stdout


def images(page: str) -> list[str]:
    return re.findall(r'<img src="data:image/png;base64,([A-Za-z0-9+/=]+)"', page)


@pytest.fixture(scope="module")
def reports(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("reports")
    cooperative = write_report(analyse(spark, base_log(root / "cooperative").write(), 100.0))
    eager_log = base_log(root / "eager", m2_offset=700, protocol="eager")
    eager = write_report(analyse(spark, eager_log.write(), 100.0))
    write_comparison(
        [cooperative, eager], root / "comparison", [root / "cooperative", root / "eager"]
    )
    return root / "cooperative" / "report" / "report.html", root / "comparison" / "comparison.html"


def test_a_run_s_report_is_one_self_contained_page(reports: tuple[Path, Path]) -> None:
    report, comparison = reports
    page = report.read_text()
    assert len(images(page)) == 2  # the ownership timeline and the unavailability plot
    assert "total unavailable partition-seconds" in page
    assert '<td class="num">1.500</td>' in page
    assert "No safety violations." in page
    assert not re.search(r'(src|href)="(https?:)?//', page)  # nothing from the network
    compared = comparison.read_text()
    assert len(images(compared)) == 1
    assert 'href="../cooperative/report/report.html"' in compared  # beside it, no network
    assert 'href="../eager/report/report.html"' in compared


def test_unavailable_is_never_a_member_s_colour() -> None:
    styles = {member_style(i) for i in range(40)}
    assert len(styles) == 40  # 40 members, 40 looks
    assert all(colour != UNAVAILABLE for colour, _ in styles)
    assert UNAVAILABLE not in MEMBER_COLOURS


def test_chromium_renders_the_figures_and_the_images(
    reports: tuple[Path, Path], tmp_path: Path
) -> None:
    browser = chromium()
    report, comparison = reports
    for page, count in ((report, 2), (comparison, 1)):
        dom = dump_dom(browser, page)
        assert len(images(dom)) == count, page
        if page == comparison:  # the chart, and a sentence per run beside it
            assert dom.count("processing stopped for") == 2
        shot = tmp_path / f"{page.stem}.png"
        subprocess.run(
            [
                browser,
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                f"--screenshot={shot}",
                "--window-size=1200,1600",
                page.as_uri(),
            ],
            capture_output=True,
            timeout=120,
            check=True,
        )
        assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert shot.stat().st_size > 20_000  # a page with plots, not a blank one
    assert (
        "total unavailable partition-seconds"
        in subprocess.run(
            [browser, "--headless", "--no-sandbox", "--disable-gpu", "--dump-dom", report.as_uri()],
            capture_output=True,
            text=True,
            timeout=120,
            check=True,
        ).stdout
    )


def test_the_report_command_prints_its_progress_and_nothing_of_spark_s(tmp_path: Path) -> None:
    run_dir = base_log(tmp_path / "quiet").write()
    done = subprocess.run(
        [sys.executable, "-m", "huddle", "report", str(run_dir), "--driver-memory", "1g"],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "huddle report: [1/1]" in done.stdout
    assert "report.html" in done.stdout
    noise = [
        line
        for line in (done.stdout + done.stderr).splitlines()
        if "[Stage" in line or " WARN " in line
    ]
    assert noise == []


def test_links_to_reports_are_url_encoded() -> None:
    from huddle.pipeline import html

    link = html.links("see", [("run #2 <b>", "../run #2/report/report.html")])
    assert 'href="../run%20%232/report/report.html"' in link
    assert "run #2 &lt;b&gt;" in link


def test_a_comparison_names_a_run_without_figures_and_does_not_draw_it_at_zero(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import matplotlib.axes

    from huddle.pipeline import plots

    drawn: list[tuple[Any, Any]] = []
    said: list[str] = []
    real_scatter, real_text = matplotlib.axes.Axes.scatter, matplotlib.axes.Axes.text

    def scatter(self: matplotlib.axes.Axes, x: Any, y: Any, *a: Any, **kw: Any) -> Any:
        drawn.append((list(x), list(y)))
        return real_scatter(self, x, y, *a, **kw)

    def text(self: matplotlib.axes.Axes, x: Any, y: Any, s: str, *a: Any, **kw: Any) -> Any:
        said.append(s)
        return real_text(self, x, y, s, *a, **kw)

    monkeypatch.setattr(matplotlib.axes.Axes, "scatter", scatter)
    monkeypatch.setattr(matplotlib.axes.Axes, "text", text)
    styles = {"a": member_style(0), "b": member_style(1)}
    plots.tradeoff("t", [("a", 3, 1.5)], ["b"], styles, tmp_path / "c.png")
    assert drawn == [([3], [1.5])]  # b is not a point at 0 moves, 0 s that would look best
    assert said == ["n/a (not measured): b"]
    assert (tmp_path / "c.png").read_bytes()[:4] == b"\x89PNG"


def test_a_timeline_of_very_many_partitions_is_still_drawn(tmp_path: Path) -> None:
    from pyspark.sql import Row

    from huddle.pipeline import plots

    rows = [Row(topic="t", partition=p, proc="member-1", start=0.0, end=1.0) for p in range(1_600)]
    plots.ownership_timeline(rows, [], 0.0, tmp_path / "wide.png", "many partitions")
    assert (tmp_path / "wide.png").stat().st_size > 0


def test_a_user_s_own_spark_configuration_is_not_overridden(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from huddle.pipeline.spark import _own_spark_config, quiet_log4j2

    assert quiet_log4j2().is_file()  # installed with huddle
    monkeypatch.delenv("SPARK_CONF_DIR", raising=False)
    monkeypatch.delenv("PYSPARK_SUBMIT_ARGS", raising=False)
    monkeypatch.delenv("SPARK_SUBMIT_OPTS", raising=False)
    assert not _own_spark_config()
    monkeypatch.setenv("SPARK_CONF_DIR", "/etc/spark")
    assert _own_spark_config()
    monkeypatch.delenv("SPARK_CONF_DIR")
    monkeypatch.setenv("SPARK_SUBMIT_OPTS", "-Dlog4j2.configurationFile=/mine.properties")
    assert _own_spark_config()
