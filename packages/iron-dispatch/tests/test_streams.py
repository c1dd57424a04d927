"""Streams: a runtime-shaped operator's stream at new values is lowered
against its step's configuration, and refused when its design's
configuration moved with the values."""

import attrs
import pytest
from dispatch_fakes import AddK

from iron.core import Device
from iron.design import TAP, Drain, Fill, design_of
from iron.dispatch.streams import StreamError, Streams

SIZE = 1024
NPU2 = Device.from_name("npu2")


@attrs.frozen
class Halves(AddK):
    """AddK whose sequence per k moves x in two halves: its design built
    again per call (equal configuration, new objects); `grow` makes the
    objects k times larger, a configuration that moves with k."""

    grow: bool = False

    def sequence(self, *, k):
        tile = self.tile * k if self.grow else self.tile
        design = self.design(self.size, tile, self.device)
        half = self.size // 2
        return attrs.evolve(
            design,
            sequence=(
                Fill("in", "x", TAP.linear(half)),
                Fill("in", "x", TAP.linear(half, half)),
                Drain("out", "y", TAP.linear(self.size)),
            ),
        )


def test_a_stream_at_new_values_is_lowered_against_the_configuration():
    op = Halves(SIZE).resolve(NPU2)
    base = design_of(op)
    streams = Streams()
    stream = streams.stream(op, base, {"k": 3})
    assert len(stream.lowered.runtime.tasks) == 3
    assert stream.lowered.configuration == streams.configuration(op, base)[0].configuration
    assert stream.params == {"k": 3}
    assert streams.stream(op, base, {"k": 3}) is stream
    assert (streams.configurations, streams.streams) == (1, 1)


def test_a_design_whose_configuration_moves_with_a_value_is_refused():
    op = Halves(SIZE, grow=True).resolve(NPU2)
    streams = Streams()
    assert streams.stream(op, design_of(op), {"k": 1}).params == {"k": 1}
    with pytest.raises(StreamError, match=r"Halves at k=2: its design's configuration differs"):
        streams.stream(op, design_of(op), {"k": 2})
    assert streams.streams == 1
