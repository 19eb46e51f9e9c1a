"""What preparing a partition is doing, while it does it: an INFO log line per stage ("cl: compiling 34
kernels in 1 program", "cl: first launch of 55 kernels", "cl: cache hit ..."), and, on a terminal, a tqdm bar
on stderr once preparation has taken more than a second (a warm start never shows one)."""

from __future__ import annotations

import logging
import sys
import time
from typing import Any

from tqdm import tqdm

# a logger of its own, so that a program (the CLI) can show these lines and not every INFO of the package
log = logging.getLogger("gpu_delegate.progress")

BAR_DELAY_S = 1.0  # a preparation this quick shows no bar


def stderr_is_terminal() -> bool:
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):  # replaced by an object without isatty, or closed
        return False


class Progress:
    """One partition's preparation: ``stage`` names a stage (logged at INFO) and adds its steps to the bar,
    ``advance`` counts steps done, ``close`` removes the bar."""

    def __init__(self, backend: str, nodes: int) -> None:
        self.backend = backend
        self.started = time.monotonic()
        self.bar: Any = tqdm(total=0, desc=f"gpu_delegate {backend}: {nodes} nodes", unit="step", leave=False,
                             delay=BAR_DELAY_S, file=sys.stderr, disable=not stderr_is_terminal(),
                             bar_format="{desc}: {n_fmt}/{total_fmt} [{elapsed}]")

    def stage(self, text: str, steps: int = 0) -> None:
        log.info("%s: %s", self.backend, text)
        if steps:
            self.bar.total += steps
        # shown now if the bar is showing already; tqdm shows it at the next step once the delay has passed
        self.bar.set_description_str(f"gpu_delegate {self.backend}: {text}", refresh=False)
        if time.monotonic() - self.started >= BAR_DELAY_S:
            self.bar.refresh()

    def advance(self, steps: int = 1) -> None:
        self.bar.update(steps)

    def close(self) -> None:
        self.bar.close()
