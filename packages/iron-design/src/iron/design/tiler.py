"""Tiling a row-major 2-d tensor into a sequence of TAPs, one per tile or
group of tiles, as mlir-aie's TensorTiler2D does
(python/helpers/taplib/tensortiler2d.py at the pin): the same three tilers,
the same arguments, the same patterns, so a design written against mlir-aie's
taplib reads the same here.

- `simple_tiler`: one TAP per tile.
- `group_tiler`: one TAP per group of `tile_group_dims` adjacent tiles.
- `step_tiler`: one TAP per group of `tile_group_repeats` tiles taken
  `tile_group_steps` tiles apart; groups of a chunk of (steps x repeats)
  tiles interleave, the k-th taking tiles k, k + step, k + 2 step...

Within a TAP the tiles of a group are visited row by row (column by column
with `tile_group_col_major`), the elements of a tile likewise
(`tile_col_major`); the TAPs come row of groups by row of groups
(`iter_col_major`: column by column). `pattern_repeat` visits each TAP's
pattern that many times, in its highest dimension with stride 0 (the shim
BD's repeat). With `allow_partial` a tensor that does not divide into whole
groups gets smaller groups at its edges; with `prune_step` (the default) a
group whose tiles lie end to end in its visit order becomes one taller (or
wider) tile, a dimension fewer. Every TAP has at most four dimensions;
patterns that need more are refused, as are shapes that do not divide into
tiles.
"""

from __future__ import annotations

from iron.design.model import TAP, DesignError, require_int


def simple_tiler(
    tensor_dims,
    tile_dims=None,
    tile_col_major: bool = False,
    iter_col_major: bool = False,
    pattern_repeat: int = 1,
    prune_step: bool = True,
) -> tuple[TAP, ...]:
    """One TAP per `tile_dims` tile (the whole tensor if None)."""
    return group_tiler(
        tensor_dims,
        tensor_dims if tile_dims is None else tile_dims,
        tile_col_major=tile_col_major,
        iter_col_major=iter_col_major,
        pattern_repeat=pattern_repeat,
        prune_step=prune_step,
    )


def group_tiler(
    tensor_dims,
    tile_dims,
    tile_group_dims=None,
    tile_col_major: bool = False,
    tile_group_col_major: bool = False,
    iter_col_major: bool = False,
    pattern_repeat: int = 1,
    allow_partial: bool = False,
    prune_step: bool = True,
) -> tuple[TAP, ...]:
    """One TAP per group of `tile_group_dims` (tiles down, tiles across)."""
    return step_tiler(
        tensor_dims,
        tile_dims,
        (1, 1) if tile_group_dims is None else tile_group_dims,
        tile_col_major=tile_col_major,
        tile_group_col_major=tile_group_col_major,
        iter_col_major=iter_col_major,
        allow_partial=allow_partial,
        pattern_repeat=pattern_repeat,
        prune_step=prune_step,
    )


