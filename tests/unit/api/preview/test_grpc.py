"""Preview URLs over gRPC, the SDK and the CLI (``sandbox.url(port)``, ``sandbox url ID PORT``): the request's and
the answer's conversions, the public HTTP address, the CLI's argument errors, and the RPC against the service on the
fake backend with the REST app's ticket issuer (a ticket minted over gRPC opens the REST proxy; another tenant's
sandbox is NOT_FOUND; a bad port INVALID_ARGUMENT). Real containers: ``tests/docker/test_preview.py``."""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import AsyncIterator
from typing import Any

import grpc
import httpx
import pytest
import pytest_asyncio
from pydantic import ValidationError
from typer.testing import CliRunner

from sandbox.api.grpc.server import bind_grpc_server
from sandbox.api.rest import create_app
from sandbox.cli import app as cli
from sandbox.client import AsyncClient, AsyncSandbox, Client
from sandbox.errors import InvalidArgument, NotFound
from sandbox.models.preview import PortUrl, UrlRequest
from sandbox.server import ServerSettings
from sandbox.service import SandboxService, TokenRegistry
from sandbox.service.preview import PreviewLinks, http_base_url
from sandbox.service.tickets import TicketIssuer
from sandbox.wire import convert
from sandbox.wire.grpc_gen import sandbox_pb2 as pb
from tests.unit.conftest import ALPHA, ALPHA_TOKEN, BETA_TOKEN, LOGGER, TOKENS

PUBLIC = "http://sandbox.example:8080"
AUTH_ALPHA = (("authorization", f"Bearer {ALPHA_TOKEN}"),)
SERVICE = pb.DESCRIPTOR.services_by_name["SandboxService"].full_name

# --------------------------------------------------------------------------- conversions


def test_the_request_converts_both_ways_and_names_a_bad_field() -> None:
    sent = convert.url_request_to_proto("term-1", UrlRequest(port=8000, ttl_s=60))
    assert (sent.sandbox_id, sent.port, sent.ttl_s) == ("term-1", 8000, 60)
    assert convert.url_request_from_proto(sent) == UrlRequest(port=8000, ttl_s=60)
    bare = convert.url_request_to_proto("term-1", UrlRequest(port=8000))
    assert not bare.HasField("ttl_s")
    assert convert.url_request_from_proto(bare).ttl_s is None  # unset: the default lifetime
    assert not bare.full_path and convert.url_request_from_proto(bare).full_path is False
    full = convert.url_request_to_proto("term-1", UrlRequest(port=8000, full_path=True))
    assert full.full_path and convert.url_request_from_proto(full) == UrlRequest(port=8000, full_path=True)
    for message, field in [
        (pb.PreviewUrlRequest(sandbox_id="x"), "port"),  # unset is 0
        (pb.PreviewUrlRequest(sandbox_id="x", port=80), "port"),
        (pb.PreviewUrlRequest(sandbox_id="x", port=70000), "port"),
        (pb.PreviewUrlRequest(sandbox_id="x", port=-1), "port"),
        (pb.PreviewUrlRequest(sandbox_id="x", port=8000, ttl_s=0), "ttl_s"),
        (pb.PreviewUrlRequest(sandbox_id="x", port=8000, ttl_s=86401), "ttl_s"),
        (pb.PreviewUrlRequest(sandbox_id="x", port=8000, ttl_s=float("nan")), "ttl_s"),
    ]:
        with pytest.raises(InvalidArgument, match=f"invalid preview URL request: {field}:"):
            convert.url_request_from_proto(message)


