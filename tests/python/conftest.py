"""The cluster the tests run against, started by tests/python/run.sh:
RKV_COORDINATOR and RKV_TOKEN_FILE name it."""
import os

import pytest

import rkv


@pytest.fixture(scope="session")
def cluster():
    coordinator = os.environ.get("RKV_COORDINATOR")
    token_file = os.environ.get("RKV_TOKEN_FILE")
    if not coordinator or not token_file:
        pytest.fail("run these tests with tests/python/run.sh, which starts a cluster")
    with open(token_file) as f:
        return coordinator, f.read().strip()


@pytest.fixture
def db(cluster):
    coordinator, token = cluster
    with rkv.Client(coordinator, token=token, fabric="soft") as client:
        yield client