def step_tiler(
    tensor_dims,
    tile_dims,
    tile_group_repeats,
    tile_group_steps=None,
    tile_col_major: bool = False,
    tile_group_col_major: bool = False,
    iter_col_major: bool = False,
    allow_partial: bool = False,
    pattern_repeat: int = 1,
    prune_step: bool = True,
) -> tuple[TAP, ...]:
    """One TAP per group of `tile_group_repeats` tiles, `tile_group_steps`
    tiles apart in each dimension."""
    height, width = _pair("tensor_dims", tensor_dims)
    tile = _pair("tile_dims", tile_dims)
    repeats = list(_pair("tile_group_repeats", tile_group_repeats))
    steps = list(
        _pair("tile_group_steps", (1, 1) if tile_group_steps is None else tile_group_steps)
    )
    require_int("pattern_repeat", pattern_repeat, 1)
    tiles = []
    for i, (dim, size) in enumerate(zip((height, width), tile)):
        if dim % size:
            raise DesignError(f"tensor dimension {i} ({dim}) is not a whole number of {size}-tiles")
        tiles.append(dim // size)
    if not allow_partial:
        for i, (count, repeat, step) in enumerate(zip(tiles, repeats, steps)):
            if count % (repeat * step):
                raise DesignError(
                    f"tensor dimension {i} holds {count} tiles, not a whole number of groups of "
                    f"{repeat} tiles {step} apart; allow_partial=True takes smaller groups at the edge"
                )
    for i, count in enumerate(tiles):  # a group cannot reach past the tensor
        repeats[i] = min(repeats[i], -(-count // steps[i]))
        if steps[i] > count:
            steps[i] = 1
    origins = [_origins(count, repeat, step) for count, repeat, step in zip(tiles, repeats, steps)]
    if iter_col_major:
        order = [(down, across) for across in origins[1] for down in origins[0]]
    else:
        order = [(down, across) for down in origins[0] for across in origins[1]]
    return tuple(
        _group(
            width, tile, tiles, repeats, steps, origin, tile_col_major, tile_group_col_major,
            pattern_repeat, prune_step,
        )
        for origin in order
    )  # fmt: skip


def _pair(what: str, value) -> tuple[int, int]:
    try:
        pair = tuple(value)
    except TypeError:
        pair = ()
    if len(pair) != 2:
        raise DesignError(f"{what} is two sizes (down, across), got {value!r}")
    for i, v in enumerate(pair):
        require_int(f"{what}[{i}]", v, 1)
    return pair


def _origins(count: int, repeat: int, step: int) -> list[int]:
    """The first tile of each group along one dimension: chunks of
    repeat x step tiles, each holding `step` interleaved groups."""
    chunk = repeat * step
    return [start + k for start in range(0, count, chunk) for k in range(min(step, count - start))]


def _group(
    width, tile, tiles, repeats, steps, origin, tile_col_major, group_col_major, repeat, prune
) -> TAP:
    (rows, cols), (down, across) = tile, origin
    left = [count - at for count, at in zip(tiles, origin)]  # tiles from the origin on
    reps = [min(r, -(-n // s)) for r, n, s in zip(repeats, left, steps)]
    step = [1 if s > n else s for s, n in zip(steps, left)]
    if prune and group_col_major and step[0] == 1 and reps[0] > 1 and not tile_col_major:
        rows, reps[0] = rows * reps[0], 1  # tiles stacked and visited row by row: one tall tile
    elif prune and not group_col_major and step[1] == 1 and reps[1] > 1 and tile_col_major:
        cols, reps[1] = cols * reps[1], 1  # side by side, column by column: one wide tile
    if tile_col_major:
        sizes, strides = [1, 1, cols, rows], [0, 0, 1, width]
    else:
        sizes, strides = [1, 1, rows, cols], [0, 0, width, 1]
    down_stride = width * tile[0] * step[0]  # from one tile of the group to the next below
    across_stride = tile[1] * step[1]
    if reps[0] > 1 and reps[1] > 1:
        outer, inner = (1, 0) if group_col_major else (0, 1)
        sizes[outer], strides[outer] = reps[0], down_stride
        sizes[inner], strides[inner] = reps[1], across_stride
    elif reps[0] > 1:
        sizes[1], strides[1] = reps[0], down_stride
    elif reps[1] > 1:
        sizes[1], strides[1] = reps[1], across_stride
    if repeat > 1:
        if sizes[0] != 1:
            raise DesignError(
                f"pattern_repeat {repeat} needs the highest of four dimensions, which the "
                f"group takes (sizes {sizes}, strides {strides})"
            )
        sizes[0], strides[0] = repeat, 0
    for i in range(3):  # unused dimensions in front have no stride
        if sizes[i] != 1:
            break
        strides[i] = 0
    return TAP(down * tile[0] * width + across * tile[1], sizes, strides)
