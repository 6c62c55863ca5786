"""``python -m zsynth``: the ``zsynth`` command."""

from zsynth.cli import main

main()
