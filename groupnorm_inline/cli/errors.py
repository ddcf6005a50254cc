"""The one exception the commands raise for an expected failure, and the exit codes it maps to.

`python -m groupnorm_inline` prints such an error as a single line on stderr and exits with its code;
a traceback is never shown for these.
"""

from __future__ import annotations

EXIT_OK = 0
EXIT_FAILED = 1        # the candidate failed: static check, build, wrong output, modified inputs
EXIT_USAGE = 2         # bad arguments: unknown problem, missing file (argparse uses 2 as well)
EXIT_ENVIRONMENT = 3   # this machine cannot run it: no GPU, out of memory, no CUDA toolkit


class CliError(Exception):
    """An expected failure: `message` is what the user reads, `exit_code` what the shell sees."""

    def __init__(self, message: str, exit_code: int = EXIT_FAILED):
        super().__init__(message)
        self.message = message
        self.exit_code = exit_code
