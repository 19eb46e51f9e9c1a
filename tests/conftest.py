import pytest

from .reference import shared_delegate


@pytest.fixture(scope="module", params=["cl", "gl"])
def backend(request: pytest.FixtureRequest) -> str:
    """Both GPU backends; a test module may define its own `backend` to narrow this."""
    shared_delegate(request.param)
    return str(request.param)
