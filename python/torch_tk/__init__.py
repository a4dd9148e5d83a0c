"""torch_tk: operators written as tk specs (ops/*.tk), compiled by the tk
spec compiler and registered as torch.ops.tk.<name>.

    import torch, torch_tk
    out = torch_tk.ops.brick_pad(torch.rand(48, 32), 4, 2, 10)   # (52, 40)

Ops from spec text at run time: torch_tk.kernel(text) / torch_tk.load(path)
(torch_tk.runtime, docs/runtime.md).

Importing the package loads libtk.so (see torch_tk._lib for where it looks).
"""
import os

import torch

from ._lib import library_path
from ._lib import load as _load_library
from .memory import cpu_cache_info, empty_cache
from .runtime import SpecError, kernel, load, runtime_kernels

__version__ = "0.1.0"
__all__ = ["ops", "kernel", "load", "SpecError", "runtime_kernels", "library_path", "cpu_cache_info", "empty_cache",
           "cmake_prefix_path", "__version__"]

#: For C++ programs built against an installed package: CMake finds the tk
#: package (find_package(tk CONFIG), target tk::tk) under this folder, its
#: share/cmake/tk. Pass it as -DCMAKE_PREFIX_PATH (examples/cpp_load).
cmake_prefix_path = os.path.dirname(os.path.abspath(__file__))

_load_library()

from . import compile_cache as _compile_cache  # noqa: E402

_compile_cache.note_library(library_path())   # torch.compile's disk caches see which libtk (torch_tk.compile_cache)

from . import batching as _batching  # noqa: E402  (needs the ops loaded)
from . import specinfo as _specinfo  # noqa: E402

_batching.register(_specinfo.builtin_ops().values())   # torch.func.vmap rules (torch_tk.batching)

#: The operator namespace: torch_tk.ops.rwkv_forward is torch.ops.tk.rwkv_forward.
ops = torch.ops.tk
