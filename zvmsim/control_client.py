"""A session for the simulator's control API (``/_sim/...``): what the tests, benchmarks and demo drive it with."""

from __future__ import annotations

import requests
import urllib3
from requests.adapters import HTTPAdapter
from urllib3.util.retry import Retry


def control_session() -> requests.Session:
    """Its self-signed certificate accepted, no proxies; an idempotent call that finds its kept-alive
    connection closed is sent once more, on a new connection.

    The simulator (uvicorn) closes a connection idle for 5 s, and a call that takes it up just then
    gets no answer ("Remote end closed connection without response": once in a full test run, a
    GET of the FLR sessions). The service's own ZVM client retries its GETs itself
    (``rewind.zvm.client``); this session is the harness's. A POST is never sent twice.
    """
    urllib3.disable_warnings(urllib3.exceptions.InsecureRequestWarning)
    http = requests.Session()
    # trust_env off: a REQUESTS_CA_BUNDLE in the environment would override verify=False.
    http.verify, http.trust_env = False, False
    again = Retry(total=1, connect=1, read=1, status=0, other=0, allowed_methods=Retry.DEFAULT_ALLOWED_METHODS)
    http.mount("https://", HTTPAdapter(max_retries=again))
    return http
