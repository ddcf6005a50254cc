"""Shared pytest setup: seeded RNG per test, and the `cuda` marker skipped cleanly where no GPU is visible."""

import pytest
import torch


def pytest_collection_modifyitems(config, items):
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU (none visible)")
    for item in items:
        if "cuda" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)
    yield


@pytest.fixture
def poisoned_outputs():
    """Every tensor allocated with torch.empty / empty_like during the test (the kernels' outputs included, on
    CPU and CUDA) starts filled with NaN, so an element a kernel never writes stays NaN and fails the test.

    Uses PyTorch's own switch for this (`torch.utils.deterministic.fill_uninitialized_memory`, active while
    deterministic algorithms are on); warn_only, so PyTorch ops without a deterministic variant still run.
    """
    import torch.utils.deterministic as deterministic

    was_on = torch.are_deterministic_algorithms_enabled()
    was_warn_only = torch.is_deterministic_algorithms_warn_only_enabled()
    was_fill = deterministic.fill_uninitialized_memory
    torch.use_deterministic_algorithms(True, warn_only=True)
    deterministic.fill_uninitialized_memory = True
    yield
    deterministic.fill_uninitialized_memory = was_fill
    torch.use_deterministic_algorithms(was_on, warn_only=was_warn_only)
