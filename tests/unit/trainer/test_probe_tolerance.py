"""The weight-sync probe's tolerance follows from the dtypes on both sides."""

import pytest

from parity.services.trainer.probe_tolerance import probe_tolerance


def test_float32_on_both_sides_keeps_the_tight_tolerance() -> None:
    assert probe_tolerance("float32", "float32") == pytest.approx(1e-3)


def test_each_bfloat16_side_adds_its_rounding() -> None:
    exact, mixed, low = (probe_tolerance(*pair) for pair in [("float32", "float32"), ("bfloat16", "float32"),
                                                             ("bfloat16", "bfloat16")])  # fmt: skip
    assert probe_tolerance("float32", "bfloat16") == mixed
    assert exact < mixed < low
    assert low == pytest.approx(2 * mixed - exact)


def test_an_unknown_dtype_asks_for_an_explicit_tolerance() -> None:
    with pytest.raises(ValueError, match="--sync-tolerance"):
        probe_tolerance("float32", "float8_e4m3fn")
