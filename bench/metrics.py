"""What metrics cost: heartbeats/s of ``huddle serve --metrics-port`` against the same
server without, same run, rounds alternating (``bench.heartbeat``'s blasters: one group of
K members, pipelined heartbeats). The metrics endpoint is scraped every second meanwhile,
as Prometheus would. Target: metrics cost at most 5% of heartbeat throughput.
Run: ``python -m bench.metrics``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import threading
import urllib.request

from huddle.testing import free_port

from bench.common import cpu_model, quiet_logs
from bench.heartbeat import CLIENT_CPU, SERVER_CPU, Setup, add_compare_arguments, compare
from bench.processes import (
    cancelled_by_sigterm,
    exit_on_sigterm,
    huddle_serve,
    new_event_loop,
    pin_to_cpu,
    server_process,
)


def scrape_every_second(port: int, stop: threading.Event) -> None:
    while not stop.wait(1.0):
        url = f"http://127.0.0.1:{port}/metrics"
        with contextlib.suppress(OSError), urllib.request.urlopen(url, timeout=5) as r:
            r.read()


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    add_compare_arguments(parser, rounds=7)
    args = parser.parse_args()
    quiet_logs()
    exit_on_sigterm()
    pin_to_cpu(0, CLIENT_CPU)
    print(f"CPU: {cpu_model()}")
    print(
        f"heartbeats: 1 group of {args.members} members over {args.connections} connections, "
        f"{args.rounds} rounds of {args.seconds:g} s per server; /metrics scraped every second"
    )
    metrics_port = free_port()
    delay = ("--initial-rebalance-delay-ms", "300")
    stop = threading.Event()
    with (
        server_process("plain", huddle_serve(*delay), cpu=SERVER_CPU) as plain,
        server_process(
            "metrics", huddle_serve(*delay, "--metrics-port", str(metrics_port)), cpu=SERVER_CPU
        ) as metered,
        asyncio.Runner(loop_factory=new_event_loop) as runner,
    ):
        scraper = threading.Thread(target=scrape_every_second, args=(metrics_port, stop))
        scraper.start()
        try:
            base, other = Setup("plain", plain), Setup("metrics", metered)
            runner.run(cancelled_by_sigterm(compare(args, base, other)))
        finally:
            stop.set()
            scraper.join()


if __name__ == "__main__":
    main()
