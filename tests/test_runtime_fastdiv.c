/* Fast division constants: exact against the hardware divide for every dividend below 2^16 and
 * every divisor below 2^12, and for edge and random dividends up to 2^32 - 1 with divisors up to
 * 2^31. */
#include "core/fastdiv.h"
#include "support/testlib.h"

static int check_one(uint32_t n, const qmoe_fastdiv_t *f)
{
    return qmoe_fastdiv(n, f) == n / f->d && qmoe_fastmod(n, f) == n % f->d;
}

int main(void)
{
    long bad = 0;
    for (uint32_t d = 1; d < 4096; d++) {
        qmoe_fastdiv_t f = qmoe_fastdiv_init(d);
        for (uint32_t n = 0; n < 65536; n++) bad += !check_one(n, &f);
    }
    CHECK_MSG(bad == 0, "%ld small quotients wrong", bad);

    qt_rng r = {42};
    bad = 0;
    uint32_t divisors[] = {1, 2, 3, 7, 10, 641, 65535, 65536, 65537, 1000003, 0x7FFFFFFFu, 0x80000000u};
    for (int i = 0; i < 20000; i++) {
        uint32_t d = i < 12 ? divisors[i] : (uint32_t)qt_range(&r, 1, 0x80000000ll);
        qmoe_fastdiv_t f = qmoe_fastdiv_init(d);
        uint32_t edges[] = {0, 1, d - 1, d, d + 1, 2 * d - 1, 0xFFFFFFFFu, 0xFFFFFFFEu, 0x80000000u};
        for (int j = 0; j < 9; j++) bad += !check_one(edges[j], &f);
        for (int j = 0; j < 50; j++) bad += !check_one((uint32_t)qt_next(&r), &f);
    }
    CHECK_MSG(bad == 0, "%ld large quotients wrong", bad);
    return qt_finish("test_runtime_fastdiv");
}
