"""One process calling one simulated site through the shared stores; used by the tests and bench/zvm_cap.py.

    python -m tests.sites.zvm_cap_worker STORE BASE_URL SITE_NAME PER_S CALLS GO_AT

STORE is ``db`` or a Redis URL; PER_S 0 means no cap; GO_AT is the wall-clock time to
start at, so several processes begin together once Django is set up. Prints one JSON line:
``{"ok": n, "errors": [...], "seconds": s}``.
"""

from __future__ import annotations

import json
import os
import sys
import time


def main(argv: list[str]) -> None:
    store, base_url, site_name, per_s, calls, go_at = argv
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "rewind.settings")
    import django

    django.setup()
    from rewind.sites.zvm_shared import db_stores, redis_stores
    from rewind.zvm import Stores, ZvmClient, ZvmConnection, ZvmError
    from tests.simfixtures import CLIENT_ID, PASSWORD, USERNAME

    stores = Stores(*(db_stores() if store == "db" else redis_stores(store))[:2])
    conn = ZvmConnection(
        site_name=site_name,
        base_url=base_url,
        username=USERNAME,
        password=PASSWORD,
        client_id=CLIENT_ID,
        max_requests_per_s=float(per_s) or None,
    )
    client = ZvmClient(conn, stores=stores)
    time.sleep(max(0.0, float(go_at) - time.time()))  # every process starts at one moment: the cap is on them together
    started, ok, errors = time.time(), 0, []
    for _ in range(int(calls)):
        try:
            client.local_site()
            ok += 1
        except ZvmError as exc:
            errors.append(str(exc))
    print(json.dumps({"ok": ok, "errors": errors, "seconds": time.time() - started}), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
