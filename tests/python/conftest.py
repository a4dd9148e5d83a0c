"""pytest set-up for tk's Python tests.

Run from the repository root after building (build/libtk.so):
    PYTHONPATH=python TK_LIBRARY=build/libtk.so python3 -m pytest -q tests/python
(`make test` does this.) Importing torch_tk loads the library, so every test
here sees torch.ops.tk.*.
"""

import importlib.util
import os
import sys

import pytest

# CPU streaming stores for outputs of any size that can take them (libtk reads
# TK_CPU_STREAM_MB once per process): the tests' outputs are tens of MiB, below
# the default size (a sixth of the last-level cache), and the streamed path must
# stay as well covered as the plain one; test_output_cache.py's test_stream_rule
# checks the default in child processes
os.environ.setdefault("TK_CPU_STREAM_MB", "0")

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if importlib.util.find_spec("torch_tk") is None:  # plain `pytest tests/python`: use the checkout
    sys.path.insert(0, os.path.join(ROOT, "python"))

import torch  # noqa: E402

import torch_tk  # noqa: E402  (loads libtk: registers torch.ops.tk.*)


@pytest.fixture(scope="session")
def tk():
    """The op namespace torch.ops.tk."""
    return torch.ops.tk


@pytest.fixture(scope="session")
def lib_path():
    """Absolute path of the loaded libtk."""
    return os.path.abspath(torch_tk.library_path())


@pytest.fixture(scope="session")
def tkc(lib_path):
    """Path of the tkc built next to the loaded libtk."""
    path = os.path.join(os.path.dirname(lib_path), "tkc")
    if not os.path.exists(path):
        pytest.fail(f"no tkc next to {lib_path}: build the project first")
    return path


@pytest.fixture
def poisoned_outputs():
    """torch.empty fills NaN (floats) / the largest value (ints) meanwhile, so
    an element a kernel leaves unwritten shows. A module uses it with
    `pytestmark = pytest.mark.usefixtures("poisoned_outputs")`."""
    was = torch.are_deterministic_algorithms_enabled()
    fill = torch.utils.deterministic.fill_uninitialized_memory
    torch.use_deterministic_algorithms(True)
    torch.utils.deterministic.fill_uninitialized_memory = True
    yield
    torch.use_deterministic_algorithms(was)
    torch.utils.deterministic.fill_uninitialized_memory = fill
