"""Helpers for the simulator's own tests: a tiny ZVM client over real HTTPS."""

from __future__ import annotations

from typing import Any

import requests

from tests.fixtures import wait_until
from tests.simfixtures import CLIENT_ID, PASSWORD, USERNAME, SimHandle

TOKEN_PATH = "/auth/realms/zerto/protocol/openid-connect/token"


class Zvm:
    """Raw calls against one simulated site, with a Bearer from the password grant."""

    def __init__(self, sim: SimHandle, slug: str) -> None:
        self.sim = sim
        self.slug = slug
        self.base = sim.site_url(slug)
        self.http = requests.Session()
        self.http.verify = False
        self.http.trust_env = False
        self.token = self.login()

    def login(self, **form: str) -> str:
        data = {"grant_type": "password", "client_id": CLIENT_ID, "username": USERNAME, "password": PASSWORD, **form}
        resp = self.http.post(self.base + TOKEN_PATH, data=data, timeout=30)
        assert resp.status_code == 200, resp.text
        return str(resp.json()["access_token"])

    def request(self, method: str, path: str, **kw: Any) -> requests.Response:
        headers = {"Authorization": f"Bearer {self.token}", **kw.pop("headers", {})}
        url = path if path.startswith("http") else f"{self.base}/{path.lstrip('/')}"
        return self.http.request(method, url, headers=headers, timeout=60, **kw)

    def get(self, path: str, **kw: Any) -> Any:
        resp = self.request("GET", path, **kw)
        assert resp.status_code == 200, f"{path}: {resp.status_code} {resp.text}"
        return resp.json()

    def post(self, path: str, body: Any = None, **kw: Any) -> Any:
        resp = self.request("POST", path, json=body, **kw)
        assert resp.status_code == 200, f"{path}: {resp.status_code} {resp.text}"
        return resp.json()

    def vpg_id(self, name: str) -> str:
        rows = self.get("v1/vpgs", params={"name": name})
        assert len(rows) == 1, rows
        return str(rows[0]["VpgIdentifier"])

    def vm_id(self, name: str) -> str:
        return str(self.sim.vm(name)["identifier"])

    def wait_task(self, task_id: str, timeout: float = 30) -> dict[str, Any]:
        return wait_until(lambda: _done(self.get(f"v1/tasks/{task_id}")), timeout)

    def insert_checkpoint(self, vpg_name: str, tag: str) -> str:
        """Insert, wait for the task and the listing; returns the checkpoint id."""
        vpg = self.vpg_id(vpg_name)
        task = self.wait_task(self.post(f"v1/vpgs/{vpg}/checkpoints", {"checkpointName": tag}))
        assert task["Status"]["State"] == 6, task

        def listed() -> str | None:
            rows = self.get(f"v1/vpgs/{vpg}/checkpoints")
            return next((r["CheckpointIdentifier"] for r in rows if r["Tag"] == tag), None)

        return str(wait_until(listed, 30))

    def mount(self, vpg_name: str, vm_name: str, checkpoint: str) -> str:
        body = {
            "jflr": {
                "vpgIdentifier": self.vpg_id(vpg_name),
                "vmIdentifier": self.vm_id(vm_name),
                "checkpointIdentifier": checkpoint,
            }
        }
        session = self.post("v1/flrs", body)
        assert isinstance(session, str)
        return session

    def wait_mounted(self, session: str, timeout: float = 30) -> str:
        def status() -> str | None:
            found = self.get(f"v1/flrs/{session}")
            item = found[0] if isinstance(found, list) else found
            value = str(item["FlrSessionStatus"])
            return None if value == "MountInProgress" else value

        return str(wait_until(status, timeout))

    def latest_checkpoint(self, vpg_name: str) -> str:
        return str(self.get(f"v1/vpgs/{self.vpg_id(vpg_name)}/checkpoints")[-1]["CheckpointIdentifier"])


def _done(task: dict[str, Any]) -> dict[str, Any] | None:
    return None if task["Status"]["State"] == 1 else task


NGINX_PATH = "partition#2 Ext4/etc/nginx/nginx.conf"


def mounted(zvm: Zvm, vpg: str, vm: str, checkpoint: str) -> str:
    session = zvm.mount(vpg, vm, checkpoint)
    assert zvm.wait_mounted(session) == "MountCompletedSuccessfully"
    return session


def download(zvm: Zvm, session: str, path: str) -> bytes:
    url = zvm.post(f"v1/flrs/{session}/download", {"pathList": [path]})
    assert isinstance(url, str)
    resp = zvm.request("GET", url)
    assert resp.status_code == 200, resp.text
    return resp.content
