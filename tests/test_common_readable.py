"""Readable numbers: significant digits, separators, durations, non-finite values kept."""
import pytest

from tfx_parallel.components.common import readable


@pytest.mark.parametrize("value,text", [
    (0.00010178999145864509, "0.0001018"), (0.0008335113525390625, "0.0008335"),
    (19.6234, "19.62"), (1.0, "1"), (9.5e-08, "9.5e-08"), (123456.7, "123,457"),
    (620, "620"), (123456, "123,456"), (-2.345678, "-2.346"),
    (float("nan"), "nan"), (float("inf"), "inf"), (None, "-"), ("mesh", "mesh"),
    (True, "True")])
def test_sig(value, text):
  assert readable.sig(value) == text


def test_sig_digits():
  assert readable.sig(3.14159265, 5) == "3.1416"


@pytest.mark.parametrize("value,text", [
    (4582.613430998621, "4,583"), (1234567.8, "1,234,568"), (100.4, "100"),
    (12.3456, "12.35"), (float("nan"), "nan"), (None, "-")])
def test_rate(value, text):
  assert readable.rate(value) == text


@pytest.mark.parametrize("value,text", [
    (0.42, "0.42 s"), (4.25, "4.2 s"), (12.3, "12 s"), (245, "4 min 05 s"),
    (7380, "2 h 03 min"), (-3.0, "-3.0 s")])
def test_seconds(value, text):
  assert readable.seconds(value) == text


def test_count():
  assert readable.count(10000) == "10,000" and readable.count(7) == "7"
