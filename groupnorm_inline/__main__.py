"""`python -m groupnorm_inline <command>`: see `groupnorm_inline.cli` (list, export, check, eval,
show-config, clear-cache). The package skips its import-time build while this module is being located."""

import sys

from .cli import main

if __name__ == "__main__":
    sys.exit(main())
