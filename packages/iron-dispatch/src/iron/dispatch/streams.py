"""Runtime-shaped steps: one device configuration serves every value of an
operator's dispatch-time values; only the runtime sequence (on an NPU, the
instruction stream) is generated per distinct value, and cached by it.

A step is runtime-shaped when its operator says so
(`iron.dispatch.values.runtime_shaped`: it provides `sequence(**values)`,
its design's runtime sequence at those values, or `runtime_params(**values)`,
the words of its design's derived parameters). Its configuration is what
iron-design's `lower` splits off (`Configuration.digest()`); a stream is the
design's runtime sequence for one operator at one set of values, lowered
against that configuration alone (`iron.design.lower.lower_stream`, the
instructions-only compile). `Streams` keeps both apart, in memory and as
compile-cache entries of their own kinds (``configuration``: the
configuration's canonical text; ``stream``: the sequence's and the
parameter words for the values), so `iron cache info` lists them apart and
a new value never lowers, nor compiles, the configuration again.

`Streams` is also the one owner of the instruction streams an xclbin's
steps run (`instructions`): one per `stream_key`, the step's design and
the call's parameters and values, kept for the session's executables (a
decode's offsets make one per position).

Where a design's sequence depends on the values, the operator's
`sequence(**values)` gives it, and it runs over the step's design as it
is: nothing of the configuration is built again for a new value. An
operator without one has its design function build its design at the
values, whose configuration must be the step's (one that moved with a value
is refused, naming the operator and the values). Where only parameter
words change (an offset), the step is not runtime-shaped and its one
sequence serves every call.
"""

from __future__ import annotations

import collections
import json
import threading
import weakref
from collections.abc import Callable, Mapping

import attrs
import numpy as np

from iron.core import Operator
from iron.design import Design, DesignError, design_of, lower
from iron.design.lower import Lowered, lower_stream
from iron.design.model import canonical
from iron.dispatch.identity import digest
from iron.dispatch.values import design_params


class StreamError(ValueError):
    """A runtime-shaped operator whose stream does not fit its configuration."""


@attrs.frozen
class Stream:
    configuration: str  # the configuration's digest
    lowered: Lowered  # the configuration with this call's runtime sequence
    params: dict[str, int]  # every design parameter's word for these values


class Streams:
    """Configurations and streams of a session (see the module docstring).
    `cache` (a `CompileCache`, or None: memory only) holds their entries;
    `configurations` and `streams` count what this instance lowered (each
    at most once: a repeat is served from memory); the last `KEPT` streams
    stay in memory."""

    KEPT = 64
    #: instruction streams kept in memory (one made again costs a compile
    #: on npu, cached on disk, or a few microseconds on sim)
    KEPT_INSTRUCTIONS = 256

    def __init__(self, cache=None) -> None:
        self.cache = cache
        #: (configuration key, rtp) -> (lowered, its digest, the design lowered)
        self._lowered: dict[tuple, tuple[Lowered, str, Design]] = {}
        self._streams: collections.OrderedDict[tuple, Stream] = collections.OrderedDict()
        self._instructions: collections.OrderedDict[tuple, np.ndarray] = collections.OrderedDict()
        #: id(design) -> (a weak reference to it, `design_key(design)`): a
        #: step's design is keyed at each new stream, and a key digests the
        #: whole configuration
        self._keys: dict[int, tuple[weakref.ref, str]] = {}
        self._lock = threading.Lock()
        self.configurations = self.streams = 0

    def clear(self) -> None:
        self._lowered.clear()
        self._streams.clear()
        self._instructions.clear()
        self._keys.clear()

    def instructions(self, key: tuple, make) -> np.ndarray:
        """The instruction words of the stream `key` names (`stream_key`,
        with whatever else the words depend on): `make()` once, then from
        memory while among the last `KEPT_INSTRUCTIONS`."""
        with self._lock:
            found = self._instructions.get(key)
            if found is not None:
                self._instructions.move_to_end(key)
                return found
        words = np.ascontiguousarray(make(), np.uint32)
        with self._lock:
            self._instructions[key] = words
            if len(self._instructions) > self.KEPT_INSTRUCTIONS:
                self._instructions.popitem(last=False)
        return words

    def configuration(
        self, op: Operator, design: Design, rtp: frozenset[str] = frozenset()
    ) -> tuple[Lowered, str]:
        """`design` lowered (with `rtp` as runtime-parameter words: an
        xclbin's form) and its configuration's digest: compiled once per
        configuration (`configuration_key`) and form."""
        return self._configuration(op, design, rtp)[:2]

    def _configuration(
        self, op: Operator, design: Design, rtp: frozenset[str]
    ) -> tuple[Lowered, str, Design]:
        """`configuration`'s answer and the design it was lowered from."""
        key = (configuration_key(op, design, self._design_key), rtp)
        with self._lock:
            if key not in self._lowered:
                lowered = lower(design, rtp=rtp)
                config = lowered.configuration
                text = canonical(config)
                self._entry(
                    "configuration", digest(text), {"configuration.txt": text}, name=design.name
                )
                self._lowered[key] = (lowered, digest(text), design)
            return self._lowered[key]

    def stream(
        self,
        op: Operator,
        base: Design,
        values: Mapping[str, int],
        rtp: frozenset[str] = frozenset(),
    ) -> Stream:
        """The stream of `op` at `values` against `base`'s configuration
        (`base`: the step's design, at the operator's own values), lowered
        with `rtp` as runtime-parameter words (on an xclbin: the sequence
        writes them for the call)."""
        key = (op.identity_text(), tuple(sorted(values.items())), rtp)
        with self._lock:
            found = self._streams.get(key)
            if found is not None:
                self._streams.move_to_end(key)
                return found
        lowered, configuration, lowered_from = self._configuration(op, base, rtp)
        design = design_at(op, base, values)
        # operators that name one configuration may lower it from another
        # step's design: this one must make it too
        if not (
            self._same_configuration(design, base) and self._same_configuration(base, lowered_from)
        ):
            raise StreamError(
                f"{type(op).__name__} at {_label(values)}: its design's configuration differs "
                f"from the one its image holds ({base.name}); a dispatch-time value may change "
                "only the runtime sequence and the parameter words"
            )
        params = design_params(op, design, values)
        stream = Stream(configuration, lower_stream(lowered, design), params)
        # the sequence itself is in the image's entry (designs.json); on an
        # NPU this entry is where the stream's instructions belong
        self._entry(
            "stream",
            digest(json.dumps([configuration, op.identity_text(), sorted(values.items())])),
            {"params.json": json.dumps(params, sort_keys=True)},
            name=f"{base.name} {_label(values) or type(op).__name__}",
            configuration=configuration,
            statements=len(design.sequence),
        )
        with self._lock:
            self._streams[key] = stream
            if len(self._streams) > self.KEPT:
                self._streams.popitem(last=False)
        return stream

    def _same_configuration(self, design: Design, base: Design) -> bool:
        """`design` makes `base`'s configuration: the same values (an
        operator that reuses its image's), else equal keys."""
        parts = zip(_configuration_parts(design), _configuration_parts(base))
        return all(a is b for a, b in parts) or self._design_key(design) == self._design_key(base)

    def _design_key(self, design: Design) -> str:
        """`design_key(design)`, kept while the design lives."""
        at = id(design)
        found = self._keys.get(at)
        if found is not None and found[0]() is design:
            return found[1]
        key = design_key(design)
        with self._lock:
            if len(self._keys) >= self.KEPT:  # forget the designs gone
                self._keys = {k: v for k, v in self._keys.items() if v[0]() is not None}
            self._keys[at] = (weakref.ref(design), key)
        return key

    def _entry(self, kind: str, key: str, contents: dict[str, str], **meta) -> None:
        if kind == "configuration":
            self.configurations += 1
        else:
            self.streams += 1
        if self.cache is None:
            return

        def build(staging):
            for name, text in contents.items():
                (staging / name).write_text(text)

        self.cache.get_or_build(digest(f"{kind}:{key}"), build, kind=kind, **meta)


