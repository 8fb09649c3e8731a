"""``python -m cqopt``: the same as the ``cqopt`` command."""

from cqopt.cli.main import main

raise SystemExit(main())
