"""Fixtures for tests of a Hearth server (tests/server) and of the window on one (tests/app): a loopback model
server and the single box, `hearth serve` alone on a SQLite data folder. Import them into a conftest or a test
module."""

from collections.abc import Iterator

import pytest

from tests.support.cluster import Api, Cluster
from tests.support.openai_server import OpenAIServer, run_in_thread


@pytest.fixture(scope="module")
def model() -> Iterator[OpenAIServer]:
    """A loopback model server for a test module's server processes (each test forgets what the last one left)."""
    with run_in_thread() as server:
        yield server


@pytest.fixture(scope="module")
def box(tmp_path_factory, model) -> Iterator[tuple[Cluster, Api]]:
    """The single box: `hearth serve` alone on a SQLite data folder, its turns answered by `model`."""
    cluster = Cluster(tmp_path_factory.mktemp("box"), model.base_url)
    api = cluster.launch_api()
    api.wait_started()
    yield cluster, api
    cluster.stop()
