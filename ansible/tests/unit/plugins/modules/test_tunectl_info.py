# Copyright: (c) 2026, tunectl developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""tunectl_info: devices, classes and drift gathered from one `tunectl status` document."""

from __future__ import annotations

from ansible_collections.tunectl.tunectl.plugins.modules.tunectl_info import gather

STATUS = {"ok": True, "profile": "deep", "devices": [
    {"name": "sdb", "class": "ssd", "drift": [{"attribute": "read_ahead_kb", "before": 128, "after": 1024}]},
    {"name": "sdc", "class": "rotational", "drift": []},
    {"name": "nvme0n1", "class": "nvme"},
]}


class FakeTunectl:
    def __init__(self, *documents):
        self.documents = list(documents)
        self.calls = []

    def run(self, args, ok_codes):
        self.calls.append(args)
        return self.documents.pop(0)


def params(**given):
    return dict({"profile": None, "devices": [], "alignment": False}, **given)


def test_every_device_by_class_with_its_drift_named():
    tunectl = FakeTunectl(STATUS)
    result = gather(tunectl, params(profile="deep"))
    assert tunectl.calls == [["status", "--all", "-p", "deep"]]
    assert result["classes"] == {"nvme": ["nvme0n1"], "rotational": ["sdc"], "ssd": ["sdb"]}
    assert result["drift"] == [{"device": "sdb", "attribute": "read_ahead_kb", "before": 128, "after": 1024}]
    assert result["in_sync"] is False and result["profile"] == "deep"
    assert "alignment" not in result


def test_devices_by_name_or_path_narrow_it_and_alignment_asks_align():
    tunectl = FakeTunectl(STATUS, {"ok": True, "devices": [{"name": "sdc", "aligned": True}]})
    result = gather(tunectl, params(devices=["/dev/sdc"], alignment=True))
    assert [d["name"] for d in result["devices"]] == ["sdc"]
    assert result["drift"] == [] and result["in_sync"] is True
    assert tunectl.calls == [["status", "--all"], ["align", "/dev/sdc"]]
    assert result["alignment"]["devices"] == [{"name": "sdc", "aligned": True}]
