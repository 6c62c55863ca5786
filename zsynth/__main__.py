"""``python -m zsynth``: the ``zsynth`` command."""

from .cli import main

main()
