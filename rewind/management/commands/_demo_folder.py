"""The folder half of ``manage.py demo --folder``: the agent downloads the one zip with its bearer token and checks
every member against the manifest's sha256 before it trusts a byte.
"""

from __future__ import annotations

import hashlib
import io
import zipfile
from typing import Any
from urllib.parse import urlsplit

import requests

from rewind.lib.errors import ApplicationError


def manifest_lines(folder: dict[str, Any]) -> list[str]:
    """The manifest as a table: one file a line, then what was not brought back."""
    lines = [f"   {'bytes':>8}  {'sha256':<16}  {'modified (ZVM)':<32}  path"]
    for entry in folder["manifest"]:
        lines.append(
            f"   {entry['size']:>8}  {entry['sha256'][:16]}  {entry.get('modified') or '-':<32}  {entry['path']}"
        )
    lines.extend(f"   {'-':>8}  not brought back: {s['path']} ({s['reason']})" for s in folder.get("skipped", []))
    lines.append(f"   {folder['files']} files, {folder['bytes']} bytes")
    return lines


def fetch_checked(base_url: str, result: dict[str, Any], token: str) -> dict[str, bytes]:
    """The zip's files by manifest path, each checked against its sha256; ``ApplicationError`` on a difference."""
    url = base_url + urlsplit(result["url"]).path  # the stack's own address, whatever REWIND_PUBLIC_URL says
    resp = requests.get(url, headers={"Authorization": f"Bearer {token}"}, timeout=60)
    if resp.status_code != 200:
        raise ApplicationError(f"the archive download answered {resp.status_code}: {resp.text[:300]}")
    if hashlib.sha256(resp.content).hexdigest() != result["sha256"]:
        raise ApplicationError("the archive's sha256 is not the one the result gives")
    files: dict[str, bytes] = {}
    with zipfile.ZipFile(io.BytesIO(resp.content)) as archive:
        for entry in result["folder"]["manifest"]:
            data = archive.read(entry["path"])
            if hashlib.sha256(data).hexdigest() != entry["sha256"]:
                raise ApplicationError(f"{entry['path']} in the archive does not match its manifest sha256")
            files[entry["path"]] = data
    return files
