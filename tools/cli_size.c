/* Checked byte counts for the commands' size caps (cli_size.h). */
#include "cli_size.h"

#include <stdio.h>

int cli_mul(int64_t a, int64_t b, int64_t *out)
{
    if (a < 0 || b < 0 || __builtin_mul_overflow(a, b, out)) return -1;
    return 0;
}

void cli_bytes_add(cli_bytes *s, int64_t a, int64_t b, int64_t c)
{
    int64_t ab, abc;
    if (cli_mul(a, b, &ab) || cli_mul(ab, c, &abc) ||
        __builtin_add_overflow(s->total, (uint64_t)abc, &s->total))
        s->overflow = 1;
}

int cli_bytes_check(const cli_bytes *s, const char *what, int64_t max_gib, char *err, size_t len)
{
    if (s->overflow) {
        snprintf(err, len, "%s would take more than 2^64 bytes, more than --max-gib %lld", what, (long long)max_gib);
        return -1;
    }
    if (max_gib >= 0 && s->total > (uint64_t)max_gib << 30) {
        snprintf(err, len, "%s would take about %.2f GiB, more than --max-gib %lld", what,
                 (double)s->total / (double)(1u << 30), (long long)max_gib);
        return -1;
    }
    return 0;
}
