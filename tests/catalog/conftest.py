from __future__ import annotations

import pytest

from tests.helpers import install_starter_catalog


@pytest.fixture(autouse=True)
def _starter_catalog(db: None) -> None:
    install_starter_catalog()
