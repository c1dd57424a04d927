"""Running the iron-llama CLI inside a test."""

from iron.llama.cli import main


def run(capsys, *argv):
    """(exit code, stdout, stderr) of one command; argparse exits count too."""
    try:
        code = main([str(a) for a in argv])
    except SystemExit as exit_:
        code = exit_.code
    out, err = capsys.readouterr()
    return code, out, err