def test_the_answer_round_trips_and_mirrors_its_model() -> None:
    minted = PortUrl(
        port=8000, url=f"{PUBLIC}/v1/sandboxes/t/ports/8000/?ticket=abc", path="/v1/sandboxes/t/ports/8000/",
        ticket="abc", expires_at=1_700_000_000.5,
    )  # fmt: skip
    wire = pb.PortUrl.FromString(convert.port_url_to_proto(minted).SerializeToString())
    assert convert.port_url_from_proto(wire) == minted
    assert {f.name for f in pb.PortUrl.DESCRIPTOR.fields} == set(PortUrl.model_fields)
    assert set(pb.PreviewUrlRequest.DESCRIPTOR.fields_by_name) == {"sandbox_id", *UrlRequest.model_fields}


def test_the_http_base_url_of_a_listen_address() -> None:
    assert http_base_url("127.0.0.1", 8080) == "http://127.0.0.1:8080"
    assert http_base_url("::1", 9000) == "http://[::1]:9000"
    assert http_base_url("sandbox.internal", 80) == "http://sandbox.internal:80"
    assert http_base_url("0.0.0.0", 8080) == f"http://{socket.gethostname()}:8080"  # every interface: by name
    assert ServerSettings(public_url="https://sandbox.example.com/").public_url == "https://sandbox.example.com/"
    for bad in ("sandbox.example.com", "ftp://x", "http://", "http://x/?q=1", "http://a b"):
        with pytest.raises(ValidationError, match="public_url"):
            ServerSettings(public_url=bad)


# --------------------------------------------------------------------------- the CLI's argument errors


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["term-x", "80"], "port: Input should be greater than or equal to 1024"),
        (["term-x", "65536"], "port: Input should be less than or equal to 65535"),
        (["term-x", "8000", "--ttl", "0"], "--ttl: Input should be greater than 0"),
        (["term-x", "8000", "--ttl", "90000"], "--ttl: Input should be less than or equal to 86400"),
        (["term-x", "http"], "Invalid value for 'port'"),
        (["term-x"], "Missing argument"),
    ],
)
def test_cli_argument_errors_exit_2_before_any_call(args: list[str], said: str) -> None:
    # The target answers nothing: an argument error is caught before the CLI connects.
    result = CliRunner().invoke(cli, ["url", *args, "--target", "127.0.0.1:1"])
    assert result.exit_code == 2, result.output
    assert said in " ".join(result.output.replace("│", " ").split()), result.output


# --------------------------------------------------------------------------- the RPC, with the REST app's tickets


@pytest_asyncio.fixture(scope="module")
async def tickets() -> TicketIssuer:
    return TicketIssuer()


@pytest_asyncio.fixture(scope="module")
async def preview_target(service: SandboxService, tickets: TicketIssuer) -> AsyncIterator[str]:
    """A gRPC server minting preview URLs on ``PUBLIC`` with the REST app's ticket issuer."""
    server, port = await bind_grpc_server(
        service,
        TokenRegistry.from_mapping(TOKENS),
        host="127.0.0.1",
        port=0,
        logger=LOGGER,
        preview=PreviewLinks(tickets, PUBLIC),
    )
    yield f"127.0.0.1:{port}"
    await server.stop(None)


@pytest_asyncio.fixture(scope="module")
async def rest(service: SandboxService, tickets: TicketIssuer) -> AsyncIterator[httpx.AsyncClient]:
    app = create_app(service, TokenRegistry.from_mapping(TOKENS), logger=LOGGER, tickets=tickets, public_url=PUBLIC)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://test", timeout=60) as client:
        yield client


@pytest_asyncio.fixture
async def clients(preview_target: str) -> AsyncIterator[tuple[AsyncClient, AsyncClient]]:
    async with (
        AsyncClient(preview_target, token=ALPHA_TOKEN, timeout=60) as alpha,
        AsyncClient(preview_target, token=BETA_TOKEN, timeout=60) as beta,
    ):
        yield alpha, beta


