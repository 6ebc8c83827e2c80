"""The comparison's sentences and its trade-off chart, from hand-made summaries: the words
follow the numbers (a different ranking, different sentences), and a protocol that loses
where its design says it should win is said to."""

from __future__ import annotations

from pathlib import Path

import msgspec

from huddle.pipeline.compare import write_comparison
from huddle.pipeline.findings import (
    DESIGN_CLAIMS,
    Claim,
    Point,
    point,
    sentence,
    situations,
    tradeoff,
    verdicts,
)
from huddle.pipeline.summary import RunSummary, Window


def summary(
    protocol: str,
    scenario: str = "rolling-bounce",
    *,
    moved: int = 0,
    returned: int = 0,
    restored: int = 0,
    restores: int = 0,
    cut: int = 0,
    unowned: float | None = 0.0,
    restoring: float | None = 0.0,
    held: float | None = 0.0,
    client: str = "huddle",
    partitions: int = 24,
) -> RunSummary:
    stopped = None if unowned is None or restoring is None else unowned + restoring
    return RunSummary(
        run=f"{protocol}-{scenario}",
        protocol=protocol,
        scenario=scenario,
        client=client,
        gap_ms=100.0,
        window=Window(definition="", start=0.0, end=15.0, seconds=15.0),
        partitions=partitions,
        total_unavailable_partition_seconds=stopped,
        max_outage_seconds=1.0,
        per_partition={},
        rebalance_count=4,
        rebalance_durations_seconds=[],
        rebalance_total_seconds=0.1,
        rebalance_max_seconds=0.05,
        violations={},
        violations_total=0,
        records_processed=10_000,
        distinct_records_processed=10_000,
        duplicates=0,
        duplicates_below_commit=0,
        lost=0,
        ownership_intervals=40,
        partitions_moved=moved,
        partitions_returned=returned,
        records_restored=restored,
        restore_seconds=restored / 125 if restored else 0.0,
        restores=restores,
        restores_cut=cut,
        unowned_partition_seconds=unowned,
        restoring_partition_seconds=restoring,
        stopped_partition_seconds=stopped,
        held_partition_seconds=held,
    )


# a rolling bounce where Design II does what it is for: it moves nothing and stops least
AS_DESIGNED = [
    summary("range", moved=60, returned=20, restored=9_000, unowned=8.0, restoring=72.0),
    summary(
        "cooperative-sticky", moved=24, returned=4, restored=5_000, unowned=2.0, restoring=40.0
    ),
    summary("cooperative-deferred", moved=0, unowned=6.0, restoring=0.0, held=6.0),
]
# the same runs, but holding cost more than moving did
HELD_TOO_LONG = [
    AS_DESIGNED[0],
    summary("cooperative-sticky", moved=24, returned=4, restored=500, unowned=2.0, restoring=4.0),
    summary("cooperative-deferred", moved=0, unowned=30.0, restoring=0.0),
]


def sentences(summaries: list[RunSummary]) -> dict[str, str]:
    [points] = situations(summaries).values()
    return {p.name: sentence(p, points) for p in points}


def test_each_protocol_gets_a_sentence_from_its_numbers_and_its_rank() -> None:
    said = sentences(AS_DESIGNED)
    assert said["cooperative-deferred"] == (
        "cooperative-deferred handed no partition to another member (the fewest) and restored "
        "no state; "
        "processing stopped for 6.0 partition-seconds (6.0 unowned, 0.0 restoring), "
        "the least: it kept processing most; 100% of that was partitions held for a member "
        "that went away, unowned."
    )
    assert said["range"].startswith(
        "range handed partitions to another member 60 times (the most), handed partitions "
        "back to the member that had them last 20 times, and restored 9,000 records of state "
        "(72.0 s rebuilding); processing stopped for "
        "80.0 partition-seconds (8.0 unowned, 72.0 restoring), 13.3 times "
        "as long as cooperative-deferred, the most; 90% of that was state being rebuilt"
    )
    assert "7.0 times as long as cooperative-deferred;" in said["cooperative-sticky"]
    assert "(the most)" not in said["cooperative-sticky"]  # in between: no rank


