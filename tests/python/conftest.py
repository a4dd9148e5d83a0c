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
