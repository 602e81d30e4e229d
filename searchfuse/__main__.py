"""`python -m searchfuse`: the same command line as `searchfuse`."""

import sys

from searchfuse.cli import main

sys.exit(main())