def test_moves_and_returns_are_two_counts_of_handovers_whatever_their_sizes() -> None:
    """A return is not one of the moves: more returns than moves reads as true as fewer
    (eager range in a rolling bounce: 80 moves, 112 returns)."""
    runs = [
        summary("range", moved=80, returned=112, restored=2_900, restores=40, cut=40, unowned=1),
        summary("cooperative-sticky", moved=1, returned=1, restored=0, unowned=2.0),
        summary("cooperative-deferred", moved=0, returned=24, unowned=14.0),
    ]
    said = sentences(runs)
    assert said["range"].startswith(
        "range handed partitions to another member 80 times (the most), handed partitions "
        "back to the member that had them last 112 times, and restored 2,900 records of state "
        "(23.2 s rebuilding; 40 of its 40 restores cut short); "
    )
    assert said["cooperative-sticky"].startswith(
        "cooperative-sticky handed a partition to another member once, handed a partition "
        "back to the member that had it last once, and restored no state; "
    )
    assert said["cooperative-deferred"].startswith(
        "cooperative-deferred handed no partition to another member (the fewest), handed "
        "partitions back to the member that had them last 24 times, and restored no state; "
    )
    assert not any("of them" in text for text in said.values())


def test_a_different_ranking_changes_the_sentences() -> None:
    before, after = sentences(AS_DESIGNED), sentences(HELD_TOO_LONG)
    assert "the least: it kept processing most" in before["cooperative-deferred"]
    assert "the least: it kept processing most" not in after["cooperative-deferred"]
    assert "the least: it kept processing most" in after["cooperative-sticky"]
    assert "5.0 times as long as cooperative-sticky" in after["cooperative-deferred"]
    assert "13.3 times as long as cooperative-deferred" in before["range"]
    assert "13.3 times as long as cooperative-sticky" in after["range"]


def test_ties_are_shared_and_a_run_alone_gets_no_rank() -> None:
    static = summary("cooperative-sticky", "static-bounce", moved=0, unowned=6.0, restoring=0.0)
    said = sentences([*AS_DESIGNED, static])
    assert "(the fewest, as cooperative-sticky (static members))" in said["cooperative-deferred"]
    assert (
        "the least: it kept processing most, as cooperative-deferred"
        in said["cooperative-sticky (static members)"]
    )
    [alone] = sentences([AS_DESIGNED[0]]).values()
    assert "(the most)" not in alone
    assert "the least" not in alone
    assert "times as long" not in alone  # not compared with itself
    same = sentences([summary("range", unowned=1.0), summary("roundrobin", unowned=1.0)])
    assert all("as every other run" in s for s in same.values())


def test_a_protocol_that_wins_where_its_design_says_is_said_to() -> None:
    [points] = situations(AS_DESIGNED).values()
    found = {(v.claim.protocol, v.claim.metric): v for v in verdicts(points)}
    assert found[("cooperative-deferred", "stopped")].held
    assert found[("cooperative-deferred", "stopped")].text.startswith(
        "As designed, cooperative-deferred had no more stopped partition-seconds than range "
        "and cooperative-sticky (6.0 against range 80.0, cooperative-sticky 42.0)"
    )
    assert found[("cooperative-deferred", "moved")].held
    assert found[("cooperative-sticky", "stopped")].held


def test_a_protocol_that_loses_where_its_design_says_it_wins_is_shown_with_the_reason() -> None:
    [points] = situations(HELD_TOO_LONG).values()
    found = {(v.claim.protocol, v.claim.metric): v for v in verdicts(points)}
    lost = found[("cooperative-deferred", "stopped")]
    assert not lost.held
    assert lost.text.startswith("Not as designed: ")
    assert "it had 30.0 against range 80.0, cooperative-sticky 6.0" in lost.text
    assert "Where it lost: unowned 30.0 against 2.0 partition-seconds" in lost.text
    assert "waited for their member longer than cooperative-sticky took to move them" in lost.text
    assert found[("cooperative-deferred", "moved")].held  # it still moved nothing


