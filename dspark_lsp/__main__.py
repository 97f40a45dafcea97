"""`python -m dspark_lsp` = the `dspark-lsp` command."""

import sys

from dspark_lsp.cli import main

sys.exit(main())
