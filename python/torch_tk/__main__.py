"""Command line: `python -m torch_tk {demo,bench,info,precompile} [...]`."""

import sys

USAGE = """usage: python -m torch_tk {demo,bench,info,precompile} [options]

  demo   run the seed's two examples through tk, check them against PyTorch,
         time both, write out/brick_wall.png   (python -m torch_tk demo -h)
  bench  side-by-side benchmark, optional JSON  (python -m torch_tk bench -h)
  info   the NVRTC and CUDA driver tk finds, its kernel cache and what is in it
  precompile --arch sm_90 [--arch sm_80 ...]
         fill the kernel cache ahead of time, no GPU needed (for deployment)
"""


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(USAGE, end="")
        return 0 if argv else 2
    command, rest = argv[0], argv[1:]
    if command == "demo":
        from .demo import main as run
    elif command == "bench":
        from .bench import main as run
    elif command == "info":
        from .gpu import main_info as run
    elif command == "precompile":
        from .gpu import main_precompile as run
    else:
        print(f"python -m torch_tk: unknown command '{command}'\n\n{USAGE}", end="", file=sys.stderr)
        return 2
    return run(rest)


if __name__ == "__main__":
    sys.exit(main())
