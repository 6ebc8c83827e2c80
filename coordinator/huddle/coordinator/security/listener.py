"""A listener's security, as the server uses it: its TLS context (reloaded whole, or not
at all), the SASL mechanisms it requires, the users and ACLs it reads from the store
(again within a second of a change; the last good ones kept while the store cannot be
used), and the limits on password guesses per address group (``throttle``).

Which principal a connection is: the SASL user when the listener requires SASL (Kafka's
SASL_PLAINTEXT and SASL_SSL), else the subject of a verified client certificate (mTLS,
Kafka's SSL with client authentication), else ``User:ANONYMOUS``.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import ssl
from collections import Counter
from collections.abc import Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import structlog

from huddle.coordinator.config import ServerConfig, sasl_mechanisms, super_users
from huddle.coordinator.security.acls import ANONYMOUS, Authorizer
from huddle.coordinator.security.chain import Names, changes
from huddle.coordinator.security.credentials import (
    DEFAULT_ITERATIONS,
    PLAIN,
    SCRAM_MECHANISMS,
    User,
    plain_credential,
)
from huddle.coordinator.security.sasl import DecoyShape, SaslSession
from huddle.coordinator.security.store import (
    FileStore,
    SecurityState,
    SecurityStore,
    SecurityStoreError,
)
from huddle.coordinator.security.throttle import FailureThrottle, ProofTurns, Turn, address_group
from huddle.coordinator.security.tls import ServerTls, TlsConfigError, certificate_principal
from huddle.protocol.errors import ErrorCode, HuddleError
from huddle.protocol.messages import MAX_LOGIN_HOLD_S

log = structlog.get_logger("huddle.security")

POLL_S = 1.0  # how often the store is asked whether users or ACLs changed
POLL_DEADLINE_S = 5.0  # a read of the store that takes longer failed
# Password checks under way at once per address group, their answers held back included:
# a guesser with many connections gets no more guesses than this per slow-down.
PROOFS_AT_ONCE = 4
FAILED_MESSAGE = "authentication failed: invalid credentials"


class SecurityStartError(HuddleError):
    """The listener's security cannot start: a TLS file, or the users and ACLs store."""


