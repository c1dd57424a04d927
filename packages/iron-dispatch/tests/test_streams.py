"""Streams: a runtime-shaped operator's stream at new values is its
sequence lowered against its step's configuration; a sequence that
configuration cannot run, or a design whose configuration moved with the
values, is refused by name."""

import attrs
import pytest
from dispatch_fakes import AddK

from iron.core import Device
from iron.design import TAP, Drain, Fill, design_of
from iron.dispatch.streams import StreamError, Streams, design_at

SIZE = 1024
NPU2 = Device.from_name("npu2")


@attrs.frozen
class Halves(AddK):
    """AddK whose sequence per k moves x in two halves."""

    def sequence(self, *, k):
        half = self.size // 2
        return (
            Fill("in", "x", TAP.linear(half)),
            Fill("in", "x", TAP.linear(half, half)),
            Drain("out", "y", TAP.linear(self.size)),
        )


@attrs.frozen
class Grows(AddK):
    """AddK whose design function builds objects k times larger: a
    configuration that moves with k (it has no `sequence`; its derived
    words make it runtime-shaped)."""

    @staticmethod
    def design(size, tile, k, device):
        return AddK.design(size, tile * max(1, k), device)

    def runtime_params(self, **values):
        return {}


def test_a_stream_at_new_values_runs_the_operators_sequence_over_the_configuration():
    op = Halves(SIZE).resolve(NPU2)
    base = design_of(op)
    streams = Streams()
    stream = streams.stream(op, base, {"k": 3})
    assert len(stream.lowered.runtime.tasks) == 3
    assert stream.lowered.configuration == streams.configuration(op, base)[0].configuration
    # nothing of the configuration made again: the step design's own values
    at = design_at(op, base, {"k": 3})
    assert (at.workers, at.fifos, at.tensors) == (base.workers, base.fifos, base.tensors)
    assert at.workers is base.workers and at.sequence != base.sequence
    assert stream.params == {"k": 3}
    assert streams.stream(op, base, {"k": 3}) is stream
    assert (streams.configurations, streams.streams) == (1, 1)


def test_a_sequence_the_configuration_cannot_run_is_refused_by_name(monkeypatch):
    op = Halves(SIZE).resolve(NPU2)
    monkeypatch.setattr(Halves, "sequence", lambda self, *, k: (Fill("nowhere", "x"),))
    with pytest.raises(StreamError, match=r"Halves at k=2: its sequence does not run on the image"):
        Streams().stream(op, design_of(op), {"k": 2})


def test_a_design_whose_configuration_moves_with_a_value_is_refused():
    op = Grows(SIZE).resolve(NPU2)
    streams = Streams()
    assert streams.stream(op, design_of(op), {"k": 0}).params == {"k": 0}
    with pytest.raises(StreamError, match=r"Grows at k=2: its design's configuration differs"):
        streams.stream(op, design_of(op), {"k": 2})
    assert streams.streams == 1
