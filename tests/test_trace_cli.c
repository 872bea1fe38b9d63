/*
 * The trace through the command line: `qmoe gen` writes a case, `qmoe run --threads 2 --trace F`
 * runs it; F parses as JSON and both threads of the device have compute slices (the case has
 * enough row blocks for both). The output equals a single-threaded run's. Skipped (with a
 * message) only in builds without the qmoe program.
 */
#define _DEFAULT_SOURCE
#include <limits.h>
#include <stdarg.h>
#include <unistd.h>

#include "support/testlib.h"
#include "test_trace_json.h"

static char qmoe_bin[PATH_MAX], dir[PATH_MAX];

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
             "'%s' run --x '%s/x.npy' --weight '%s/weight.npy' --weight-scale '%s/weight_scale.npy' "
             "--x-scale '%s/x_scale.npy' --group-list '%s/group_list.npy' --out '%s/out%s.npy' "
             "--out-scale '%s/out_scale%s.npy' %s 2> /dev/null",
             qmoe_bin, dir, dir, dir, dir, dir, dir, tag, dir, tag, extra);
    return system(cmd);
}

static int same_file(const char *a, const char *b)
{
    char *x = slurp(a), *y = slurp(b);
    int same = x && y && strlen(x) == strlen(y) && !memcmp(x, y, strlen(x));
    free(x);
    free(y);
    return same;
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
    if (access(qmoe_bin, X_OK)) {
        printf("test_trace_cli: skipped, no %s in this build\n", qmoe_bin);
        return 0;
    }
    fmt(dir, sizeof dir, "%s/trace_cli_case", self);
    char cmd[4 * PATH_MAX], path[PATH_MAX + 32], other[PATH_MAX + 32];
    fmt(cmd, sizeof cmd, "'%s' gen --out '%s' --E 2 --M 160 --K 64 --N 128 --mode a8w8 > /dev/null",
             qmoe_bin, dir);
    CHECK(system(cmd) == 0);
    fmt(path, sizeof path, "--threads 2 --trace '%s/trace.json'", dir);
    CHECK(run_case("2", path) == 0);
    CHECK(run_case("1", "--threads 1") == 0);
    fmt(path, sizeof path, "%s/trace.json", dir);
    char *text = slurp(path);
    CHECK(text && json_valid(text));
    CHECK(text && count_compute(text, 0, 0) >= 1 && count_compute(text, 0, 1) >= 1);
    free(text);
    fmt(path, sizeof path, "%s/out1.npy", dir);
    fmt(other, sizeof other, "%s/out2.npy", dir);
    CHECK(same_file(path, other));
    return qt_finish("test_trace_cli");
}
