"""What the bench/ scripts time calls with."""
import statistics
import time


def median_ms(fn, repeat: int) -> float:
    """The median of repeat timed calls of fn, in ms, after 0.3 s of warm-up."""
    end = time.perf_counter() + 0.3
    while time.perf_counter() < end:
        fn()
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return 1e3 * statistics.median(times)
