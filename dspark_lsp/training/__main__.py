import sys

from dspark_lsp.training.cli import main

sys.exit(main())
