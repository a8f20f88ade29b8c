"""`python -m langmem_trpc.cli ...`: the `langmem-trpc` command without the console script."""

from . import main

main()
