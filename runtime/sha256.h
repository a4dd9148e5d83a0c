/* sha256.h - SHA-256 (FIPS 180-4), enough for kernel cache keys and file
 * checksums. Incremental: init, update any number of times, final. */
#ifndef TK_SHA256_H
#define TK_SHA256_H

#include <stddef.h>
#include <stdint.h>

#define TK_SHA256_SIZE 32

typedef struct tk_sha256 {
    uint32_t h[8];
    uint64_t nbytes;        /* message length so far */
    unsigned char block[64];
    size_t nblock;          /* bytes waiting in block */
} tk_sha256;

void tk_sha256_init(tk_sha256 *s);
void tk_sha256_update(tk_sha256 *s, const void *data, size_t n);
void tk_sha256_final(tk_sha256 *s, unsigned char out[TK_SHA256_SIZE]);
/* The digest of one buffer. */
void tk_sha256_of(const void *data, size_t n, unsigned char out[TK_SHA256_SIZE]);
/* 64 lowercase hex digits and a NUL. */
void tk_sha256_hex(const unsigned char digest[TK_SHA256_SIZE], char out[2 * TK_SHA256_SIZE + 1]);

#endif