class ListenerSecurity:
    def __init__(self, config: ServerConfig) -> None:
        self.config = config
        self.tls = (
            ServerTls(config.tls_cert, config.tls_key, config.tls_client_ca or None)
            if config.tls_cert
            else None
        )
        self.context: ssl.SSLContext | None = None
        self.mechanisms = sasl_mechanisms(config.sasl)
        self.authorizer = (
            Authorizer(super_users=super_users(config.super_users)) if config.authorizer else None
        )
        self.users: dict[str, User] = {}
        self.decoys: dict[str, DecoyShape] = {}  # mechanism -> what most users' is like
        self.turns = ProofTurns(PROOFS_AT_ONCE)  # password checks under way, and waiting
        # PLAIN's key derivations run here, never on the event loop; two at a time at most
        self.executor = (
            ThreadPoolExecutor(max_workers=2, thread_name_prefix="huddle-plain")
            if "PLAIN" in self.mechanisms
            else None
        )
        self.throttle = FailureThrottle(
            max_s=min(MAX_LOGIN_HOLD_S, config.handshake_timeout_ms / 2000)
        )
        self.secret = os.urandom(32)  # makes up the salts of users that do not exist
        self._kept_secret = b""  # the store's own, to tell a new store from the one read
        self.store: SecurityStore | None = None
        self.store_failures = 0  # reads of the store that failed, or found it unusable
        self._store_unusable = ""  # why what the store holds now cannot be used
        self._store_unreadable = ""  # why the last read of it failed
        self._etcd: Any = None
        self._poller: asyncio.Task[None] | None = None
        self._closing = False
        self._live: ssl.SSLContext | None = None  # what new TLS connections use (reloads)
        self._chain: list[Names] = []  # the names of the certificate chain in use

    @property
    def uses_store(self) -> bool:
        return bool(self.mechanisms) or self.authorizer is not None

    async def open(self) -> None:
        """Load the TLS files and the users and ACLs; SecurityStartError if one cannot be."""
        if self.tls is not None:
            try:
                self.context, self._chain = self.tls.load()
                self._live = self.context
            except TlsConfigError as exc:
                raise SecurityStartError(f"TLS: {exc}") from None
            # every new connection is made with ``context``; once its hello is read it
            # is moved to the context loaded last (the same one until a reload)
            self.context.sni_callback = self._use_live_context
        if not self.uses_store:
            return
        cfg = self.config
        try:
            if cfg.cluster:
                from huddle.coordinator.cluster.store import EtcdStore, parse_endpoints
                from huddle.coordinator.security.store import EtcdSecurityStore

                self._etcd = await EtcdStore.connect(parse_endpoints(cfg.cluster))
                self.store = EtcdSecurityStore(self._etcd, cfg.cluster_prefix)
            else:
                self.store = FileStore(cfg.data_dir)
            self._apply(await asyncio.wait_for(self.store.load(), POLL_DEADLINE_S))
        except SecurityStoreError as exc:
            await self.close()
            raise SecurityStartError(str(exc)) from None
        except TimeoutError:
            await self.close()
            raise SecurityStartError(
                f"reading the users and ACLs ({self.store.where if self.store else 'store'}) "
                f"took over {POLL_DEADLINE_S:.0f} s"
            ) from None
        except Exception as exc:
            await self.close()
            raise SecurityStartError(f"cannot read the users and ACLs: {exc}") from None
        self._poller = asyncio.create_task(self._poll(), name="huddle security store")

    async def close(self) -> None:
        if self.executor is not None:
            self.executor.shutdown(wait=False, cancel_futures=True)
        if self._poller is not None:
            poller, self._poller = self._poller, None
            self._closing = True  # a cancel that asyncio.wait_for swallowed still ends it
            while not poller.done():
                poller.cancel()
                await asyncio.wait({poller}, timeout=POLL_S)
            with contextlib.suppress(asyncio.CancelledError, Exception):
                poller.result()
        if self._etcd is not None:
            with contextlib.suppress(Exception):
                await self._etcd.close()
            self._etcd = None

    def reload_tls(self) -> None:
        """Load the certificate, key and client CA again (SIGHUP) into a new context, and
        make new connections use it; if they do not load together (a certificate written
        and its key not yet, say, or a chain cut short), or the certificate's names
        change without ``--tls-allow-name-changes``, nothing changes: the old ones are
        served on."""
        if self.tls is None or self.context is None:
            return
        try:
            fresh, chain = self.tls.load()
            changed = changes(self._chain, chain)
            if changed and not self.config.tls_allow_name_changes:
                raise TlsConfigError(
                    f"the new certificate in {self.tls.cert} changes {', '.join(changed)}: "
                    "a reload keeps them unless huddle serve runs with "
                    "--tls-allow-name-changes (or restart it with the new certificate)"
                )
        except TlsConfigError as exc:
            log.error("tls_reload_failed", error=str(exc), keeping="the certificate in use")
            return
        self._live, self._chain = fresh, chain
        log.info("tls_reloaded", cert=self.tls.cert)

    def _use_live_context(self, conn: Any, server_name: str | None, context: Any) -> None:
        live = self._live
        if live is not None and live is not context:
            conn.context = live

    @property
    def store_healthy(self) -> bool:
        """Whether the users and ACLs in use are what the store holds now."""
        return not (self._store_unusable or self._store_unreadable)

    def _apply(self, state: SecurityState) -> None:
        kept = self._kept_secret
        if kept and state.decoy_secret and state.decoy_secret != kept:
            # not the store read before but a new one (`--new-store`, a backup restored):
            # users it lacks can no longer log in
            assert self.store is not None
            log.warning(
                "security_store_replaced",
                where=self.store.where,
                users=len(state.users),
                users_gone=len(set(self.users) - set(state.users)),
            )
        self._kept_secret = state.decoy_secret
        self.users = dict(state.users)
        self.decoys = typical_iterations(state.users.values())
        if state.decoy_secret:
            self.secret = state.decoy_secret
        if self.authorizer is not None:
            self.authorizer.replace(state.acls)
        log.info("security_loaded", users=len(self.users), acls=len(state.acls))

    async def _poll(self) -> None:
        """Read the store again every second. While it cannot be read (etcd away), or what
        it holds cannot be used (malformed, or gone: a missing store after a good one is
        a fault, not "no users"), the last good users and ACLs are kept, the failure is
        logged (once) and counted, and ``store_healthy`` is False."""
        assert self.store is not None
        while not self._closing:
            await asyncio.sleep(POLL_S)
            was_healthy = self.store_healthy
            try:
                state = await asyncio.wait_for(self.store.poll(), POLL_DEADLINE_S)
                if state is not None:
                    self._apply(state)
                    self._store_unusable = ""
            except asyncio.CancelledError:
                raise
            except SecurityStoreError as exc:  # unusable until it changes
                self._store_failed(str(exc), unusable=True)
                continue
            except Exception as exc:  # not read this time
                self._store_failed(str(exc) or type(exc).__name__, unusable=False)
                continue
            self._store_unreadable = ""
            if self.store_healthy and not was_healthy:
                log.info("security_store_recovered", where=self.store.where)

    def _store_failed(self, error: str, *, unusable: bool) -> None:
        assert self.store is not None
        self.store_failures += 1
        if unusable:  # logged once per content that cannot be used
            logged = error == self._store_unusable
            self._store_unusable = error
        else:  # once per time it cannot be read, however the reason reads
            logged = bool(self._store_unreadable)
            self._store_unreadable = error
        if not logged:
            log.error(
                "security_store_failed",
                where=self.store.where,
                error=error,
                keeping="the last good users and ACLs",
                users=len(self.users),
            )

    # --- connections ------------------------------------------------------------------

    def principal_of(self, peercert: Mapping[str, Any] | None) -> str:
        """A connection's principal before any SASL: its certificate's, or ANONYMOUS."""
        return certificate_principal(peercert) or ANONYMOUS

    def greet(self, mechanism: str | None) -> SaslSession | tuple[ErrorCode, str] | None:
        """What a handshake naming ``mechanism`` begins: a SASL exchange, nothing more to
        do (None), or a refusal (code, message)."""
        if not self.mechanisms:
            if mechanism is None:
                return None
            return (
                ErrorCode.UNSUPPORTED_SASL_MECHANISM,
                f"this coordinator takes no SASL authentication (asked for {mechanism})",
            )
        offered = ", ".join(self.mechanisms)
        if mechanism is None:
            return (
                ErrorCode.SASL_AUTHENTICATION_FAILED,
                f"this coordinator requires SASL authentication ({offered}): give the client "
                "a username and password",
            )
        if mechanism not in self.mechanisms:
            return (
                ErrorCode.UNSUPPORTED_SASL_MECHANISM,
                f"SASL mechanism {mechanism} is not enabled here; use one of {offered}",
            )
        return SaslSession(mechanism, self.users.get, self.secret, self.decoys.get(mechanism))

    # --- password checks, per address group ----------------------------------------------

    def check_turn(self, conn_id: int, host: str, turn: Turn) -> bool:
        """Whether the connection's password check may start now; else ``turn`` is called
        (soon, from the event loop) once it may."""
        return self.turns.take(conn_id, address_group(host), turn)

    def check_ended(self, conn_id: int) -> None:
        """The connection's check succeeded, or was never made (its client went first):
        its turn goes to the next check of its group waiting, if any. Nothing if it had
        none."""
        turn = self.turns.end(conn_id)
        if turn is not None:
            asyncio.get_running_loop().call_soon(turn)

    def check_failed(self, conn_id: int, delay: float) -> None:
        """The connection's check failed: it keeps its turn until its answer's time,
        ``delay`` from now, whatever becomes of the connection meanwhile."""
        asyncio.get_running_loop().call_later(delay, self.check_ended, conn_id)

    def connection_gone(self, conn_id: int) -> None:
        """The connection closed: a check of it still waiting for its turn is never made.
        A check made keeps its turn as long as it would have (``check_failed``)."""
        if self.turns.is_waiting(conn_id):
            self.turns.end(conn_id)

    def waiting(self, conn_id: int) -> bool:
        """Whether the connection's password check waits for its turn."""
        return self.turns.is_waiting(conn_id)

    def group_of(self, host: str) -> str:
        """The address group a host's password checks count for."""
        return address_group(host)

    def failed(self, host: str, now: float) -> float:
        """Count a failure of the host's group; how long (s) to hold its answer back."""
        return self.throttle.failed(address_group(host), now)

    def failures(self, host: str, now: float) -> int:
        return self.throttle.failures(address_group(host), now)

    def penalty(self, host: str, now: float) -> float:
        """How long (s) a success's answer to the host is held back: as long as a failure's
        now would be while its group has recent failures."""
        return self.throttle.penalty(address_group(host), now)


