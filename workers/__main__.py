"""``python -m workers``: the same as ``zsynth worker``."""

import sys

from zsynth.cli import main

main(["worker", *sys.argv[1:]])
