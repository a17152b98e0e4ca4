"""Web-view tickets: signed, one sandbox only, short-lived; and sessions that are not tickets."""

from __future__ import annotations

import logging
import time
from pathlib import Path

import pytest

from sandbox.errors import Unauthenticated
from sandbox.service.auth import Principal
from sandbox.service.tickets import TicketIssuer, shared_ticket_secret
from sandbox.store import EmbeddedStore

ALICE = Principal("alpha")
ADMIN = Principal("ops", admin=True)


def test_a_ticket_opens_its_sandbox_with_the_rights_it_was_issued_with() -> None:
    issuer = TicketIssuer(ttl_s=30)
    before = time.time()
    grant = issuer.verify(issuer.issue(ALICE, "desk-1", control=False), "desk-1")
    assert grant.principal == ALICE and grant.sandbox_id == "desk-1" and grant.control is False
    assert before + 29 < grant.expires_at <= time.time() + 30.01
    control = issuer.verify(issuer.issue(ADMIN, "desk-1", control=True), "desk-1")
    assert control.control is True and control.principal == ADMIN


def test_a_ticket_opens_no_other_sandbox() -> None:
    issuer = TicketIssuer()
    ticket = issuer.issue(ALICE, "desk-1", control=True)
    with pytest.raises(Unauthenticated, match="another sandbox"):
        issuer.verify(ticket, "desk-2")


def test_an_expired_ticket_is_refused() -> None:
    issuer = TicketIssuer(ttl_s=0.05)
    ticket = issuer.issue(ALICE, "desk-1", control=False)
    issuer.verify(ticket, "desk-1")
    time.sleep(0.1)
    with pytest.raises(Unauthenticated, match="expired"):
        issuer.verify(ticket, "desk-1")


@pytest.mark.parametrize(
    "mangle",
    [
        lambda t: "",
        lambda t: "garbage",
        lambda t: t + "x",
        lambda t: t.replace(".", "", 1),
        lambda t: "é" + t,
        lambda t: t[:-2] + ("AA" if not t.endswith("AA") else "BB"),
    ],
)
def test_a_bad_ticket_is_refused(mangle: object) -> None:
    issuer = TicketIssuer()
    ticket = issuer.issue(ALICE, "desk-1", control=False)
    assert callable(mangle)
    with pytest.raises(Unauthenticated):
        issuer.verify(mangle(ticket), "desk-1")
    with pytest.raises(Unauthenticated, match="required"):
        issuer.verify(None, "desk-1")


def test_a_forged_payload_fails_the_signature() -> None:
    """Swapping in another sandbox's payload (or raising the rights) breaks the signature."""
    issuer = TicketIssuer()
    view = issuer.issue(ALICE, "desk-1", control=False)
    other = issuer.issue(ALICE, "desk-2", control=True)
    forged = other.split(".")[0] + "." + view.split(".")[1]
    with pytest.raises(Unauthenticated, match="not valid"):
        issuer.verify(forged, "desk-2")


def test_tickets_of_another_server_are_refused_and_a_shared_secret_is_honoured() -> None:
    ticket = TicketIssuer().issue(ALICE, "desk-1", control=False)
    with pytest.raises(Unauthenticated, match="not valid"):
        TicketIssuer().verify(ticket, "desk-1")
    secret = b"s" * 32
    shared = TicketIssuer(secret).issue(ALICE, "desk-1", control=False)
    assert TicketIssuer(secret).verify(shared, "desk-1").principal == ALICE
    with pytest.raises(ValueError):
        TicketIssuer(b"short")


def test_sessions_and_tickets_do_not_stand_in_for_each_other() -> None:
    issuer = TicketIssuer()
    session = issuer.issue_session(ADMIN)
    assert issuer.verify_session(session) == ADMIN
    with pytest.raises(Unauthenticated, match="not a ticket"):
        issuer.verify(session, "desk-1")
    with pytest.raises(Unauthenticated, match="not a session"):
        issuer.verify_session(issuer.issue(ALICE, "desk-1", control=True))
    short = TicketIssuer(session_ttl_s=0.05)
    expiring = short.issue_session(ALICE)
    time.sleep(0.1)
    with pytest.raises(Unauthenticated, match="expired"):
        short.verify_session(expiring)


async def test_replicas_on_one_store_accept_each_others_tickets(tmp_path: Path) -> None:
    log = logging.getLogger("sandbox.test.tickets")
    store = await EmbeddedStore.open(str(tmp_path / "state.json"), logger=log)
    try:
        first = TicketIssuer(await shared_ticket_secret(store))
        second = TicketIssuer(await shared_ticket_secret(store))  # another replica on the same store
    finally:
        await store.close()
    assert second.verify(first.issue(ALICE, "desk-1", control=True), "desk-1").control is True
    reopened = await EmbeddedStore.open(str(tmp_path / "state.json"), logger=log)
    try:
        after_restart = TicketIssuer(await shared_ticket_secret(reopened))
    finally:
        await reopened.close()
    assert after_restart.verify(first.issue(ALICE, "desk-1", control=False), "desk-1").principal == ALICE
    other_store = await EmbeddedStore.open(None, logger=log)
    try:
        elsewhere = TicketIssuer(await shared_ticket_secret(other_store))
    finally:
        await other_store.close()
    with pytest.raises(Unauthenticated):
        elsewhere.verify(first.issue(ALICE, "desk-1", control=False), "desk-1")
