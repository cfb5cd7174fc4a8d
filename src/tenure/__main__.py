"""``python -m tenure`` is the ``tenure`` command."""

import sys

from ._cli import main

sys.exit(main())
