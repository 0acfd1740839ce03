"""The names a folder recovery keeps: only plain names the listing gave, never a way out of the archive."""

from __future__ import annotations

import pytest

from recoveries.archive import safe_relative
from recoveries.folders import _child_name
from rewind.lib.errors import ApplicationError
from rewind.zvm import BrowseItem


@pytest.mark.parametrize("rel", ["a.conf", "sites-available/default", "deep/more/site.conf", "spa ce/ü.txt"])
def test_plain_names_are_kept(rel: str) -> None:
    assert safe_relative(rel) == rel


@pytest.mark.parametrize(
    "rel", ["", "/etc/passwd", "../x", "a/../../x", "a/./b", "a//b", "a\\..\\b", "C:/x", "a\x00b", "a\u202eb", "a/"]
)
def test_names_that_could_leave_the_folder_are_refused(rel: str) -> None:
    with pytest.raises(ApplicationError, match="not a name this service can keep"):
        safe_relative(rel)


def _item(path: str) -> BrowseItem:
    return BrowseItem(path=path, type="File", is_downloadable=True, size_in_bytes=1)


def test_a_listed_item_must_sit_one_level_below_its_folder() -> None:
    folder = "partition#2 Ext4/etc/nginx"
    assert _child_name(folder, _item(f"{folder}/nginx.conf")) == "nginx.conf"
    with pytest.raises(ApplicationError, match="not below it"):
        _child_name(folder, _item("partition#2 Ext4/etc/shadow"))
    with pytest.raises(ApplicationError, match="more than one level below it"):
        _child_name(folder, _item(f"{folder}/../../shadow"))
    with pytest.raises(ApplicationError, match="not a name this service can keep"):
        _child_name(folder, _item(f"{folder}/.."))