async def test_the_sdk_url_is_the_rest_answer_and_its_ticket_opens_the_proxy(
    clients: tuple[AsyncClient, AsyncClient], rest: httpx.AsyncClient, preview_target: str
) -> None:
    alpha, _ = clients
    async with await alpha.create("terminal", labels={"test": "preview-grpc"}) as sb:
        prefix = f"/v1/sandboxes/{sb.id}/ports/8000/"
        url = await sb.url(8000)
        assert url.startswith(f"{PUBLIC}{prefix}?ticket="), url
        ticket = url.split("?ticket=", 1)[1]
        # The REST route answers the same, field for field (the ticket differs: each is minted when asked).
        minted = (await rest.post(f"/v1/sandboxes/{sb.id}/urls", json={"port": 8000}, headers=ALPHA)).json()
        assert set(minted) == set(PortUrl.model_fields)
        assert minted["path"] == prefix and minted["url"].startswith(f"{PUBLIC}{prefix}?ticket=")
        # The proxy redeems the gRPC-minted ticket: its issuer is the REST app's.
        redeemed = await rest.get(f"{prefix}?ticket={ticket}", follow_redirects=False)
        assert redeemed.status_code == 303, redeemed.text
        assert redeemed.headers["location"] == prefix and "sandbox_preview=" in redeemed.headers["set-cookie"]
        assert (await rest.get(f"{prefix}?ticket={ticket}".replace("8000", "8001"))).status_code == 401

        # The raw answer carries the ticket's expiry; ttl bounds it.
        async with grpc.aio.insecure_channel(preview_target) as channel:
            call = channel.unary_unary(f"/{SERVICE}/PreviewUrl", response_deserializer=pb.PortUrl.FromString)
            request = pb.PreviewUrlRequest(sandbox_id=sb.id, port=8000, ttl_s=30)
            answer: Any = await call(request.SerializeToString(), metadata=AUTH_ALPHA, timeout=30)
        assert answer.port == 8000 and answer.path == prefix and answer.url.endswith(answer.ticket)
        assert time.time() + 20 < answer.expires_at <= time.time() + 31

        # The blocking client has the same call.
        def blocking() -> str:
            with Client(preview_target, token=ALPHA_TOKEN, timeout=60) as client:
                return client.get(sb.id).url(8001, ttl=60)

        assert (await asyncio.to_thread(blocking)).startswith(f"{PUBLIC}/v1/sandboxes/{sb.id}/ports/8001/?ticket=")


async def test_full_path_urls_over_the_sdk_the_cli_grpc_and_rest(
    clients: tuple[AsyncClient, AsyncClient], rest: httpx.AsyncClient, preview_target: str
) -> None:
    alpha, beta = clients
    async with await alpha.create("terminal", labels={"test": "preview-grpc"}) as sb:
        apps = f"/v1/sandboxes/{sb.id}/apps/8888/"
        url = await sb.url(8888, full_path=True)
        assert url.startswith(f"{PUBLIC}{apps}?ticket="), url
        assert (await sb.url(8888, full_path=False)).startswith(f"{PUBLIC}/v1/sandboxes/{sb.id}/ports/8888/?ticket=")

        def blocking() -> str:
            with Client(preview_target, token=ALPHA_TOKEN, timeout=60) as client:
                return client.get(sb.id).url(8888, ttl=60, full_path=True)

        assert (await asyncio.to_thread(blocking)).startswith(f"{PUBLIC}{apps}?ticket=")
        args = ["url", sb.id, "8888", "--full-path", "--target", preview_target, "--token", ALPHA_TOKEN]
        printed = await asyncio.to_thread(CliRunner().invoke, cli, args)
        assert printed.exit_code == 0 and printed.stdout.startswith(f"{PUBLIC}{apps}?ticket="), printed.output
        async with grpc.aio.insecure_channel(preview_target) as channel:
            call = channel.unary_unary(f"/{SERVICE}/PreviewUrl", response_deserializer=pb.PortUrl.FromString)
            request = pb.PreviewUrlRequest(sandbox_id=sb.id, port=8888, full_path=True)
            answer: Any = await call(request.SerializeToString(), metadata=AUTH_ALPHA, timeout=30)
        assert answer.path == apps and answer.url == f"{PUBLIC}{apps}?ticket={answer.ticket}"
        body = {"port": 8888, "full_path": True}
        minted = (await rest.post(f"/v1/sandboxes/{sb.id}/urls", json=body, headers=ALPHA)).json()
        assert minted["path"] == apps
        # The proxy's full-path route redeems it (any form's ticket: it is bound to the sandbox and the port), with
        # the cookie scoped to that form's prefix.
        for ticket in (minted["ticket"], url.split("?ticket=", 1)[1], answer.ticket):
            redeemed = await rest.get(f"{apps}tree?ticket={ticket}", follow_redirects=False)
            assert redeemed.status_code == 303, redeemed.text
            assert redeemed.headers["location"] == f"{apps}tree"
            assert f"Path={apps};" in redeemed.headers["set-cookie"], redeemed.headers["set-cookie"]
        assert (await rest.get(f"{apps.replace('8888', '8001')}?ticket={minted['ticket']}")).status_code == 401
        with pytest.raises(NotFound):
            await AsyncSandbox(beta, sb.info).url(8888, full_path=True)


