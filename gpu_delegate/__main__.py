"""`python -m gpu_delegate ...` is the `gpu-delegate` command."""

from .cli import main

raise SystemExit(main())
