import sys

try:
    import pydantic  # noqa: F401  (the kit's one dependency beyond the standard library)
except ImportError:
    print("error: the kit needs pydantic >= 2.11, which this Python lacks: pip install "
          "'pydantic>=2.11' (or pip install . in the kit's checkout)", file=sys.stderr)
    sys.exit(2)

from bench.cli import main

sys.exit(main())
