"""Shared fixtures: one Ray session for the whole test run (DESIGN §6)."""
from __future__ import annotations

import logging

import pytest
import ray


@pytest.fixture(scope="session")
def ray_session():
    """A local Ray instance the pipeline's engine reuses."""
    if not ray.is_initialized():
        ray.init(num_cpus=2, include_dashboard=False, logging_level=logging.ERROR,
                 object_store_memory=200 * 1024**2)
    yield
    ray.shutdown()
