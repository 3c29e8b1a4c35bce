"""`python -m ctxstore.cli`: the same as the `ctxstore` script."""

from . import main

main()
