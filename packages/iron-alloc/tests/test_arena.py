import pytest

from iron.alloc import Allocation, ArenaPlan, Plan, check, touch_ranges

KIB = 1024


def image(tag, n_steps):
    """A decode-like image: weights w1, w2 and a cache state read by a chain
    of `n_steps` steps through transients named after `tag`."""
    names = [f"{tag}{k}" for k in range(n_steps)]
    steps = [(["x", "w1"], [names[0]])]
    for k in range(1, n_steps):
        steps.append(([names[k - 1], "w2" if k % 2 else "cache"], [names[k]]))
    sizes = {"x": 4 * KIB, "w1": 64 * KIB, "w2": 32 * KIB, "cache": 16 * KIB}
    sizes.update(dict.fromkeys(names, 8 * KIB))
    residents = {"w1": "weights/1", "w2": "weights/2", "cache": "kv"}
    return steps, sizes, residents


def assert_safe(arena, steps, sizes, residents, offsets):
    """The image's buffers plus every resident of the arena never collide."""
    transients = [n for n in sizes if n not in residents]
    ranges = touch_ranges(steps, transients)
    fixed = tuple(Allocation(str(key), o, s) for key, (o, s) in arena.residents.items())
    plan = Plan({n: offsets[n] for n in transients}, arena.size, arena.alignment, fixed)
    check(plan, ranges, sizes)
    for name, key in residents.items():
        assert (offsets[name], sizes[name]) == arena.residents[key]


def test_images_share_residents_and_reuse_transient_bytes():
    arena = ArenaPlan()
    first = image("a", 6)
    offsets_a = arena.place_image(*first)
    size_after_a = arena.size
    assert_safe(arena, *first, offsets_a)

    second = image("b", 10)
    offsets_b = arena.place_image(*second)
    assert_safe(arena, *second, offsets_b)
    # the same storage is at the same place in both images
    for name in ("w1", "w2", "cache"):
        assert offsets_a[name] == offsets_b[name]
    # b's transients reuse bytes a's transients used
    transients_a = {offsets_a[n] for n in first[1] if n not in first[2]}
    transients_b = {offsets_b[n] for n in second[1] if n not in second[2]}
    assert transients_a & transients_b
    # residents are 112 KiB, each image's transients need 2 x 8 KiB plus x: no growth
    assert arena.size == size_after_a
    assert all(offset % 64 == 0 for offset in (*offsets_a.values(), *offsets_b.values()))


def test_new_residents_go_on_top_and_nothing_moves():
    arena = ArenaPlan(alignment=64)
    steps, sizes, residents = image("a", 4)
    before = arena.place_image(steps, sizes, residents)
    old_residents = arena.residents
    old_size = arena.size

    steps2 = [(["x", "lora"], ["t0"]), (["t0", "w1"], ["t1"])]
    sizes2 = {"x": 4 * KIB, "lora": 1000, "w1": 64 * KIB, "t0": 8 * KIB, "t1": 8 * KIB}
    after = arena.place_image(steps2, sizes2, {"lora": "adapter", "w1": "weights/1"})
    assert after["w1"] == before["w1"]
    assert {k: arena.residents[k] for k in old_residents} == old_residents
    assert arena.residents["adapter"] == (old_size + (-old_size % 64), 1000)
    assert arena.size >= old_size + 1000
    assert_safe(arena, steps2, sizes2, {"lora": "adapter", "w1": "weights/1"}, after)


def test_one_storage_is_one_size_and_a_refusal_changes_nothing():
    arena = ArenaPlan()
    steps, sizes, residents = image("a", 4)
    arena.place_image(steps, sizes, residents)
    state = (arena.size, arena.residents)
    bad_sizes = {**sizes, "w2": 48 * KIB, "new": 64}
    with pytest.raises(
        ValueError,
        match="storage 'weights/2' is 32768 bytes, but resident 'w2' gives it 49152; "
        "one storage is one size in every image",
    ):
        arena.place_image(steps, bad_sizes, {**residents, "new": "fresh"})
    assert (arena.size, arena.residents) == state


def test_two_names_for_one_storage_share_it():
    arena = ArenaPlan()
    steps = [(["a", "b"], ["t"]), (["t"], ["y"])]
    offsets = arena.place_image(steps, {"a": 128, "b": 128, "t": 64, "y": 64}, {"a": "s", "b": "s"})
    assert offsets["a"] == offsets["b"]
    assert arena.residents == {"s": (0, 128)}


def test_bad_arguments_are_refused_by_name():
    with pytest.raises(ValueError, match="ArenaPlan: alignment must be >= 1, got 0"):
        ArenaPlan(alignment=0)
    arena = ArenaPlan()
    with pytest.raises(ValueError, match="resident 'w' has no size"):
        arena.place_image([], {"x": 4}, {"w": "k"})
    assert arena.size == 0 and arena.residents == {}
