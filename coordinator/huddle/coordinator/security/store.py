"""Users and ACLs, kept with the coordinator's state: a file in the data dir, or a key in etcd.

Both hold one ``SecurityState`` document. ``huddle users`` and ``huddle acls`` change it
with ``update`` (a read-change-write that two writers cannot interleave: a lock file
beside it, or an etcd transaction on the key's revision); a running coordinator reads it
again when it changed (``poll``), within a second, so no restart is needed.

A store that is not there at all is a new one: no users, no ACLs. But one that goes away
once it was read is a fault, as one that cannot be decoded is: ``poll`` raises
``SecurityStoreError`` for both (once per change), and the coordinator keeps what it read
last. So ``update`` does not make a new store where a coordinator has kept its state (a
journal in the data dir, keys under the cluster's prefix) unless told to (``create``): the
store there was most likely deleted, and a new one would lock out every user it held.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import stat
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Protocol, TypeVar

import msgspec

from huddle.coordinator.security.acls import Acl
from huddle.coordinator.security.credentials import User
from huddle.coordinator.storage.journal import JOURNAL
from huddle.protocol.errors import HuddleError

FILE_NAME = "security.json"
LOCK_NAME = "security.lock"
ETCD_KEY = "security"  # under the cluster's prefix
_UNREAD = (-1, -1, -1)  # no file has this stamp: read the file at the next poll


class SecurityState(msgspec.Struct, frozen=True, kw_only=True):
    users: dict[str, User] = msgspec.field(default_factory=dict)
    acls: list[Acl] = msgspec.field(default_factory=list)
    # Makes up the salt SCRAM answers for a user that does not exist: kept, so every node
    # and every restart answers the same (a salt that changed would tell who does not exist).
    decoy_secret: bytes = b""


def with_secret(state: SecurityState) -> SecurityState:
    """The state, with a decoy secret made if it has none yet."""
    if state.decoy_secret:
        return state
    return msgspec.structs.replace(state, decoy_secret=os.urandom(32))


class ReadPendingError(HuddleError, TimeoutError):
    """The last read of the store has not returned (a hung file system?): no second read is
    started. A ``TimeoutError``, as a read past its deadline is; not a ``SecurityStoreError``
    (the store is not known to be unusable)."""


class SecurityStoreError(HuddleError):
    """The store cannot be read or written: says which and why."""


def decode_state(data: bytes, where: str) -> SecurityState:
    try:
        return msgspec.json.decode(data, type=SecurityState)
    except (msgspec.DecodeError, ValueError) as exc:
        raise SecurityStoreError(f"{where} is not a huddle security store: {exc}") from None


def encode_state(state: SecurityState) -> bytes:
    return msgspec.json.format(msgspec.json.encode(state), indent=1) + b"\n"


Change = Callable[[SecurityState], SecurityState]
T = TypeVar("T")


def in_thread(work: Callable[[], T]) -> asyncio.Future[T]:
    """``work()`` in a daemon thread of its own, its result in a future of the running loop.
    A read that never returns (a hung network file system) holds that thread only: not the
    event loop, not a pool's worker, not the process's exit."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[T] = loop.create_future()

    def settle(result: T | None, error: BaseException | None) -> None:
        if future.done():
            return
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(result)  # type: ignore[arg-type]

    def run() -> None:
        try:
            result, error = work(), None
        except BaseException as exc:  # handed to the loop, whatever it is
            result, error = None, exc
        with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
            loop.call_soon_threadsafe(settle, result, error)

    threading.Thread(target=run, name="huddle-store-read", daemon=True).start()
    return future


def new_store_refused(where: str, state: str) -> SecurityStoreError:
    return SecurityStoreError(
        f"{where} does not exist, but {state}: was the store deleted? A running coordinator "
        "serves on with the users and ACLs it read last; restore the store from a backup, "
        "or start a new one, without the users and ACLs it held, with --new-store"
    )


class SecurityStore(Protocol):
    where: str

    async def load(self) -> SecurityState: ...

    async def update(self, change: Change, *, create: bool = False) -> SecurityState:
        """Apply ``change`` and keep the result; SecurityStoreError if there is no store yet
        where a coordinator kept its state, unless ``create``."""

    async def poll(self) -> SecurityState | None:
        """The state if it changed since the last load or poll, else None."""


