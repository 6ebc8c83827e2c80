"""The cost of security: a SCRAM handshake, and heartbeats over TLS against plain TCP.

1. Handshakes: ``connect()`` (the member library's connection) to ``huddle serve`` opened
   and closed N times, one after another, for each way of connecting: plain, TLS, SCRAM-SHA-256,
   SCRAM-SHA-512, and TLS with SCRAM-SHA-512. Median and p95 milliseconds per connection, and
   the server's CPU time per connection. A SCRAM client derives its key from the password
   (PBKDF2, the user's iteration count) each time: most of its cost is on the client.
2. Heartbeats/s: one group of K members, pipelined heartbeats (``bench.heartbeat``'s
   blasters) against two coordinators, one plain and one with TLS, rounds alternating. The
   figure is median(TLS) / median(plain), and the same per second of server CPU.

Servers run as child processes pinned to CPU 0, this client to CPU 1. Run:
``python -m bench.security``.
"""

from __future__ import annotations

import argparse
import asyncio
import ssl
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

import trustme

from bench.common import cpu_model, quiet_logs
from bench.heartbeat import CLIENT_CPU, SERVER_CPU, Setup, add_compare_arguments, compare
from bench.processes import (
    HOST,
    ServerProcess,
    cancelled_by_sigterm,
    cpu_seconds,
    exit_on_sigterm,
    huddle_serve,
    new_event_loop,
    pin_to_cpu,
    server_process,
)
from huddle.client.connection import connect
from huddle.client.security import Security

PASSWORD = "bench-password"


def make_certificates(directory: Path) -> tuple[str, str]:
    ca = trustme.CA()
    server = directory / "server.pem"
    ca.issue_cert(HOST).private_key_and_cert_chain_pem.write_to_path(str(server))
    ca_file = directory / "ca.pem"
    ca.cert_pem.write_to_path(str(ca_file))
    return str(server), str(ca_file)


def add_user(data_dir: Path, iterations: int) -> None:
    script = Path(huddle_serve()(0)[0])
    head = [str(script)] if script.name == "huddle" else huddle_serve()(0)[:3]
    subprocess.run(
        [
            *head,
            "users",
            "add",
            "bench",
            "--password-stdin",
            "--iterations",
            str(iterations),
            "--data-dir",
            str(data_dir),
        ],
        input=PASSWORD + "\n",
        text=True,
        check=True,
        capture_output=True,
    )


async def handshakes(
    server: ServerProcess, security: Security, count: int
) -> tuple[list[float], float]:
    times = []
    cpu0 = cpu_seconds(server.pid)
    for _ in range(count):
        began = time.perf_counter()
        async with connect(f"{HOST}:{server.port}", security=security, notices=False):
            pass
        times.append((time.perf_counter() - began) * 1000)
    return times, (cpu_seconds(server.pid) - cpu0) / count * 1000


def summary(times: list[float]) -> str:
    ordered = sorted(times)
    p95 = ordered[int(len(ordered) * 0.95) - 1]
    return f"median {statistics.median(times):6.2f} ms  p95 {p95:6.2f} ms"


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--handshakes", type=int, default=200, help="connections per way")
    parser.add_argument("--iterations", type=int, default=8192, help="the user's PBKDF2 count")
    add_compare_arguments(parser, rounds=5)
    args = parser.parse_args()
    quiet_logs()
    exit_on_sigterm()
    pin_to_cpu(0, CLIENT_CPU)
    print(f"CPU: {cpu_model()}")
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        cert, ca = make_certificates(directory)
        data = directory / "data"
        add_user(data, args.iterations)
        tls_flags = ("--tls-cert", cert, "--tls-key", cert)
        sasl_flags = ("--data-dir", str(data), "--sasl", "SCRAM-SHA-256,SCRAM-SHA-512")
        delay = ("--initial-rebalance-delay-ms", "300")
        context = ssl.create_default_context(cafile=ca)
        ways = [
            ("plain", (), Security()),
            ("TLS", tls_flags, Security(ca_file=ca)),
            (
                "SCRAM-SHA-256",
                sasl_flags,
                Security(mechanism="SCRAM-SHA-256", username="bench", password=PASSWORD),
            ),
            (
                "SCRAM-SHA-512",
                sasl_flags,
                Security(mechanism="SCRAM-SHA-512", username="bench", password=PASSWORD),
            ),
            (
                "TLS+SCRAM-SHA-512",
                (*tls_flags, *sasl_flags),
                Security(ca_file=ca, username="bench", password=PASSWORD),
            ),
        ]
        print(
            f"handshakes: {args.handshakes} connections per way, one after another "
            f"(user with {args.iterations} iterations)"
        )
        with asyncio.Runner(loop_factory=new_event_loop) as runner:
            for name, flags, security in ways:
                with server_process(name, huddle_serve(*flags), cpu=SERVER_CPU) as server:
                    times, server_ms = runner.run(handshakes(server, security, args.handshakes))
                print(f"  {name:>18}: {summary(times)}  server CPU {server_ms:5.2f} ms each")
            print(
                f"heartbeats: 1 group of {args.members} members over {args.connections} "
                f"connections, {args.rounds} rounds of {args.seconds:g} s per server"
            )
            with (
                server_process("plain", huddle_serve(*delay), cpu=SERVER_CPU) as plain,
                server_process("tls", huddle_serve(*delay, *tls_flags), cpu=SERVER_CPU) as tls,
            ):
                base, other = Setup("plain", plain), Setup("TLS", tls, context)
                runner.run(cancelled_by_sigterm(compare(args, base, other)))


if __name__ == "__main__":
    main()
