/*
 * The trace through the command line: `qmoe gen` writes a case, `qmoe run --threads 2 --trace F`
 * runs it; F parses as JSON and both threads of the device have compute slices (the case has
 * enough row blocks for both). The output equals a single-threaded run's. Skipped (reported
 * as such by ctest) only in builds without the qmoe program.
 */
#define _DEFAULT_SOURCE
#include <limits.h>
#include <stdarg.h>
#include <stdlib.h>
#include <unistd.h>

#include "support/testlib.h"
#include "test_trace_json.h"

static char qmoe_bin[PATH_MAX], qmoe_cmd[2 * PATH_MAX], dir[PATH_MAX];

/* snprintf that fails the test instead of truncating */
static void fmt(char *buf, size_t size, const char *f, ...)
{
    va_list ap;
    va_start(ap, f);
    int n = vsnprintf(buf, size, f, ap);
    va_end(ap);
    CHECK(n >= 0 && (size_t)n < size);
}

/* Runs `qmoe run` on the case in dir, writing out<tag>.npy, with extra options. */
static int run_case(const char *tag, const char *extra)
{
    char cmd[8 * PATH_MAX];
    fmt(cmd, sizeof cmd,
             "%s run --x '%s/x.npy' --weight '%s/weight.npy' --weight-scale '%s/weight_scale.npy' "
             "--x-scale '%s/x_scale.npy' --group-list '%s/group_list.npy' --out '%s/out%s.npy' "
             "--out-scale '%s/out_scale%s.npy' %s 2> /dev/null",
             qmoe_cmd, dir, dir, dir, dir, dir, dir, tag, dir, tag, extra);
    return system(cmd);
}

/* Byte-identical .npy files whose data is not all zero, so that an operator that wrote nothing
 * cannot pass. */
static int same_nonzero_npy(const char *a, const char *b)
{
    size_t nx = 0, ny = 0;
    char *x = slurp_n(a, &nx), *y = slurp_n(b, &ny);
    int same = x && y && nx == ny && !memcmp(x, y, nx), nonzero = 0;
    /* qmoe writes version 1.0: the data starts after 10 bytes and the 2-byte header length */
    size_t data = nx >= 10 ? 10 + (unsigned char)x[8] + ((size_t)(unsigned char)x[9] << 8) : nx;
    for (size_t i = data; same && i < nx; i++) nonzero |= x[i] != 0;
    CHECK_MSG(same, "%s and %s differ (%zu and %zu bytes)", a, b, nx, ny);
    CHECK_MSG(nonzero, "%s holds no data or only zeros", a);
    free(x);
    free(y);
    return same && nonzero;
}

int main(void)
{
    char self[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    CHECK(n > 0);
    if (n <= 0) return qt_finish("test_trace_cli");
    self[n] = '\0';
    *strrchr(self, '/') = '\0';
    fmt(qmoe_bin, sizeof qmoe_bin, "%s/../tools/qmoe", self);
    if (access(qmoe_bin, X_OK)) return qt_skip("test_trace_cli", "no qmoe program in this build");
    /* cross builds run the program under the tests' emulator (tests/CMakeLists.txt) */
    const char *emu = getenv("QMOE_TEST_EMULATOR");
    fmt(qmoe_cmd, sizeof qmoe_cmd, "%s '%s'", emu ? emu : "", qmoe_bin);
    fmt(dir, sizeof dir, "%s/trace_cli_case", self);
    char cmd[4 * PATH_MAX], path[PATH_MAX + 32], other[PATH_MAX + 32];
    fmt(cmd, sizeof cmd, "%s gen --out '%s' --E 2 --M 160 --K 64 --N 128 --mode a8w8 > /dev/null",
             qmoe_cmd, dir);
    CHECK(system(cmd) == 0);
    fmt(path, sizeof path, "--threads 2 --trace '%s/trace.json'", dir);
    CHECK(run_case("2", path) == 0);
    CHECK(run_case("1", "--threads 1") == 0);
    fmt(path, sizeof path, "%s/trace.json", dir);
    char *text = slurp(path);
    CHECK(text && json_valid(text));
    CHECK(text && count_compute(text, 0, 0) >= 1 && count_compute(text, 0, 1) >= 1);
    free(text);
    for (int i = 0; i < 2; i++) { /* the output, then the output scale */
        const char *name = i ? "out_scale" : "out";
        fmt(path, sizeof path, "%s/%s1.npy", dir, name);
        fmt(other, sizeof other, "%s/%s2.npy", dir, name);
        same_nonzero_npy(path, other);
    }
    return qt_finish("test_trace_cli");
}
