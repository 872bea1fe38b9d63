#include "support/testlib.h"

int qt_failures;
int qt_checks;

int qt_finish(const char *suite)
{
    if (qt_checks == 0) {
        printf("%s: 0 passed, 1 failed (no check ran)\n", suite);
        return 1;
    }
    printf("%s: %d passed, %d failed\n", suite, qt_checks - qt_failures, qt_failures);
    return qt_failures ? 1 : 0;
}

int qt_skip(const char *suite, const char *why)
{
    printf("%s: skipped: %s; %d passed, %d failed\n", suite, why, qt_checks - qt_failures,
           qt_failures);
    return qt_failures ? 1 : QT_SKIP;
}

uint64_t qt_next(qt_rng *r)
{
    uint64_t z = (r->s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

int64_t qt_range(qt_rng *r, int64_t lo, int64_t hi)
{
    return lo + (int64_t)(qt_next(r) % (uint64_t)(hi - lo + 1));
}

float qt_uniform(qt_rng *r, float lo, float hi)
{
    return lo + (hi - lo) * (float)((qt_next(r) >> 40) * (1.0 / 16777216.0));
}
