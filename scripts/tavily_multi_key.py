#!/usr/bin/env python3
"""The old ``tavily_multi_key.py`` commands, on top of an installed ``searchfuse``.

    tavily_multi_key.py status [--json]
    tavily_multi_key.py test-keys [--json]
    tavily_multi_key.py search --query "..." --count 5 [--json]
    tavily_multi_key.py reset-month [--json]

``searchfuse`` itself accepts these forms (``searchfuse search --query ...``),
so this file only hands its arguments over; it needs nothing but
``pip install searchfuse`` and can be copied anywhere.
"""

from __future__ import annotations

import sys

from searchfuse.cli import main

if __name__ == "__main__":
    sys.exit(main())