def design_at(op: Operator, base: Design, values: Mapping[str, int]) -> Design:
    """The design of `op` at `values`: `base` (the step's design) running
    the operator's `sequence(**values)` where it provides one (its runtime
    sequence at those values over the image's configuration and tensors),
    else `base` itself at the operator's own values, else its design
    function at those (`attrs.evolve` runs the operator's checks first)."""
    if callable(getattr(type(op), "sequence", None)):
        statements = tuple(op.sequence(**values))
        try:
            return attrs.evolve(base, sequence=statements)
        except DesignError as error:
            raise StreamError(
                f"{type(op).__name__} at {_label(values)}: its sequence does not run on the "
                f"image's configuration ({base.name}): {error}"
            ) from None
    if all(getattr(op, k) == v for k, v in values.items()):
        return base
    return design_of(attrs.evolve(op, **values))


def stream_key(step, params: Mapping[str, int], values: Mapping[str, int]) -> tuple:
    """Which stream a call of one-step program `step` (a `ProgramStep`)
    runs: its design (or host model) with the call's parameter words and
    dispatch-time values (`iron.dispatch.program.call_values`)."""
    return (step.digest or step.host, tuple(sorted(params.items())), tuple(sorted(values.items())))


def configuration_key(
    op: Operator, design: Design, key_of: Callable[[Design], str] | None = None
) -> str:
    """Which configuration `design` (of `op`) makes: the operator's own
    name for it where it gives one (FLMGemm's `configuration()`, the image
    stem every shape shares), else what the configuration is lowered from
    (`key_of`, by default `design_key`)."""
    named = getattr(type(op), "configuration", None)
    if callable(named):
        return f"{type(op).__name__}:{op.configuration()}"
    return (key_of or design_key)(design)


def _configuration_parts(design: Design) -> tuple:
    """What a design's configuration is lowered from (not its runtime
    tensors nor its sequence)."""
    return (design.device, design.fifos, design.workers, design.links, design.params,
            design.barriers, design.members)  # fmt: skip


def design_key(design: Design) -> str:
    """A digest of what `design`'s configuration is lowered from: equal
    keys, equal configurations."""
    return digest(canonical(_configuration_parts(design)))


def _label(values: Mapping[str, int]) -> str:
    return ",".join(f"{k}={v}" for k, v in sorted(values.items()))
