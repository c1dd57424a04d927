"""One arena shared by every compiled version (image) of a graph.

Offsets are baked into each image's instruction stream, so nothing placed may
ever move: residents (weights, state) get one offset for the life of the
arena, and the arena only grows. Transients of an image are planned around
every resident and may reuse the bytes of other images' transients, because
one image runs at a time.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence

from .liveness import Step, touch_ranges
from .planner import Allocation, _index, align_up, place


class ArenaPlan:
    """Offsets for successive images in one growing arena (see the module doc).

    `alignment` (int >= 1, default the 64-byte coherence granule) applies to
    every offset. `size` is the arena size so far; `residents` maps each
    storage key to its `(offset, size)`.
    """

    def __init__(self, alignment: int = 64) -> None:
        alignment = _index("ArenaPlan", "alignment", alignment)
        if alignment < 1:
            raise ValueError(f"ArenaPlan: alignment must be >= 1, got {alignment}")
        self.alignment = alignment
        self._residents: dict[Hashable, Allocation] = {}
        self._size = 0

    @property
    def size(self) -> int:
        return self._size

    @property
    def residents(self) -> dict[Hashable, tuple[int, int]]:
        return {key: (a.offset, a.size) for key, a in self._residents.items()}

    def state(self) -> tuple:
        """What `restore` needs to undo every `place_image` since: a caller
        whose image fails later (its memory cannot be allocated) puts the
        plan back as it was, so the images that worked keep their size."""
        return dict(self._residents), self._size

    def restore(self, state: tuple) -> None:
        self._residents, self._size = dict(state[0]), state[1]

    def place_image(
        self,
        steps: Sequence[Step],
        sizes: Mapping[str, int],
        residents: Mapping[str, Hashable] | None = None,
        strategy: str = "auto",
    ) -> dict[str, int]:
        """Place one image and return the offset of every name in `sizes`.

        `sizes` maps each buffer of the image to its
        bytes; `residents` maps the resident ones to their storage key. A
        storage key seen for the first time gets the aligned offset above
        everything placed so far and keeps it forever; a key seen before must
        come with the same size (else `ValueError`, and the arena is left as
        it was). Every other name is a transient: live from its first touch
        in `steps` to its last (`touch_ranges`), planned with `place` around
        all residents of all images. Two names with one storage key share it.
        """
        residents = dict(residents or {})
        for name, size in sizes.items():
            if _index("ArenaPlan.place_image", f"size of {name!r}", size) < 0:
                raise ValueError(f"ArenaPlan.place_image: size of {name!r} must be >= 0")
        for name in residents:
            if name not in sizes:
                raise ValueError(f"ArenaPlan.place_image: resident {name!r} has no size")

        # residents: check every key before placing any, so a refusal changes nothing
        new: dict[Hashable, int] = {}
        for name, key in residents.items():
            size = sizes[name]
            known = self._residents.get(key)
            seen = known.size if known is not None else new.get(key)
            if seen is not None and seen != size:
                raise ValueError(
                    f"ArenaPlan.place_image: storage {key!r} is {seen} bytes, but resident "
                    f"{name!r} gives it {size}; one storage is one size in every image"
                )
            if known is None:
                new[key] = size
        top = self._size
        placed = dict(self._residents)
        for key, size in new.items():
            offset = align_up(top, self.alignment)
            placed[key] = Allocation(f"<storage {key!r}>", offset, size)
            top = offset + size

        transients = [name for name in sizes if name not in residents]
        ranges = touch_ranges(steps, transients)
        plan = place(
            ranges,
            sizes,
            alignment=self.alignment,
            fixed=tuple(placed.values()),
            strategy=strategy,
        )
        self._residents = placed
        self._size = max(top, plan.size)
        offsets = {name: placed[key].offset for name, key in residents.items()}
        offsets.update(plan.offsets)
        return {name: offsets[name] for name in sizes}
