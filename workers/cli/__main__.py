"""``python -m workers.cli``: the same as the ``hartflow`` console script."""

from workers.cli import main

main()
