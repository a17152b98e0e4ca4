"""``python -m sandbox.compat.osworld``: see :mod:`sandbox.compat.osworld.runner`."""

import sys

from sandbox.compat.osworld.runner import main

sys.exit(main())
