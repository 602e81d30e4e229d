"""`python -m searchfuse`: the same command line as `searchfuse`."""

import sys

from searchfuse._entry import main

sys.exit(main())
