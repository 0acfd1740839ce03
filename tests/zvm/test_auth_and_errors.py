"""Tokens, retries and typed errors against the simulator over real HTTPS."""

from __future__ import annotations

import logging
import threading
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
from urllib3.exceptions import InsecureRequestWarning

from rewind.zvm import (
    ZvmAuthError,
    ZvmClient,
    ZvmRejectedError,
    ZvmSiteUnavailable,
    ZvmTlsError,
    ZvmTransientError,
)
from tests.helpers import TOKEN_CALL, calls, closed_port, connection
from tests.simfixtures import SimHandle, SimServer, run_sim
from tests.zvm.support import MakeClient
from zvmsim.auth import SERVICE_CLIENT_ID, SERVICE_CLIENT_SECRET


def test_it_logs_in_once_and_reuses_the_token(sim: SimHandle, make_client: MakeClient) -> None:
    client = make_client()
    for _ in range(3):
        client.list_vpgs()
    assert calls(sim, "site-a", TOKEN_CALL) == 1
    assert calls(sim, "site-a", "GET /v1/vpgs") == 3


def test_it_logs_in_with_client_credentials(sim: SimHandle, make_client: MakeClient) -> None:
    client = make_client(client_id=SERVICE_CLIENT_ID, client_secret=SERVICE_CLIENT_SECRET)
    assert client.local_site().name == "Site A"


def test_bad_credentials_are_an_auth_error_naming_the_site(
    sim: SimHandle, make_client: MakeClient, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    caplog.set_level(logging.DEBUG, logger="rewind.zvm")  # settings may pin "rewind" higher
    with pytest.raises(ZvmAuthError) as caught:
        make_client(password="wrong-password").list_vpgs()
    assert str(caught.value) == (
        f"Site A ({sim.site_url('site-a')}): the ZVM rejected the credentials (Invalid user credentials)"
    )
    assert "wrong-password" not in repr(caught.value)
    assert "wrong-password" not in caplog.text
    assert "POST /site-a/auth/realms/zerto/protocol/openid-connect/token -> 401" in caplog.text
    assert calls(sim, "site-a", "GET /v1/vpgs") == 0


def test_a_token_expired_mid_run_is_renewed_once(sim: SimHandle, make_client: MakeClient) -> None:
    client = make_client()
    client.list_vpgs()
    sim.add_fault("expire_tokens")
    assert client.list_vpgs()
    assert calls(sim, "site-a", TOKEN_CALL) == 2
    assert calls(sim, "site-a", "GET /v1/vpgs") == 3  # ok, 401, ok after the re-login


def test_a_401_after_the_re_login_is_an_auth_error(sim: SimHandle, make_client: MakeClient) -> None:
    sim.add_fault("http_error", site="site-a", status=401, path_regex=r"/v1/vpgs$")
    with pytest.raises(ZvmAuthError, match="refused a freshly issued token"):
        make_client().list_vpgs()
    assert calls(sim, "site-a", TOKEN_CALL) == 2
    assert calls(sim, "site-a", "GET /v1/vpgs") == 2


def test_threads_sharing_a_client_log_in_again_only_once(sim: SimHandle, make_client: MakeClient) -> None:
    client = make_client()
    client.local_site()
    sim.add_fault("expire_tokens")
    errors: list[BaseException] = []

    def work() -> None:
        try:
            for _ in range(3):
                client.with_request_id(threading.current_thread().name).list_vpgs()
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=work) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert errors == []
    assert calls(sim, "site-a", TOKEN_CALL) == 2


@pytest.fixture(scope="module")
def short_ttl_sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SimServer]:
    # expires_in=10: within the renewal margin (max(10 s, 20 %)) from the start.
    with run_sim(tmp_path_factory.mktemp("zvmsim-ttl"), "--token-ttl", "10") as server:
        yield server


def test_it_renews_a_token_before_it_runs_out(short_ttl_sim: SimServer) -> None:
    handle = SimHandle(short_ttl_sim)
    client = ZvmClient(connection(handle, "site-a"))
    client.list_vpgs()
    client.list_vpgs()
    counts = handle.calls("site-a")
    # Renewed ahead of expiry, not after a 401: the ZVM never refused a token.
    assert counts[TOKEN_CALL] == 2
    assert counts["GET /v1/vpgs"] == 2
    handle.http.close()


def test_a_5xx_on_a_get_is_retried(sim: SimHandle, make_client: MakeClient) -> None:
    sim.add_fault("http_error", site="site-a", status=503, path_regex=r"/v1/vpgs$", count=2)
    assert make_client().list_vpgs()
    assert calls(sim, "site-a", "GET /v1/vpgs") == 3


def test_a_5xx_that_lasts_is_a_transient_error_with_the_zvm_message(sim: SimHandle, make_client: MakeClient) -> None:
    sim.add_fault("http_error", site="site-a", status=500, path_regex=r"/v1/vpgs$", message="database is down")
    with pytest.raises(ZvmTransientError) as caught:
        make_client(get_attempts=4).list_vpgs()
    assert str(caught.value) == (
        f"Site A ({sim.site_url('site-a')}): the ZVM answered HTTP 500: database is down (GET /site-a/v1/vpgs)"
    )
    assert (caught.value.status, caught.value.zvm_message) == (500, "database is down")
    assert calls(sim, "site-a", "GET /v1/vpgs") == 4