def typical_iterations(users: Iterable[User]) -> dict[str, DecoyShape]:
    """Per mechanism, what most users' credential is like, for the one made up for a user
    that does not exist: a SCRAM mechanism's iteration count; for PLAIN, the mechanism and
    count of the credential a PLAIN check derives with (each user's ``plain_credential``:
    SCRAM-SHA-512's for users kept for that mechanism only). On a tie, the default."""
    counts: dict[str, Counter[DecoyShape]] = {}
    for user in users:
        for mechanism, credential in user.scram.items():
            shape = DecoyShape(mechanism, credential.iterations)
            counts.setdefault(mechanism, Counter())[shape] += 1
        first = plain_credential(user)
        if first is not None:
            counts.setdefault(PLAIN, Counter())[DecoyShape(first[0], first[1].iterations)] += 1
    typical = {}
    for mechanism in (*SCRAM_MECHANISMS, PLAIN):
        hashed = SCRAM_MECHANISMS[0] if mechanism == PLAIN else mechanism
        default = DecoyShape(hashed, DEFAULT_ITERATIONS)
        counter = counts.get(mechanism, Counter())
        best = max(counter.values(), default=0)
        tied = [shape for shape, count in counter.items() if count == best]
        typical[mechanism] = default if default in tied or not tied else min(tied)
    return typical