def test_a_claim_needs_its_rival_and_its_situation() -> None:
    [points] = situations([AS_DESIGNED[2]]).values()
    assert verdicts(points) == []  # nothing to beat
    death = situations(
        [
            summary("cooperative-deferred", "process-death", unowned=30.0),
            summary("cooperative-sticky", "process-death", moved=6, unowned=6.0, restoring=12.0),
        ]
    )
    # Design II's claim is about bounces: holding for a dead member is not claimed to win
    assert [v.claim.protocol for v in verdicts(death["process-death, 24 partitions"])] == []
    claim = Claim("x", None, "moved", ("y",), "x moves less")
    mine = [
        Point("x", "s", 3, 0, 0, None, 1.0, 1.0, 2.0),
        Point("y", "s", 1, 0, 0, None, 1.0, 1.0, 2.0),
    ]
    [v] = verdicts(mine, [claim])
    assert not v.held
    assert "It handed partitions to another member 3 times, y 1." in v.text
    assert all(c.than for c in DESIGN_CLAIMS)


def test_situations_keep_different_faults_sizes_and_clients_apart() -> None:
    groups = situations(
        [
            *AS_DESIGNED,
            summary("cooperative-sticky", "static-bounce"),
            summary("cooperative-sticky", "scale-up", moved=8),
            summary("high-availability", "scale-up", moved=8),
            summary("cooperative-sticky", "process-death", client="kafka-python", partitions=6),
        ]
    )
    assert {k: [p.name for p in v] for k, v in groups.items()} == {
        "rolling-bounce, 24 partitions": [
            "range",
            "cooperative-sticky",
            "cooperative-deferred",
            "cooperative-sticky (static members)",
        ],
        "scale-up, 24 partitions": ["cooperative-sticky", "high-availability"],
        "process-death, 6 partitions, kafka-python members": ["cooperative-sticky (kafka-python)"],
    }


def test_the_chart_plots_moves_against_stopped_time_and_leaves_unmeasured_runs_out() -> None:
    old = summary("roundrobin", unowned=None, restoring=None)  # from before moves counted
    [points] = situations([*AS_DESIGNED, old]).values()
    drawn, missing = tradeoff(points)
    assert drawn == [
        ("range", 60, 80.0),
        ("cooperative-sticky", 24, 42.0),
        ("cooperative-deferred", 0, 6.0),
    ]
    assert missing == ["roundrobin"]  # not a point at 0 moves, 0 s that would look best
    assert point(old).moved is None
    assert "has no count of moved partitions" in sentence(point(old), points)


def test_the_page_puts_the_sentences_beside_the_chart_and_closes_with_the_findings(
    tmp_path: Path,
) -> None:
    runs = [*HELD_TOO_LONG, summary("cooperative-sticky", "scale-up", moved=8, restoring=16.0)]
    write_comparison(runs, tmp_path / "held", intro=["A partition's state takes 2 s."])
    page = (tmp_path / "held" / "comparison.html").read_text()
    assert page.count('<img src="data:image/png;base64,') == 2  # a chart per situation
    assert page.count('<div class="side">') == 2
    assert "A partition&#x27;s state takes 2 s." in page
    assert "cooperative-deferred handed no partition to another member (the fewest)" in page
    assert '<p class="missed">Not as designed: waiting for a bounced member' in page
    assert "Findings: 1 design claim did not hold in these runs" in page
    markdown = (tmp_path / "held" / "comparison.md").read_text()
    assert "- cooperative-sticky handed partitions to another member 24 times" in markdown
    assert sorted(p.name for p in (tmp_path / "held").glob("*.png")) == [
        "tradeoff-1.png",
        "tradeoff-2.png",
    ]
    write_comparison(AS_DESIGNED, tmp_path / "designed")
    page = (tmp_path / "designed" / "comparison.html").read_text()
    assert "Not as designed" not in page
    assert "it won in these runs" in page


def test_runs_of_one_protocol_in_one_situation_are_told_apart_by_their_run() -> None:
    again = summary("cooperative-sticky", moved=20, unowned=1.0, restoring=30.0)
    again = msgspec.structs.replace(again, run="coop-2")
    [points] = situations([*AS_DESIGNED, again]).values()
    assert [p.name for p in points] == [
        "range",
        "cooperative-sticky [cooperative-sticky-rolling-bounce]",
        "cooperative-deferred",
        "cooperative-sticky [coop-2]",
    ]


