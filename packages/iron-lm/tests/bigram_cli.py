"""Running the test app's command line inside a test."""

from functools import partial

from bigram import APP

from iron.lm.testing import run_command

run = partial(run_command, APP.main)
