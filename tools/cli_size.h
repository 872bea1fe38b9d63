/*
 * What a command will allocate or write, in bytes: products summed with overflow checks, and
 * refused over the command's --max-gib before anything is allocated (tools/cli_size.c).
 */
#ifndef QMOE_TOOLS_CLI_SIZE_H
#define QMOE_TOOLS_CLI_SIZE_H

#include <stddef.h>
#include <stdint.h>

typedef struct cli_bytes {
    uint64_t total;
    int overflow; /* a product or the sum left 64 bits (or a factor was negative) */
} cli_bytes;

/* Adds a * b * c bytes (factors >= 0); an overflow sticks. */
void cli_bytes_add(cli_bytes *s, int64_t a, int64_t b, int64_t c);

/* a * b with overflow checked: 0 and *out, or -1 (a, b >= 0). */
int cli_mul(int64_t a, int64_t b, int64_t *out);

/* 0 when s is at most max_gib GiB; else -1 with err (len bytes): "WHAT would take about X GiB,
 * more than --max-gib N" (or "more than 2^64 bytes"). */
int cli_bytes_check(const cli_bytes *s, const char *what, int64_t max_gib, char *err, size_t len);

#endif
