"""What goes on the wire, checked against a tiny local server: forms, headers, request ids,
the 401 rule, and that no secret reaches a log line or an error."""

from __future__ import annotations

import io
import logging
import traceback
import uuid
from collections.abc import Iterator
from typing import Any
from urllib.parse import parse_qs

import pytest

from rewind.zvm import (
    ZvmAuthError,
    ZvmClient,
    ZvmConnection,
    ZvmError,
    ZvmNotFoundError,
    ZvmRejectedError,
    ZvmTransientError,
    ZvmUnparseableResponse,
)
from tests.localzvm import DROP, TOKEN, LocalZvm, serve

PASSWORD = "pw-Sup3r-s3cret"
SECRET = "cs-T0p-s3cret"
LOCAL_SITE = {"SiteIdentifier": "a", "SiteName": "Site X", "SiteType": "VCenter", "Version": "10.0"}


@pytest.fixture
def zvm() -> Iterator[LocalZvm]:
    yield from serve()


def _client(zvm: LocalZvm, **kw: Any) -> ZvmClient:
    conn = ZvmConnection(
        site_name="Site X",
        base_url=zvm.url,
        username="admin",
        password=PASSWORD,
        backoff_initial=0.01,
        backoff_max=0.02,
        **kw,
    )
    return ZvmClient(conn)


def _form(zvm: LocalZvm) -> dict[str, str]:
    (login,) = zvm.requests_to("/auth/realms/zerto/protocol/openid-connect/token")
    return {k: v[0] for k, v in parse_qs(login.body.decode()).items()}


def test_it_logs_in_with_the_password_grant_and_scope_openid(zvm: LocalZvm) -> None:
    zvm.routes[("GET", "/v1/localsite")] = (200, LOCAL_SITE)
    assert _client(zvm).local_site().name == "Site X"
    assert _form(zvm) == {
        "grant_type": "password",
        "client_id": "zerto-client",
        "scope": "openid",
        "username": "admin",
        "password": PASSWORD,
    }
    (call,) = zvm.requests_to("/v1/localsite")
    assert call.headers["Authorization"] == f"Bearer {TOKEN}"
    assert call.headers["Accept"] == "application/json"


def test_it_uses_client_credentials_when_a_secret_is_set(zvm: LocalZvm) -> None:
    zvm.routes[("GET", "/v1/localsite")] = (200, LOCAL_SITE)
    _client(zvm, client_id="rewind", client_secret=SECRET).local_site()
    assert _form(zvm) == {
        "grant_type": "client_credentials",
        "client_id": "rewind",
        "scope": "openid",
        "client_secret": SECRET,
    }


def test_it_sends_a_request_id_and_the_trigger_header_on_every_call(zvm: LocalZvm) -> None:
    zvm.routes[("GET", "/v1/localsite")] = (200, LOCAL_SITE)
    client = _client(zvm)
    client.local_site()
    client.local_site()
    client.with_request_id("rid-42").local_site()
    ids: list[str] = [s.headers.get("X-Request-ID", "") for s in zvm.seen]
    assert all(s.headers.get("zerto-triggered-by") == "zerto-rewind" for s in zvm.seen)
    assert len(zvm.seen) == 4
    assert all(ids)
    assert ids[-1] == "rid-42"
    assert ids[1] != ids[2]  # without a request id each call gets its own
    uuid.UUID(ids[1])


def test_with_request_id_shares_the_token(zvm: LocalZvm) -> None:
    zvm.routes[("GET", "/v1/localsite")] = (200, LOCAL_SITE)
    client = _client(zvm)
    client.local_site()
    client.with_request_id("a").local_site()
    client.with_request_id("b").local_site()
    assert len(zvm.requests_to("/auth/realms/zerto/protocol/openid-connect/token")) == 1


def test_a_401_after_a_fresh_login_is_an_auth_error(zvm: LocalZvm) -> None:
    zvm.routes[("GET", "/v1/vpgs")] = (401, {"Message": "token revoked"})
    with pytest.raises(ZvmAuthError) as caught:
        _client(zvm).list_vpgs()
    assert caught.value.status == 401
    assert str(caught.value).startswith(f"Site X ({zvm.url}): the ZVM refused a freshly issued token")
    # exactly one re-login and one repeat: no loop
    assert len(zvm.requests_to("/auth/realms/zerto/protocol/openid-connect/token")) == 2
    assert len(zvm.requests_to("/v1/vpgs")) == 2