def test_a_loss_to_a_protocol_that_gave_partitions_back_says_so() -> None:
    """Eager range in a stateful bounce: every partition stops, but most go back to the
    member that has their state; cooperative-sticky moves fewer, to members without it."""
    runs = [
        summary("range", moved=40, returned=36, restored=1_000, unowned=10.0, restoring=8.0),
        summary(
            "cooperative-sticky", moved=16, returned=2, restored=4_000, unowned=1, restoring=32
        ),
    ]
    [points] = situations(runs).values()
    [lost] = verdicts(points)
    assert not lost.held
    assert lost.text.endswith(
        "Where it lost: restoring 32.0 against 8.0 partition-seconds (range handed partitions "
        "back to the member that had them last 36 times, cooperative-sticky 2)."
    )
    cut = [
        msgspec.structs.replace(runs[0], restores=12, restores_cut=12),
        msgspec.structs.replace(runs[1], restores=20, restores_cut=2),
    ]
    [points] = situations(cut).values()
    [lost] = verdicts(points)
    assert lost.text.endswith(
        "Where it lost: restoring 32.0 against 8.0 partition-seconds (range cut 12 of its 12 "
        "restores short, handing the partition on before its new owner had rebuilt its state, "
        "and replayed 1,000 records; cooperative-sticky cut 2 of its 20 and replayed 4,000)."
    )
    unsplit = [msgspec.structs.replace(s, restoring_partition_seconds=None) for s in runs]
    [points] = situations(unsplit).values()
    [lost] = verdicts(points)
    assert lost.text.endswith("Its stops are not split into unowned and restoring in this report.")


def test_claims_are_checked_for_every_run_of_a_protocol_that_ran_twice(tmp_path: Path) -> None:
    """Two runs of one protocol in a situation are told apart by their run's name, and the
    design claims are still checked, for each of them and against each rival's run."""
    twice = [
        summary("range", moved=3, unowned=2.0, restoring=1.0),
        msgspec.structs.replace(
            summary("cooperative-sticky", moved=4, unowned=3.0, restoring=1.5), run="coop-1"
        ),
        msgspec.structs.replace(
            summary("cooperative-sticky", moved=2, unowned=1.0, restoring=0.5), run="coop-2"
        ),
    ]
    [points] = situations(twice).values()
    found = [(v.held, v.text) for v in verdicts(points)]
    assert [held for held, _ in found] == [False, True]
    assert found[0][1].startswith("Not as designed: ")
    assert "cooperative-sticky [coop-1] should have had no more stopped" in found[0][1]
    assert found[1][1].startswith(
        "As designed, cooperative-sticky [coop-2] had no more stopped partition-seconds than "
        "range (1.5 against range 3.0)"
    )
    write_comparison(twice, tmp_path)
    page = (tmp_path / "comparison.md").read_text()
    assert "No protocol ran beside a rival" not in page
    assert "Findings: 1 design claim did not hold in these runs" in page


def test_restores_all_cut_before_a_record_are_not_called_no_state() -> None:
    """40 restores started and all cut short at once: no record replayed, but the run did
    set out to rebuild state, and the sentence says so."""
    runs = [
        summary("range", moved=40, returned=40, restored=0, restores=40, cut=40, unowned=1.0),
        summary("cooperative-sticky", moved=1, restored=0, unowned=2.0),
    ]
    said = sentences(runs)
    assert said["range"].startswith(
        "range handed partitions to another member 40 times (the most), handed partitions "
        "back to the member that had them last 40 times, and started 40 restores and cut 40 "
        "of them short before a record of state was replayed; "
    )
    assert "restored no state" not in said["range"]
    assert "and restored no state; " in said["cooperative-sticky"]


def test_a_tie_is_said_to_be_a_tie_not_a_win(tmp_path: Path) -> None:
    """Nothing stopped under either protocol: the claim that one stops less is neither
    shown nor refuted, and the closing note does not say it won."""
    runs = [summary("range", unowned=0.0), summary("cooperative-sticky", unowned=0.0)]
    [points] = situations(runs).values()
    [tie] = verdicts(points)
    assert tie.tied
    assert tie.text.startswith(
        "A tie: cooperative-sticky had as many stopped partition-seconds as range "
        "(0.0 against range 0.0), so these runs neither show nor refute that"
    )
    assert "As designed" not in tie.text
    write_comparison(runs, tmp_path)
    closing = (tmp_path / "comparison.md").read_text().splitlines()[-1]
    assert closing.startswith("Every check of a design claim here was a tie (1 design claim)")
    assert "it won" not in closing