def test_a_5xx_on_a_post_is_not_retried(sim: SimHandle, make_client: MakeClient) -> None:
    vpg = make_client().list_vpgs(name="vpg-web")[0]
    sim.add_fault("http_error", site="site-a", status=500, path_regex="checkpoints", method="POST", count=1)
    client = make_client()
    with pytest.raises(ZvmTransientError):
        client.insert_tagged_checkpoint(vpg.identifier or "", "tag-1")
    assert calls(sim, "site-a", "POST /v1/vpgs/{vpg_id}/checkpoints") == 1
    assert client.insert_tagged_checkpoint(vpg.identifier or "", "tag-1")  # the fault was used up once


def test_a_rejected_request_carries_the_zvm_message(sim: SimHandle, make_client: MakeClient) -> None:
    client = make_client()
    vpg = client.list_vpgs(name="vpg-new")[0]
    with pytest.raises(ZvmRejectedError) as caught:
        client.insert_tagged_checkpoint(vpg.identifier or "", "tag")
    assert caught.value.status == 400
    assert "initial sync" in (caught.value.zvm_message or "")
    assert "initial sync" in str(caught.value)


def test_a_read_timeout_is_transient_not_retried_and_opens_the_site_s_circuit(
    sim: SimHandle, make_client: MakeClient
) -> None:
    client = make_client(read_timeout=0.5, get_attempts=3)
    client.list_vpgs()  # logged in
    sim.add_fault("hang", site="site-a", seconds=3, path_regex=r"/v1/localsite$")
    with pytest.raises(ZvmTransientError) as caught:
        client.local_site()
    assert not isinstance(caught.value, ZvmSiteUnavailable)
    assert str(caught.value) == (
        f"Site A ({sim.site_url('site-a')}): the ZVM did not answer GET /site-a/v1/localsite within 0.5 s"
    )
    assert calls(sim, "site-a", "GET /v1/localsite") == 1  # one timeout, not one per attempt
    before = sim.requests_seen("site-a")
    with pytest.raises(ZvmSiteUnavailable) as refused:
        client.list_vpgs()
    assert sim.requests_seen("site-a") == before  # refused without asking the ZVM
    assert "unavailable since" in str(refused.value)
    assert "did not answer" in str(refused.value)


def test_a_refused_connection_is_transient_and_names_the_site(sim: SimHandle, make_client: MakeClient) -> None:
    url = f"https://127.0.0.1:{closed_port()}/site-a"
    with pytest.raises(ZvmTransientError) as caught:
        make_client(base_url=url).local_site()
    assert str(caught.value) == f"Site A ({url}): cannot connect (connection refused)"


def test_a_pinned_ca_bundle_verifies_the_zvm(sim: SimHandle, make_client: MakeClient) -> None:
    assert sim.ca_bundle
    assert make_client(verify_tls=True, ca_bundle=sim.ca_bundle).local_site().name == "Site A"


def _other_ca(path: Path) -> str:
    from zvmsim.tls import ensure_certs  # a second, unrelated throwaway CA

    return str(ensure_certs(path, ["127.0.0.1"]).ca)


def test_a_wrong_ca_bundle_refuses_the_zvm(sim: SimHandle, make_client: MakeClient, tmp_path: Path) -> None:
    with pytest.raises(ZvmTlsError) as caught:
        make_client(verify_tls=True, ca_bundle=_other_ca(tmp_path)).local_site()
    assert str(caught.value).startswith(f"Site A ({sim.site_url('site-a')}): cannot verify the ZVM's TLS certificate")
    with pytest.raises(ZvmTlsError, match="cannot verify"):
        make_client(verify_tls=True).local_site()  # the system CAs do not know the simulator either


def test_unverified_tls_warns_for_nobody_else(sim: SimHandle, make_client: MakeClient) -> None:
    client = make_client()
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        client.local_site()
        ours = [w for w in seen if issubclass(w.category, InsecureRequestWarning)]
        with requests.Session() as other:
            other.trust_env = False
            other.get(sim.site_url("site-a") + "/v1/localsite", verify=False, timeout=10)
        theirs = [w for w in seen if issubclass(w.category, InsecureRequestWarning)]
    assert ours == []
    assert theirs, "a plain requests session still warns: the silencing is ours only"


def test_unverified_connections_share_one_tls_context(
    sim: SimHandle, make_client: MakeClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    import ssl

    from rewind.zvm.transport import Transport

    loaded: list[object] = []
    real = ssl.SSLContext.load_default_certs

    def recording(self: ssl.SSLContext, *a: Any, **kw: Any) -> None:
        loaded.append(self)
        real(self, *a, **kw)

    monkeypatch.setattr(ssl.SSLContext, "load_default_certs", recording)
    transport = Transport(connection(sim, "site-a"))
    url = sim.site_url("site-a") + "/v1/localsite"
    for _ in range(2):  # the second time on a new connection: the pool was emptied in between
        assert transport.send("GET", url, request_id="tls-test").status_code == 401
        transport.session.close()
    assert loaded == [], "a new connection loaded the system CA store it never uses"
    # The shared context is for unverified sessions only: a verifying one still refuses the simulator.
    with pytest.raises(ZvmTlsError, match="cannot verify"):
        make_client(verify_tls=True).local_site()