class FileStore:
    """``security.json`` in a directory (the data dir), written atomically, mode 0600.

    A coordinator reads it off its event loop (``load``, ``poll``), one read at a time: a
    read that does not return (a hung file system) fails every poll after it at once until
    it does. Only a regular file is read: a FIFO or a device in its place is refused (a
    FIFO's open would wait for a writer for ever)."""

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.directory = Path(directory)
        self.path = self.directory / FILE_NAME
        self.where = str(self.path)
        self._seen: tuple[int, int, int] | None = _UNREAD  # None: there was no file
        self._reading: asyncio.Future[SecurityState | None] | None = None

    def _stamp(self) -> tuple[int, int, int] | None:
        try:
            st = self.path.stat()
        except FileNotFoundError:
            return None
        return st.st_ino, st.st_mtime_ns, st.st_size

    def _read(self, *, missing_ok: bool = True) -> SecurityState:
        self._seen = self._stamp()
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_NONBLOCK)  # a FIFO's: at once
            with os.fdopen(fd, "rb") as file:
                if not stat.S_ISREG(os.fstat(file.fileno()).st_mode):
                    raise SecurityStoreError(f"{self.path} is not a regular file")
                data = file.read()
        except FileNotFoundError:
            self._seen = None
            if missing_ok:
                return SecurityState()
            raise SecurityStoreError(f"{self.path} is gone") from None
        except OSError as exc:
            self._seen = _UNREAD  # tried again at the next poll
            raise SecurityStoreError(f"cannot read {self.path}: {exc.strerror}") from None
        return decode_state(data, str(self.path))

    def _poll_now(self) -> SecurityState | None:
        if self._stamp() == self._seen:
            return None
        return self._read(missing_ok=False)  # read before: gone now is a fault

    async def _off_loop(self, read: Callable[[], SecurityState | None]) -> SecurityState | None:
        if self._reading is not None and not self._reading.done():
            raise ReadPendingError(
                f"the last read of {self.path} has not returned yet (a hung file system?)"
            )
        self._reading = in_thread(read)
        return await asyncio.shield(self._reading)  # a caller's deadline leaves it running

    async def load(self) -> SecurityState:
        state = await self._off_loop(self._read)
        assert state is not None
        return state

    async def poll(self) -> SecurityState | None:
        return await self._off_loop(self._poll_now)

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.directory / LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o600)
        except OSError as exc:
            raise SecurityStoreError(f"cannot write in {self.directory}: {exc.strerror}") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    async def update(self, change: Change, *, create: bool = False) -> SecurityState:
        with self._locked():
            current = self._read()
            if self._seen is None and not create and (self.directory / JOURNAL).exists():
                raise new_store_refused(self.where, f"{self.directory} holds a coordinator's data")
            state = with_secret(change(current))
            temp = self.path.with_suffix(".json.tmp")
            fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            try:
                with os.fdopen(fd, "wb", closefd=False) as out:
                    out.write(encode_state(state))  # all of it (os.write may write part)
                os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(temp, self.path)
            directory = os.open(self.directory, os.O_RDONLY)
            try:
                os.fsync(directory)  # the rename itself survives a crash
            finally:
                os.close(directory)
            return state


class EtcdSecurityStore:
    """One key under the cluster's prefix; every node reads it again when its revision
    changes."""

    def __init__(self, store: Any, prefix: str) -> None:
        self.store = store  # an EtcdStore
        self.prefix = f"{prefix.rstrip('/')}/".encode()
        self.key = self.prefix + ETCD_KEY.encode()
        self.where = f"etcd key {self.key.decode()}"
        self._revision = -1

    async def _read(self) -> tuple[SecurityState, int]:
        entry = await self.store.get(self.key)
        if entry is None:
            return SecurityState(), 0
        return decode_state(entry.value, self.where), entry.revision

    async def load(self) -> SecurityState:
        state, self._revision = await self._read()
        return state

    async def poll(self) -> SecurityState | None:
        entry = await self.store.get(self.key)
        revision = 0 if entry is None else entry.revision
        if revision == self._revision:
            return None
        self._revision = revision
        if entry is None:  # there was one when it was loaded or polled before
            raise SecurityStoreError(f"{self.where} is gone")
        return decode_state(entry.value, self.where)

    async def update(self, change: Change, *, create: bool = False) -> SecurityState:
        for _ in range(100):  # another writer in between: read again and redo
            state, revision = await self._read()
            if revision == 0 and not create and await self._cluster_state():
                cluster = f"the cluster under {self.prefix.decode()} holds state"
                raise new_store_refused(self.where, cluster)
            new = with_secret(change(state))
            data = encode_state(new)
            if revision == 0:
                if await self.store.create(self.key, data):
                    return new
            elif await self.store.write_fenced(self.key, revision, {self.key: data}):
                return new
        raise SecurityStoreError(f"{self.where} kept changing under this update; try again")

    async def _cluster_state(self) -> bool:
        """Whether a cluster keeps state under the prefix (the store itself aside: another
        writer may have made it since it was read)."""
        return any(key != self.key for key in await self.store.keys(self.prefix))
