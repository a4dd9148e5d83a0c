/* msg.h - internal: formatting an error message into a caller's buffer. */
#ifndef TK_MSG_H
#define TK_MSG_H

#include <stddef.h>

/* printf into msg (size n, always terminated, truncated to fit); a NULL
 * msg or n == 0 writes nothing. */
void tk_put(char *msg, size_t n, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;

#endif
