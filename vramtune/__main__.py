"""`python -m vramtune`: the warm worker starts importing Paddle before the CLI's own imports (forking.start_early)."""
import sys

from vramtune.probing.forking import start_early

start_early(sys.argv[1:])

from vramtune.cli import main  # noqa: E402  after the warm worker's start, which it overlaps

main()
