"""``python -m extender.kubectl_plugin``: the same command as the ``kubectl-dra_quota`` console script."""

import sys

from extender.kubectl_plugin.command import main

sys.exit(main())
