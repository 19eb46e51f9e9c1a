import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from reference import shared_delegate  # noqa: E402


@pytest.fixture(scope="module", params=["cl", "gl"])
def backend(request) -> str:
    """Both GPU backends; a test module may define its own `backend` to narrow this."""
    shared_delegate(request.param)
    return request.param
