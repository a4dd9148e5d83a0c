"""The seed's two examples, run through tk and checked against PyTorch.

    python -m torch_tk demo [--out DIR] [--repeat N] [--full-size]

1. rwkv_forward at B=32, C=768, T=768 float32 vs eps + F.conv1d.
2. brick_pad at the seed configuration (a 48x32 gradient tile repeated over
   a 4144x8224 image with a stagger of 10); must equal the seed's torch_pad
   bit for bit (max error 0). The wall is written to DIR/brick_wall.png in
   the seed's colours, v -> RGB (sin(pi v), cos(pi v / 2), 0), at 1/4 size
   (each pixel the mean colour of a 4x4 block; --full-size writes all pixels),
   and its top-left 240x320 corner at full size to DIR/brick_wall_detail.png.
Both run on the CPU, and on CUDA when torch.cuda.is_available(). Each
implementation is timed (median of N runs after a warm-up; 3N for all but
the seconds-long torch_pad, since single calls on a shared machine jump by
half at random). Exit status 1 if a check fails or an op fails.
"""

from __future__ import annotations

import argparse
import math
import os

import torch

from . import reference as ref
from .bench import rel_err, time_median


def brick_wall_rgb(image: torch.Tensor, scale: int = 1) -> torch.Tensor:
    """(H, W) values in [0, 1) -> (H // scale, W // scale, 3) uint8 in the
    seed's colours. With scale > 1 each output pixel is the mean colour of a
    scale x scale block (a box filter): keeping every scale-th pixel instead
    aliases the 48x32 bricks into a moire pattern."""
    v = image.to(torch.float32)
    rgb = torch.stack((torch.sin(math.pi * v), torch.cos(math.pi * v / 2), torch.zeros_like(v)), dim=0)
    if scale > 1:
        h, w = v.shape[0] // scale * scale, v.shape[1] // scale * scale
        rgb = torch.nn.functional.avg_pool2d(rgb[:, :h, :w], scale)
    return (rgb.clamp(0, 1) * 255).round().to(torch.uint8).permute(1, 2, 0)


def write_png(image: torch.Tensor, path: str, scale: int = 1) -> str:
    """Writes image as an RGB PNG, shrunk scale times by averaging; returns a description."""
    from PIL import Image

    pixels = brick_wall_rgb(image.cpu(), scale).contiguous().numpy()
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    Image.fromarray(pixels).save(path)
    size = "full size" if scale == 1 else f"1/{scale} size, each pixel the mean of {scale}x{scale}"
    return f"{path} ({pixels.shape[1]}x{pixels.shape[0]}, {size})"


def demo_cases(device: str):
    """[(op, [(implementation name, fn)])], tk first, then its reference.
    rwkv runs first: torch_pad's ~4 GB of temporaries slowed the calls timed
    in the seconds after them (rwkv_forward 55 -> 80-97 ms on this VM, whose
    host takes back freed memory), whichever op that was."""
    s, r = ref.SEED, ref.RWKV_SEED
    tile = ref.seed_tile(device)
    w, k = ref.rwkv_inputs(r.B, r.C, r.T, device=device)
    return [
        ("rwkv_forward", [
            ("tk", lambda: torch.ops.tk.rwkv_forward(w, k, r.eps)),
            ("F.conv1d", lambda: ref.rwkv_conv1d(w, k, r.eps)),
        ]),
        ("brick_pad", [
            ("tk", lambda: torch.ops.tk.brick_pad(tile, s.pw, s.ph, s.stagger)),
            ("torch_pad", lambda: ref.torch_pad(tile, s.pw, s.ph, s.stagger).reshape(s.H, s.W)),
        ]),
    ]


def error_of(op: str, got, want) -> tuple[str, float, bool]:
    """(error text, value, ok): brick_pad must be bit-equal, rwkv within float32 accuracy."""
    if op == "brick_pad":
        err = 0.0 if torch.equal(got, want) else (got - want).abs().max().item()
        return f"max abs {err:.3g}", err, err == 0.0 and got.shape == want.shape
    err = rel_err(got, want)
    return f"max rel {err:.2g}", err, err < 1e-5


def run_device(device: str, repeat: int, log):
    """Rows for one device, plus the tk brick wall (or None) and whether all passed."""
    rows, wall, ok = [], None, True
    for op, impls in demo_cases(device):
        results = {}
        for impl, fn in impls:
            try:
                slow = op == "brick_pad" and impl == impls[-1][0]   # torch_pad: seconds a call on a CPU
                med, _, out = time_median(fn, device, repeat if slow else 3 * repeat)
                results[impl] = (med, out)
            except RuntimeError as e:  # e.g. no CUDA kernel yet: report and go on
                log(f"{op} {impl} on {device} failed: {str(e).splitlines()[0]}")
                results[impl] = (None, None)
                ok = False
        ref_name = impls[-1][0]
        ref_ms, ref_out = results[ref_name]
        for impl, _ in impls:
            med, out = results[impl]
            if med is None:
                rows.append((op, impl, device, "failed", "", ""))
                continue
            speed = f"{ref_ms / med:.2f}x" if ref_ms else ""
            err_text = ""
            if impl != ref_name and ref_out is not None:
                err_text, _, passed = error_of(op, out, ref_out)
                if not passed:
                    err_text += "  MISMATCH"
                    ok = False
            elif impl == ref_name:
                err_text = "(reference)"
            rows.append((op, impl, device, f"{med * 1e3:.2f}", speed, err_text))
        if op == "brick_pad" and results["tk"][1] is not None:
            wall = results["tk"][1]
    return rows, wall, ok


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m torch_tk demo", description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="out", help="folder for brick_wall.png (default: out)")
    ap.add_argument("--repeat", type=int, default=3,
                    help="timed runs of torch_pad (median); the other implementations 3x as many")
    ap.add_argument("--full-size", action="store_true", help="write the PNG at full 4144x8224 size")
    args = ap.parse_args(argv)

    import torch_tk

    def log(msg):
        print(msg, flush=True)

    log(f"tk demo: library {torch_tk.library_path()}, torch {torch.__version__}, "
        f"{torch.get_num_threads()} CPU threads")
    devices = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
    rows, all_ok, wall = [], True, None
    for device in devices:
        log(f"running on {device} (warm-up + {3 * args.repeat} timed runs per implementation, "
            f"{args.repeat} of torch_pad) ...")
        dev_rows, dev_wall, ok = run_device(device, args.repeat, log)
        rows += dev_rows
        all_ok &= ok
        if wall is None and dev_wall is not None:
            wall = dev_wall

    header = ("op", "implementation", "device", "time ms", "speedup", "max error")
    widths = [max(len(str(r[i])) for r in rows + [header]) for i in range(len(header))]
    log("")
    for i, r in enumerate([header] + rows):
        log("  ".join(str(c).rjust(wd) if j in (3, 4) else str(c).ljust(wd)
                      for j, (c, wd) in enumerate(zip(r, widths))).rstrip())
        if i == 0:
            log("  ".join("-" * wd for wd in widths))
    log("speedup = reference time / time (median); max error vs the reference on the same device")

    if wall is not None:
        path = os.path.join(args.out, "brick_wall.png")
        log("\nwrote " + write_png(wall, path, 1 if args.full_size else 4))
        detail = os.path.join(args.out, "brick_wall_detail.png")  # a few bricks, every pixel
        log("wrote " + write_png(wall[:240, :320], detail) + ", the top-left corner")
    log("\nall checks passed" if all_ok else "\nSOME CHECKS FAILED")
    return 0 if all_ok else 1