def test_unowned_time_is_called_held_or_between_owners_from_what_the_log_shows() -> None:
    """An eager run that moved nothing but revoked everything and gave it straight back
    was between owners, not holding; a deferred run that moved one partition but held
    the rest for their bounced member was mostly holding."""
    runs = [
        summary("range", moved=0, returned=24, unowned=6.0, restoring=0.0, held=0.0),
        summary("cooperative-deferred", moved=1, unowned=10.0, restoring=1.0, held=8.0),
    ]
    said = sentences(runs)
    assert said["range"].endswith("; 100% of that was partitions unowned, between owners.")
    assert said["cooperative-deferred"].endswith(
        "; 73% of that was partitions held for a member that went away, unowned; 18% was "
        "between owners."
    )


def kafka(
    protocol: str, scenario: str = "rolling-bounce", *, moved: int, unowned: float
) -> RunSummary:
    """A run of confluent-kafka consumers (6 partitions, no state)."""
    return summary(
        protocol, scenario, moved=moved, unowned=unowned, client="confluent-kafka", partitions=6
    )


# confluent-kafka consumers through one rolling bounce: eager, cooperative and KIP-848's
# consumer protocol (the coordinator assigns), the same client for each
CONSUMER_BOUNCE = [
    kafka("range", moved=18, unowned=9.0),
    kafka("cooperative-sticky", moved=12, unowned=3.6),
    kafka("consumer", moved=12, unowned=2.8),
]


def test_the_consumer_protocol_sits_beside_the_same_clients_eager_and_cooperative_runs() -> None:
    groups = situations(CONSUMER_BOUNCE)
    [(situation, points)] = groups.items()
    assert situation == "rolling-bounce, 6 partitions, confluent-kafka members"
    assert [p.name for p in points] == [
        "range (confluent-kafka)",
        "cooperative-sticky (confluent-kafka)",
        "consumer (confluent-kafka)",
    ]
    said = {p.name: sentence(p, points) for p in points}
    assert "the least: it kept processing most" in said["consumer (confluent-kafka)"]
    found = {(v.claim.protocol, v.claim.metric): v for v in verdicts(points)}
    # the claims are the protocols', whoever the members are
    assert found[("cooperative-sticky", "stopped")].held
    consumer = found[("consumer", "stopped")]
    assert consumer.held
    assert consumer.text.startswith(
        "As designed, consumer (confluent-kafka) had no more stopped partition-seconds than "
        "range (confluent-kafka) and cooperative-sticky (confluent-kafka) (2.8 against "
        "range (confluent-kafka) 9.0, cooperative-sticky (confluent-kafka) 3.6)"
    )


def test_a_consumer_protocol_that_stops_longer_than_cooperative_is_a_finding() -> None:
    slower = [*CONSUMER_BOUNCE[:2], kafka("consumer", moved=12, unowned=5.5)]
    [points] = situations(slower).values()
    [lost] = [v for v in verdicts(points) if v.claim.protocol == "consumer"]
    assert not lost.held
    assert "it had 5.5 against range (confluent-kafka) 9.0" in lost.text
    assert "Where it lost: unowned 5.5 against 3.6 partition-seconds" in lost.text
    # a join: checked against eager only (a cooperative join moves as little)
    join = [
        kafka("range", "scale-up", moved=6, unowned=4.0),
        kafka("consumer", "scale-up", moved=2, unowned=0.6),
    ]
    [points] = situations(join).values()
    [v] = verdicts(points)
    assert (v.claim.protocol, v.claim.situation, v.held) == ("consumer", "scale-up", True)


def test_the_comparison_page_has_the_consumer_protocols_figures_and_verdict(tmp_path: Path) -> None:
    write_comparison([*AS_DESIGNED, *CONSUMER_BOUNCE], tmp_path)
    md = (tmp_path / "comparison.md").read_text()
    assert "## rolling-bounce, 6 partitions, confluent-kafka members" in md
    assert "- consumer (confluent-kafka) handed partitions to another member 12 times" in md
    assert "As designed, consumer (confluent-kafka) had no more stopped partition-seconds" in md
    rows = msgspec.json.decode((tmp_path / "comparison.json").read_bytes())
    assert [(r["protocol"], r["client"]) for r in rows][-1] == ("consumer", "confluent-kafka")
    assert "consumer (confluent-kafka)" in (tmp_path / "comparison.html").read_text()
