"""Running the iron-gemma CLI inside a test."""

from functools import partial

from iron.gemma.cli import main
from iron.lm.testing import run_command

run = partial(run_command, main)
