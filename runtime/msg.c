/* msg.c - the core's error-message helper, shared by the compiler driver
 * (cc.c), NVRTC (nvrtc.c) and the CUDA launcher (cuda.c). */
#include <stdarg.h>
#include <stdio.h>

#include "msg.h"

void tk_put(char *msg, size_t n, const char *fmt, ...) {
    if (!msg || n == 0) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, n, fmt, ap);
    va_end(ap);
}
