#!/usr/bin/env python3
"""Side-by-side benchmark: tk vs the seed's PyTorch formulations (one process, one run).

    PYTHONPATH=python TK_LIBRARY=build/libtk.so python3 bench/bench_ops.py --json out/bench.json
Same as `python -m torch_tk bench`; the logic lives in python/torch_tk/bench.py.
"""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))

from torch_tk.bench import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
