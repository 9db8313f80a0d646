"""``python -m revolta_cli serve ...``: the ``revolta`` command without its console script."""

import sys

from revolta_cli.main import main

sys.exit(main())
