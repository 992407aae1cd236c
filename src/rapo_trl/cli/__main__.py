"""``python -m rapo_trl.cli``: the same as the ``rapo`` console script."""

import sys

from rapo_trl.cli import main

sys.exit(main())
