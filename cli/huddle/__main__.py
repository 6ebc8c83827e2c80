"""``python -m huddle ...`` is the ``huddle`` command."""

import sys

from huddle.cli import main

sys.exit(main())
