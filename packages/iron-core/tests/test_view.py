import pytest

from iron.core import View
from iron.core.view import base_of


def test_a_view_is_a_byte_range_of_its_base():
    view = View("kv", 32, 48)
    assert (view.base, view.nbytes, str(view)) == ("kv", 16, "kv[32:48]")
    assert view == View("kv", 32, 48) and view != View("kv", 32, 64)
    assert base_of(view) == "kv" and base_of("kv") == "kv"


def test_text_is_parsed_once_into_a_view_or_left_a_name():
    assert View.parse("kv[32:48]") == View("kv", 32, 48)
    assert View.parse("layer.0/out") == "layer.0/out"
    assert View.parse(str(View("x", 0, 2))) == View("x", 0, 2)


@pytest.mark.parametrize("text", ["kv[32:]", "kv[a:b]", "kv[1:2]x", "kv]", "[0:4]", "kv[-1:4]"])
def test_malformed_text_is_refused_by_name(text):
    with pytest.raises(
        ValueError, match=r"is neither a buffer name nor a view 'base\[start:stop\]'"
    ):
        View.parse(text)


@pytest.mark.parametrize(
    ("base", "start", "stop"), [("kv", 8, 8), ("kv", 9, 8), ("kv", -1, 8), ("kv", 0.0, 8)]
)
def test_an_empty_or_reversed_range_is_refused(base, start, stop):
    with pytest.raises(ValueError, match=r"View kv: .* byte offsets with 0 <= start < stop"):
        View(base, start, stop)


@pytest.mark.parametrize("base", ["", "kv[0:4]", 3])
def test_the_base_is_a_plain_name(base):
    with pytest.raises(ValueError, match="View: base must be a buffer name without"):
        View(base, 0, 4)