async def test_another_tenant_gets_not_found_and_a_bad_port_invalid_argument(
    clients: tuple[AsyncClient, AsyncClient], preview_target: str
) -> None:
    alpha, beta = clients
    async with await alpha.create("terminal", labels={"test": "preview-grpc"}) as sb:
        stolen = AsyncSandbox(beta, sb.info)  # beta holds the id, not the sandbox
        with pytest.raises(NotFound) as theirs:
            await stolen.url(8000)
        with pytest.raises(NotFound) as nobodys:
            await AsyncSandbox(beta, sb.info.model_copy(update={"id": "term-" + "0" * 12})).url(8000)
        assert theirs.value.message.replace(sb.id, "ID") == nobodys.value.message.replace("term-" + "0" * 12, "ID")
        # The SDK refuses a bad port before any call; the server refuses it too (a raw request).
        for port in (80, 70000):
            with pytest.raises(InvalidArgument, match="port"):
                await sb.url(port)
        with pytest.raises(InvalidArgument, match="ttl_s"):
            await sb.url(8000, ttl=0)
        async with grpc.aio.insecure_channel(preview_target) as channel:
            call = channel.unary_unary(f"/{SERVICE}/PreviewUrl")
            for port in (0, 22, 65536):
                raw = pb.PreviewUrlRequest(sandbox_id=sb.id, port=port).SerializeToString()
                with pytest.raises(grpc.aio.AioRpcError) as refused:
                    await call(raw, metadata=AUTH_ALPHA, timeout=30)
                assert refused.value.code() is grpc.StatusCode.INVALID_ARGUMENT, refused.value.details()
                assert "port" in str(refused.value.details())


async def test_the_cli_prints_the_url_and_says_what_went_wrong(
    clients: tuple[AsyncClient, AsyncClient], preview_target: str
) -> None:
    alpha, _ = clients
    runner = CliRunner()
    async with await alpha.create("terminal", labels={"test": "preview-grpc"}) as sb:
        args = ["url", sb.id, "8000", "--ttl", "120", "--target", preview_target, "--token", ALPHA_TOKEN]
        printed = await asyncio.to_thread(runner.invoke, cli, args)
        assert printed.exit_code == 0, printed.output
        assert printed.stdout.startswith(f"{PUBLIC}/v1/sandboxes/{sb.id}/ports/8000/?ticket=")
        assert printed.stdout.count("\n") == 1  # one unwrapped line, for $(sandbox url ...)
        args = ["url", sb.id, "8000", "--target", preview_target, "--token", BETA_TOKEN]
        theirs = await asyncio.to_thread(runner.invoke, cli, args)
        assert theirs.exit_code == 1 and "not_found" in theirs.output, theirs.output
