import pytest

from iron.core.lazy import lazy_exports


def test_attributes_come_from_their_submodule_on_first_use():
    getattr_, dir_, all_ = lazy_exports("iron.core", {"Device": "device", "compare": "tolerance"})
    assert all_ == dir_() == ["Device", "compare"]
    assert getattr_("Device").__module__ == "iron.core.device"
    with pytest.raises(AttributeError, match=r"module 'iron\.core' has no attribute 'Nope'"):
        getattr_("Nope")