def test_rejected_credentials_say_so_without_the_password(zvm: LocalZvm, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    caplog.set_level(logging.DEBUG, logger="rewind.zvm")  # settings may pin "rewind" higher
    zvm.token_status = 401
    zvm.token_body = {"error": "invalid_grant", "error_description": "Invalid user credentials"}
    with pytest.raises(ZvmAuthError) as caught:
        _client(zvm).list_vpgs()
    assert str(caught.value) == (f"Site X ({zvm.url}): the ZVM rejected the credentials (Invalid user credentials)")
    assert not zvm.requests_to("/v1/vpgs")
    _assert_no_secrets(caught.value, caplog)


def test_no_password_or_token_reaches_logs_or_errors(zvm: LocalZvm, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    caplog.set_level(logging.DEBUG, logger="rewind.zvm")  # settings may pin "rewind" higher
    # A careless server that echoes the token back in its error message.
    zvm.routes[("GET", "/v1/vpgs/x")] = (500, {"Message": f"backend failed for Bearer {TOKEN}"})
    zvm.routes[("POST", "/v1/vpgs/x/checkpoints")] = (400, {"Message": f"bad password {PASSWORD}"})
    client = _client(zvm)
    errors: list[ZvmError] = []
    for call in (lambda: client.get_vpg("x"), lambda: client.insert_tagged_checkpoint("x", "tag")):
        with pytest.raises(ZvmError) as caught:
            call()
        errors.append(caught.value)
    assert "***" in str(errors[0])
    assert "***" in str(errors[1])
    assert errors[1].zvm_message == "bad password ***"
    assert "GET /site-x/v1/vpgs/x" in caplog.text  # the calls were logged, only without secrets
    for error in errors:
        _assert_no_secrets(error, caplog)
    assert PASSWORD not in repr(client)
    assert PASSWORD not in repr(client.conn)


def _assert_no_secrets(error: BaseException, caplog: pytest.LogCaptureFixture) -> None:
    texts = [str(error), repr(error), "".join(traceback.format_exception(error)), caplog.text]
    texts += [r.getMessage() for r in caplog.records]
    for text in texts:
        assert PASSWORD not in text
        assert TOKEN not in text
        assert SECRET not in text


def test_errors_are_typed_by_status(zvm: LocalZvm) -> None:
    zvm.routes[("GET", "/v1/vpgs/gone")] = (404, {"Message": "VPG not found"})
    zvm.routes[("POST", "/v1/vpgs/bad/checkpoints")] = (400, {"Message": "failed parsing"})
    zvm.routes[("GET", "/v1/vpgs/busy")] = (429, {})
    client = _client(zvm)
    with pytest.raises(ZvmNotFoundError) as nf:
        client.get_vpg("gone")
    assert (nf.value.status, nf.value.zvm_message) == (404, "VPG not found")
    with pytest.raises(ZvmRejectedError) as rej:
        client.insert_tagged_checkpoint("bad", "t")
    assert str(rej.value) == (
        f"Site X ({zvm.url}): the ZVM rejected POST /site-x/v1/vpgs/bad/checkpoints (HTTP 400): failed parsing"
    )
    with pytest.raises(ZvmTransientError):
        client.get_vpg("busy")
    assert len(zvm.requests_to("/v1/vpgs/busy")) == 3  # a GET is retried on 429


def test_it_rejects_answers_that_are_not_what_the_api_documents(zvm: LocalZvm) -> None:
    zvm.routes[("GET", "/v1/vpgs")] = (200, b"<html>proxy error</html>")
    zvm.routes[("POST", "/v1/flrs")] = (200, {"FlrSessionIdentifier": "x"})
    client = _client(zvm)
    with pytest.raises(ZvmUnparseableResponse, match="is not JSON"):
        client.list_vpgs()
    with pytest.raises(ZvmUnparseableResponse, match=r"not a JSON string .the mount may have started anyway"):
        client.flr_mount(vpg_id="g", vm_id="v", checkpoint_id="1")


def test_it_reads_a_login_answer_without_a_token_as_unparseable(zvm: LocalZvm) -> None:
    zvm.token_body = {"expires_in": 300}
    with pytest.raises(ZvmUnparseableResponse, match="no access token"):
        _client(zvm).list_vpgs()


def test_it_caches_vpg_status_names(zvm: LocalZvm) -> None:
    names = ["Initializing", "MeetingSLA", "NotMeetingSLA", "RpoNotMeetingSLA", "HistoryNotMeetingSLA"]
    zvm.routes[("GET", "/v1/vpgs/statuses")] = (200, names)
    client = _client(zvm)
    assert client.status_name(3) == "RpoNotMeetingSLA"
    assert client.with_request_id("r").status_name(1) == "MeetingSLA"
    assert client.status_name(99) is None
    assert client.status_name(None) is None
    assert client.vpg_status_names() == names
    assert len(zvm.requests_to("/v1/vpgs/statuses")) == 1


def test_retries_of_one_call_keep_its_request_id(zvm: LocalZvm) -> None:
    zvm.routes[("GET", "/v1/vpgs")] = (503, {"Message": "starting up"})
    with pytest.raises(ZvmTransientError):
        _client(zvm).list_vpgs()
    ids = {s.headers.get("X-Request-ID") for s in zvm.requests_to("/v1/vpgs")}
    assert len(zvm.requests_to("/v1/vpgs")) == 3
    assert len(ids) == 1


def test_a_dropped_connection_is_transient(zvm: LocalZvm) -> None:
    zvm.routes[("GET", "/v1/vpgs")] = (200, DROP)
    zvm.routes[("DELETE", "/v1/flrs/s1")] = (200, DROP)
    client = _client(zvm)
    with pytest.raises(ZvmTransientError) as caught:
        client.list_vpgs()
    assert str(caught.value) == (
        f"Site X ({zvm.url}): the ZVM closed the connection without answering GET /site-x/v1/vpgs"
    )
    assert len(zvm.requests_to("/v1/vpgs")) == 3
    with pytest.raises(ZvmTransientError):
        client.flr_unmount("s1")
    assert len(zvm.requests_to("/v1/flrs/s1")) == 1  # a DELETE is never repeated


@pytest.fixture
def other_host() -> Iterator[LocalZvm]:
    yield from serve()


def test_a_download_link_to_another_host_never_gets_the_token(zvm: LocalZvm, other_host: LocalZvm) -> None:
    link = f"{other_host.url}/v1/downloads/d1"
    zvm.routes[("POST", "/v1/flrs/s1/download")] = (200, f'"{link}"')  # quoted, as old ZVMs did
    other_host.routes[("GET", "/v1/downloads/d1")] = (200, b"file bytes")
    sink = io.BytesIO()
    result = _client(zvm).flr_download("s1", "partition#1 Ext4/f.txt", sink)
    assert sink.getvalue() == b"file bytes"
    assert result.size == 10
    (fetch,) = other_host.requests_to("/v1/downloads/d1")
    assert "Authorization" not in fetch.headers
    assert fetch.headers["X-Request-ID"]
