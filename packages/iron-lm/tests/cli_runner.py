"""Running the test app's command line inside a test."""

from bigram import APP


def run(capsys, *argv):
    """(exit code, stdout, stderr) of one command; argparse exits count too."""
    try:
        code = APP.main([str(a) for a in argv])
    except SystemExit as exit_:
        code = exit_.code
    out, err = capsys.readouterr()
    return code, out, err
