"""`python -m retrieval.cli`: the command line."""

import sys

from retrieval.cli import main

sys.exit(main())
