"""Coverage-guided fuzzing (atheris) of the coordinator's input path, in-process.

Each input is a byte stream as a connection would deliver it: split into frames by
``FrameReader``, decoded by ``ServerCodec`` (and, for what does not validate,
``correlation_id``), and every call handed to the sans-IO ``Coordinator`` core with a clock
that moves on. What the protocol allows is caught as the server catches it (a refused frame,
an invalid body); any other exception is a crash, and atheris stops with the input that
caused it. Coverage of huddle's own modules guides the mutations; the corpus starts from
valid frames of every request type.

Needs atheris (``pip install atheris``, or ``pip install 'huddle[fuzz]'``).
Run: ``python -m bench.fuzz_core -atheris_runs=200000``.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import msgspec

from bench.common import quiet_logs

try:
    import atheris
except ImportError:  # pragma: no cover - an optional tool
    sys.exit("bench.fuzz_core needs atheris: pip install atheris")

with atheris.instrument_imports(include=["huddle"]):
    from huddle.chaos.fuzz import FrameFuzzer
    from huddle.coordinator.config import GroupConfig
    from huddle.coordinator.core import Coordinator, Peer
    from huddle.protocol.errors import CorruptMessageError, MessageTooLargeError
    from huddle.protocol.framing import FrameReader, ServerCodec
    from huddle.protocol.messages import Call

RESET_EVERY = 5_000  # inputs before the core starts afresh (bounds its memory)


class Target:
    def __init__(self) -> None:
        self.codec = ServerCodec()
        self.core = Coordinator(GroupConfig(initial_rebalance_delay_ms=0))
        self.now = 0.0
        self.inputs = 0

    def __call__(self, data: bytes) -> None:
        self.inputs += 1
        if self.inputs % RESET_EVERY == 0:
            self.core = Coordinator(GroupConfig(initial_rebalance_delay_ms=0))
        try:
            bodies = FrameReader(1 << 20).feed(data)
        except (MessageTooLargeError, CorruptMessageError):
            return  # a ProtocolError, and the connection closes
        peer = Peer(self.inputs % 7, "fuzz", "127.0.0.1")
        for body in bodies:
            try:
                frame = self.codec.decode(body)
            except msgspec.ValidationError:
                self.codec.correlation_id(body)  # an ErrorResponse, or a ProtocolError
                continue
            except msgspec.DecodeError:
                return  # a ProtocolError, and the connection closes
            self.now += 250.0
            if type(frame) is Call:
                self.core.handle(peer, frame.correlation_id, frame.request, self.now)
                self.core.take_changes()
            self.core.advance(self.now)


def seed_corpus(directory: Path, count: int = 200) -> None:
    fuzzer = FrameFuzzer(0)
    for i in range(count):
        request = fuzzer.valid_request()
        (directory / f"seed-{i:04}").write_bytes(fuzzer.handshake() + fuzzer.call(request, i + 1))


def main() -> None:
    quiet_logs()
    with tempfile.TemporaryDirectory() as corpus:
        seed_corpus(Path(corpus))
        args = [arg for arg in sys.argv if not arg.startswith("-")] or sys.argv[:1]
        flags = [arg for arg in sys.argv[1:] if arg.startswith("-")]
        atheris.Setup([args[0], *flags, corpus], Target())
        atheris.Fuzz()


if __name__ == "__main__":
    main()
