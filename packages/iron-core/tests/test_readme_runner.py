"""iron.core.testing.readme: README blocks parsed, run and compared."""

import contextlib
from pathlib import Path

import pytest

from iron.core.testing.readme import ReadmeError, matches, readme_blocks, readme_params, run_block


def readme(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "README.md"
    path.write_text(text)
    return path


def test_blocks_carry_language_options_and_the_output_they_expect(tmp_path):
    path = readme(tmp_path, "# t\n\n```python slow\nprint(1)\n```\n\nprose\n\n```text output\n1\n```\n"
                  "\n```text\na synopsis\n```\n\n```sh with:model ci\nls\n```\n")  # fmt: skip
    python, shell = readme_blocks(path)
    assert (python.line, python.language, python.options, python.code) == (
        3,
        "python",
        {"slow"},
        "print(1)\n",
    )
    assert python.expected == "1\n" and shell.expected is None
    assert shell.options == {"with:model", "ci"}
    (slow, fast) = readme_params(path)
    assert [m.name for m in slow.marks] == ["slow"] and not fast.marks


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("```\nls\n```\n", "a block must name its language"),
        ("```rust\nfn\n```\n", "a block must name its language"),
        ("```python fast\n1\n```\n", r"unknown option\(s\) \['fast'\]"),
        ("```python\n1\n", "the block is never closed"),
        ("```text output\n1\n```\n", "a `text output` block follows the code it shows"),
    ],
)
def test_a_malformed_block_is_named(tmp_path, text, says):
    with pytest.raises(ReadmeError, match=says):
        readme_blocks(readme(tmp_path, text))


def test_python_runs_in_a_module_of_its_own_in_the_scratch_folder(tmp_path):
    path = readme(tmp_path, "```python\nimport os, sys\nopen('made', 'w').close()\n"
                  "print(sys.modules[__name__].__name__ == __name__)\n```\n"
                  "```text output\nTrue\n```\n```python\nprint('x' in globals())\n```\n")  # fmt: skip
    first, second = readme_blocks(path)
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    assert run_block(first, scratch) == "True\n" and (scratch / "made").is_file()
    assert run_block(second, scratch) == "False\n"  # nothing carried over


def test_shell_runs_in_its_folder_with_uv_run_meaning_this_environment(tmp_path):
    path = readme(tmp_path, "```sh\nuv run python -c 'import sys; print(sys.prefix)'\n"
                  "pwd; echo $IRON_CACHE_HOME\nuv run --package x python -c 'print(2)' 2>&1\n```\n")  # fmt: skip
    (block,) = readme_blocks(path)
    prefix, folder, cache, two = run_block(block, tmp_path).splitlines()
    import sys

    assert prefix == sys.prefix and folder == str(tmp_path) and cache.startswith(str(tmp_path))
    assert two == "2"


def test_outputs_compare_with_ellipsis_and_a_normaliser(tmp_path):
    assert matches("a 12 b\nc  \n", "a ... b\nc") and not matches("a 12 b\nd", "a ... b\nc")
    path = readme(tmp_path, "```sh\necho took 3.2 s\n```\n```text output\ntook 9.9 s\n```\n")
    (block,) = readme_blocks(path)
    with pytest.raises(ReadmeError, match=r"README.md:1 \(sh\): printed other than the README"):
        run_block(block, tmp_path)
    assert run_block(block, tmp_path, normalise=lambda t: t.replace("3.2", "9.9")) == "took 3.2 s\n"


def test_failures_ci_toml_checkout_and_fixtures(tmp_path):
    path = readme(tmp_path, "```sh\nfalse\n```\n```sh ci\nuv run nox\n```\n```toml\na = [\n```\n"
                  "```sh checkout\ncat marker\n```\n```sh with:model\ncat model\n```\n")  # fmt: skip
    failing, ci, toml, checkout, fixture = readme_blocks(path)
    with pytest.raises(ReadmeError, match=r"README.md:1 \(sh\): exit status 1"):
        run_block(failing, tmp_path)
    with pytest.raises(ReadmeError, match="a ci block needs its caller's check"):
        run_block(ci, tmp_path)
    seen = []
    assert run_block(ci, tmp_path, ci=seen.append) == "" and seen == [ci]
    with pytest.raises(ReadmeError, match=r"README.md:7 \(toml\): not TOML"):
        run_block(toml, tmp_path)
    repo = tmp_path / "repo"
    (repo / ".venv").mkdir(parents=True)
    (repo / "marker").write_text("from the checkout\n")
    scratch = tmp_path / "s1"
    scratch.mkdir()
    assert run_block(checkout, scratch, checkout=repo) == "from the checkout\n"
    assert not (scratch / "repo" / ".venv").exists()  # a copy without what a run leaves

    @contextlib.contextmanager
    def model(folder):
        (folder / "model").write_text("weights\n")
        yield

    with pytest.raises(ReadmeError, match="no fixture model was given"):
        run_block(fixture, tmp_path)
    assert run_block(fixture, tmp_path, fixtures={"model": model}) == "weights\n"
