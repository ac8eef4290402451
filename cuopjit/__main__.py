"""`python -m cuopjit`: the `cuopjit` command."""
import sys

from .cli import main

sys.exit(main())
