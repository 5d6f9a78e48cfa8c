import sys

from bench.config.extras import NO_PYDANTIC

try:
    import pydantic  # noqa: F401  (the kit's one dependency beyond the standard library)
except ImportError:
    print(f"error: {NO_PYDANTIC}", file=sys.stderr)
    sys.exit(2)

from bench.cli import main

sys.exit(main())
