/*
 * The .npy reader of the command-line program (tools/npy.c) on arbitrary bytes: npy_parse on the
 * buffer and npy_load on the same bytes as a file must agree, never crash, never read outside
 * the input, never allocate more than the file can back (a refused file never raises the peak
 * memory by 64 MiB or more); npy_load_header (what `qmoe run` reads before phase one) agrees with
 * npy_load; an accepted array is self-consistent and survives a write (npy_save) and re-read
 * unchanged.
 */
#define _DEFAULT_SOURCE /* getpid under -std=c11 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "npy.h"

static void require(int ok, const char *what, const char *err)
{
    if (!ok) {
        fprintf(stderr, "fuzz_npy: %s (%s)\n", what, err ? err : "");
        abort();
    }
}

static char path_in[64], path_out[64];

enum { REFUSED_PEAK_KIB = 64 * 1024 };

/* The process's peak resident memory so far, in KiB (it only grows). */
static long peak_kib(void)
{
    struct rusage u;
    return getrusage(RUSAGE_SELF, &u) ? 0 : u.ru_maxrss;
}

static void write_file(const char *path, const uint8_t *data, size_t size)
{
    FILE *f = fopen(path, "wb");
    require(f && fwrite(data, 1, size, f) == size && fclose(f) == 0, "cannot write a temp file", path);
}

/* The parsed fields agree with each other and with the input. */
static void check_array(const npy_array *a, const uint8_t *buf, size_t len)
{
    require(a->ndim >= 0 && a->ndim <= NPY_MAX_DIMS, "rank out of range", NULL);
    int64_t count = 1;
    int empty = 0;
    for (int i = 0; i < a->ndim; i++) {
        require(a->shape[i] >= 0, "negative dimension accepted", NULL);
        empty |= a->shape[i] == 0;
    }
    /* (0, 2^40, 2^40) is an empty array, not an overflow */
    for (int i = 0; i < a->ndim && !empty; i++)
        require(!__builtin_mul_overflow(count, a->shape[i], &count), "count overflows", NULL);
    if (empty) count = 0;
    require(count == a->count, "count is not the product of the shape", NULL);
    require(a->nbytes == (size_t)count * npy_itemsize(a->dtype), "nbytes != count * itemsize", NULL);
    if (buf) {
        require((const uint8_t *)a->data + a->nbytes == buf + len, "data does not end the input", NULL);
        require((const uint8_t *)a->data >= buf + 10, "data overlaps the preamble", NULL);
    }
}

static void remove_temp_files(void)
{
    unlink(path_in);
    unlink(path_out);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char err[NPY_ERR_LEN], err2[NPY_ERR_LEN];
    if (!path_in[0]) {
        snprintf(path_in, sizeof path_in, "/tmp/qmoe-fuzz-npy-%d-in.npy", (int)getpid());
        snprintf(path_out, sizeof path_out, "/tmp/qmoe-fuzz-npy-%d-out.npy", (int)getpid());
        atexit(remove_temp_files);
    }
    err[0] = err2[0] = '\0';
    npy_array a;
    int rc = npy_parse(data, size, &a, err);
    if (rc) require(rc == -1 && err[0] && strlen(err) < NPY_ERR_LEN, "failure without a reason", err);
    else check_array(&a, data, size);

    /* The file reader gives the same answer on the same bytes. */
    write_file(path_in, data, size);
    npy_array b, h;
    long peak_before = peak_kib();
    int rc2 = npy_load(path_in, &b, err2);
    require(rc == rc2, "npy_parse and npy_load disagree", rc ? err : err2);
    if (rc2)
        require(peak_kib() - peak_before < REFUSED_PEAK_KIB,
                "a refused file raised the peak memory by 64 MiB or more", err2);
    /* the header alone: refused whenever the whole file is, with the same shape otherwise
     * (a header-only refusal of a file npy_load accepts would be a bug too) */
    char err3[NPY_ERR_LEN] = "";
    int rc3 = npy_load_header(path_in, &h, err3);
    if (!rc2) {
        require(rc3 == 0 && h.data == NULL && h.dtype == b.dtype && h.ndim == b.ndim &&
                    h.count == b.count && h.nbytes == b.nbytes,
                "npy_load_header disagrees with npy_load", err3);
    } else if (rc3 == 0) {
        /* only a file whose data part is wrong passes the header check: a regular file's size
         * is checked too, so the header's nbytes differs from what follows it */
        require(h.data == NULL, "npy_load_header returned data", NULL);
    }
    if (!rc2) {
        check_array(&b, NULL, 0);
        require(a.dtype == b.dtype && a.ndim == b.ndim && a.count == b.count &&
                    !memcmp(a.shape, b.shape, sizeof a.shape[0] * (size_t)a.ndim) &&
                    !memcmp(a.data, b.data, a.nbytes),
                "npy_load read something else than npy_parse", NULL);
        /* Write and read back. */
        require(npy_save(path_out, &b, err2) == 0, "npy_save failed on a parsed array", err2);
        npy_array c;
        require(npy_load(path_out, &c, err2) == 0, "cannot re-read what npy_save wrote", err2);
        require(c.dtype == b.dtype && c.ndim == b.ndim && c.count == b.count &&
                    !memcmp(c.data, b.data, b.nbytes),
                "npy_save + npy_load changed the array", NULL);
        npy_free(&c);
        npy_free(&b);
    } else {
        require(err2[0] != '\0', "npy_load failed without a reason", NULL);
    }
    return 0;
}
