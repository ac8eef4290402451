"""`python -m cuopjit`: the `cuopjit` command."""
import sys

from .cli.main import main

sys.exit(main())
