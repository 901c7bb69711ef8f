"""data/tensor_stats.json as the Python side sees it: _core exports the measured statistics in
the table's order with their packed slots and thresholds, and the device path has a pass for
each and packs it at its slot."""

import json
import math
import pathlib

import pytest
import torch

from trainscope import _core
from trainscope._watch.device import DEVICE_MEASURES, activation_row_width, device_activation
from trainscope._watch.plan import DEAD_UNITS, PLAIN, SIGMOID, TANH

TABLE = json.loads((pathlib.Path(__file__).resolve().parents[2] / "data" / "tensor_stats.json").read_text())


def test_core_exports_the_table_in_order_with_its_slots_and_thresholds():
    rows = _core.measured_tensor_stats()
    assert [r["name"] for r in rows] == [r["name"] for r in TABLE["measured"]]
    assert [r["slot"] for r in rows] == list(range(8, 8 + len(rows)))
    for row, spec in zip(rows, TABLE["measured"]):
        assert row["unit"] == spec["unit"]
        assert row["thresholds"] == spec["thresholds"]
    assert set(DEVICE_MEASURES) == {r["name"] for r in rows}, "a device pass for every row"


@pytest.mark.parametrize("kind", [PLAIN, DEAD_UNITS, TANH, SIGMOID])
def test_a_packed_activation_row_holds_each_measured_statistic_at_its_slot(kind):
    out = torch.tensor([[0.0, 0.995, -0.2, 0.004], [0.0, 0.5, 0.3, -0.999]])
    row = device_activation(out, kind)
    assert row.numel() == activation_row_width()
    for stat in _core.measured_tensor_stats():
        expected = DEVICE_MEASURES[stat["name"]](out, kind)
        if expected is None:
            assert math.isnan(float(row[stat["slot"]])), stat["name"]
        else:
            assert float(row[stat["slot"]]) == pytest.approx(float(expected)), stat["name"]
