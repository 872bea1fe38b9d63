/* The .npy reader and writer of the qmoe program: hand-built images, every rejection rule,
 * round trips through files, and every truncation of a valid image. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "npy.h"
#include "support/testlib.h"

static unsigned char image[1 << 16];

/* A .npy image: preamble of `major`.`minor`, the dict text as given, then `data_len` bytes. */
static size_t build(int major, int minor, const char *dict, size_t data_len)
{
    size_t hlen = strlen(dict), prefix = major == 1 ? 10 : 12;
    memcpy(image, "\x93NUMPY", 6);
    image[6] = (unsigned char)major;
    image[7] = (unsigned char)minor;
    for (size_t i = 0; i < prefix - 8; i++) image[8 + i] = (unsigned char)(hlen >> (8 * i));
    memcpy(image + prefix, dict, hlen);
    for (size_t i = 0; i < data_len; i++) image[prefix + hlen + i] = (unsigned char)(i * 7 + 1);
    return prefix + hlen + data_len;
}

static int exists(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (f) fclose(f);
    return f != NULL;
}

static int parses(size_t len, npy_array *a)
{
    char err[NPY_ERR_LEN] = "";
    int rc = npy_parse(image, len, a, err);
    CHECK_MSG(rc == 0, "unexpected error: %s", err);
    return rc == 0;
}

/* Expects a rejection whose message contains `needle`. */
static void rejects(size_t len, const char *needle, const char *what)
{
    char err[NPY_ERR_LEN] = "";
    npy_array a;
    int rc = npy_parse(image, len, &a, err);
    CHECK_MSG(rc == -1, "%s: accepted", what);
    CHECK_MSG(strstr(err, needle) != NULL, "%s: message '%s' lacks '%s'", what, err, needle);
}

static void test_valid_headers(void)
{
    npy_array a;
    size_t n = build(1, 0, "{'descr': '<i4', 'fortran_order': False, 'shape': (2, 3), }   \n", 24);
    if (parses(n, &a)) {
        CHECK(a.dtype == NPY_INT32 && a.ndim == 2 && a.shape[0] == 2 && a.shape[1] == 3);
        CHECK(a.count == 6 && a.nbytes == 24 && a.owned == NULL);
        CHECK((unsigned char *)a.data == image + n - 24);
    }
    n = build(2, 0, "{\"shape\":(5,),\"fortran_order\":False,\"descr\":\"|i1\"}\n", 5);
    if (parses(n, &a)) CHECK(a.dtype == NPY_INT8 && a.ndim == 1 && a.shape[0] == 5 && a.count == 5);
    n = build(3, 0, "{'descr': '<f2', 'fortran_order': False, 'shape': ()}", 2);
    if (parses(n, &a))
        CHECK(a.dtype == NPY_FLOAT16 && a.ndim == 0 && a.count == 1 && a.nbytes == 2);
    n = build(1, 0, "{ 'descr' : '<u8' ,\n 'fortran_order' : False ,\t'shape' : ( 0 , 7 , ) , }",
              0);
    if (parses(n, &a)) CHECK(a.dtype == NPY_UINT64 && a.ndim == 2 && a.count == 0 && a.nbytes == 0);
    static const struct {
        const char *descr;
        npy_dtype dtype;
        size_t size;
    } kinds[] = {
        {"|u1", NPY_UINT8, 1},   {"<i1", NPY_INT8, 1},   {"<i8", NPY_INT64, 8},
        {"<f4", NPY_FLOAT32, 4}, {"<u2", NPY_UINT16, 2},
    };
    for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++) {
        char dict[128];
        snprintf(dict, sizeof dict, "{'descr': '%s', 'fortran_order': False, 'shape': (3,), }",
                 kinds[i].descr);
        n = build(1, 0, dict, 3 * kinds[i].size);
        if (parses(n, &a)) CHECK_MSG(a.dtype == kinds[i].dtype, "%s", kinds[i].descr);
    }
}

static void test_rejected_headers(void)
{
    const char *ok_tail = "'fortran_order': False, 'shape': (2,), }";
    char dict[256];
    size_t n = build(1, 0, "{'descr': '<i4', 'fortran_order': False, 'shape': (2,), }", 8);
    image[0] = 0x92;
    rejects(n, "magic", "bad magic");
    rejects(build(4, 0, "{'descr': '<i4', 'fortran_order': False, 'shape': (2,), }", 8), "version",
            "v4.0");
    rejects(build(1, 1, "{'descr': '<i4', 'fortran_order': False, 'shape': (2,), }", 8), "version",
            "v1.1");
    n = build(2, 0, "{}", 0);
    image[10] = 0x20; /* header length 2 + 2 MiB */
    rejects(n, "limit", "huge header length");
    rejects(5, "magic", "five bytes");
    n = build(1, 0, "{'descr': '<i4', 'fortran_order': False, 'shape': (2,), }", 8);
    rejects(30, "truncated header", "cut header");
    rejects(build(1, 0, "{'descr': '<i4', 'fortran_order': True, 'shape': (2,), }", 8), "fortran",
            "fortran");
    rejects(build(1, 0, "{'descr': '>i4', 'fortran_order': False, 'shape': (2,), }", 8),
            "big-endian", ">i4");
    rejects(build(1, 0, "{'descr': '<f8', 'fortran_order': False, 'shape': (2,), }", 16),
            "not supported", "<f8");
    rejects(build(1, 0, "{'descr': '|i4', 'fortran_order': False, 'shape': (2,), }", 8),
            "not supported", "|i4");
    rejects(build(1, 0, "{'descr': '', 'fortran_order': False, 'shape': (2,), }", 8), "empty",
            "empty descr");
    rejects(build(1, 0, "{'fortran_order': False, 'shape': (2,), }", 8), "keys", "no descr");
    rejects(
        build(1, 0, "{'descr': '<i4', 'descr': '<i4', 'fortran_order': False, 'shape': (2,)}", 8),
        "twice", "duplicate key");
    rejects(build(1, 0, "{'descr': '<i4', 'fortran_order': False, 'shape': (2,), 'x': 1}", 8),
            "unexpected key", "extra key");
    rejects(build(1, 0, "{'descr': '<i4', 'fortran_order': False, 'shape': (2), }", 8),
            "trailing ','", "(2) is not a tuple");
    rejects(build(1, 0, "{'descr': '<i4', 'fortran_order': False, 'shape': (-2,), }", 8),
            "non-negative", "negative dim");
    rejects(
        build(1, 0, "{'descr': '<i4', 'fortran_order': False, 'shape': (1,1,1,1,1,1,1,1,1), }", 4),
        "more than 8", "nine dims");
    rejects(build(1, 0,
                  "{'descr': '<i4', 'fortran_order': False, 'shape': (99999999999999999999,), }",
                  0),
            "overflows", "dim overflow");
    rejects(build(1, 0,
                  "{'descr': '<i4', 'fortran_order': False, 'shape': (4294967296, 4294967296), }",
                  0),
            "overflows", "count overflow");
    rejects(build(1, 0,
                  "{'descr': '<i4', 'fortran_order': False, 'shape': (4611686018427387904,), }", 0),
            "overflows", "byte overflow");
    rejects(build(1, 0, "{'descr': '<i4', 'fortran_order': False, 'shape': (2,), } x", 8),
            "only spaces", "garbage after the dict");
    rejects(build(1, 0, "{'descr': '<i4', 'fortran_order': False, 'shape': (2,), ", 8),
            "quoted string", "unterminated dict");
    rejects(build(1, 0, "{'descr': '<i4", 0), "closing quote", "unterminated string");
    rejects(build(1, 0, "{'descr': '<i\\4', 'fortran_order': False, 'shape': (2,), }", 8), "ASCII",
            "escape");
    rejects(build(1, 0, "{'descr': '<i4', 'fortran_order': Maybe, 'shape': (2,), }", 8),
            "True or False", "bad bool");
    rejects(build(1, 0, "['descr', '<i4']", 8), "'{'", "a list");
    rejects(build(1, 0, "{}", 0), "keys", "empty dict");
    snprintf(dict, sizeof dict, "{'descr': '<i4' %s", ok_tail);
    rejects(build(1, 0, dict, 8), "','", "missing comma");
    snprintf(dict, sizeof dict,
             "{'descr': '<\xc3\xa9"
             "4', %s",
             ok_tail);
    rejects(build(3, 0, dict, 8), "ASCII", "non-ASCII");
}

static void test_data_length(void)
{
    const char *dict = "{'descr': '<i8', 'fortran_order': False, 'shape': (3,), }";
    size_t n = build(1, 0, dict, 24);
    rejects(n - 1, "truncated data", "one byte short");
    rejects(n - 24, "truncated data", "no data");
    n = build(1, 0, dict, 25);
    rejects(n, "unexpected bytes", "one byte extra");
    /* every prefix of a valid image is rejected cleanly */
    n = build(2, 0, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 2), }\n", 16);
    int all_rejected = 1;
    for (size_t len = 0; len < n; len++) {
        char err[NPY_ERR_LEN];
        npy_array a;
        all_rejected &= npy_parse(image, len, &a, err) == -1 && err[0] != '\0';
    }
    CHECK(all_rejected);
}

/* npy_write: the array as the path opens (what outfile.c hands a writer). */
static void test_write(const npy_array *a)
{
    char err[NPY_ERR_LEN];
    npy_array b;
    remove("npy_test_d.npy");
    CHECK_MSG(npy_write("npy_test_d.npy", a, err) == 0, "%s", err);
    CHECK_MSG(npy_load("npy_test_d.npy", &b, err) == 0, "%s", err);
    CHECK(b.dtype == a->dtype && b.nbytes == a->nbytes && !memcmp(a->data, b.data, a->nbytes));
    npy_free(&b);
    remove("npy_test_d.npy");
    CHECK(npy_write("no_such_folder/npy_test_d.npy", a, err) == -1 && strstr(err, "No such file"));
}

static void test_files(void)
{
    char err[NPY_ERR_LEN];
    npy_array a, b;
    int64_t shape[3] = {2, 3, 5};
    CHECK(npy_alloc(&a, NPY_FLOAT16, 3, shape, err) == 0);
    for (int i = 0; i < 30; i++) ((uint16_t *)a.data)[i] = (uint16_t)(i * 977);
    CHECK(npy_save("npy_test_a.npy", &a, err) == 0);
    CHECK_MSG(npy_load("npy_test_a.npy", &b, err) == 0, "%s", err);
    CHECK(b.dtype == NPY_FLOAT16 && b.ndim == 3 && b.shape[2] == 5 && b.nbytes == 60);
    CHECK(b.data && memcmp(a.data, b.data, 60) == 0);
    CHECK(((uintptr_t)b.data & 63) == 0);
    npy_free(&b);

    /* the header pads the data to 64 bytes and ends in a newline, as numpy writes it */
    FILE *f = fopen("npy_test_a.npy", "rb");
    size_t len = f ? fread(image, 1, sizeof image, f) : 0;
    if (f) fclose(f);
    size_t hsize = (size_t)image[8] + 10 + ((size_t)image[9] << 8);
    CHECK(len == hsize + 60 && hsize % 64 == 0 && image[hsize - 1] == '\n' && image[6] == 1);

    /* a truncated file and a file with extra bytes */
    f = fopen("npy_test_b.npy", "wb");
    if (f) {
        fwrite(image, 1, len - 1, f);
        fclose(f);
    }
    CHECK(npy_load("npy_test_b.npy", &b, err) == -1 && strstr(err, "truncated data"));
    f = fopen("npy_test_b.npy", "wb");
    if (f) {
        fwrite(image, 1, len, f);
        fputc(0, f);
        fclose(f);
    }
    CHECK(npy_load("npy_test_b.npy", &b, err) == -1 && strstr(err, "unexpected bytes"));
    CHECK(npy_load("npy_test_missing.npy", &b, err) == -1 && strstr(err, "No such file"));
    CHECK(npy_load(".", &b, err) == -1);

    /* a header promising 2^50 bytes in a small file is truncated, not out of memory */
    len = build(1, 0, "{'descr': '|i1', 'fortran_order': False, 'shape': (1125899906842624,), }", 16);
    f = fopen("npy_test_b.npy", "wb");
    if (f) {
        fwrite(image, 1, len, f);
        fclose(f);
    }
    CHECK_MSG(npy_load("npy_test_b.npy", &b, err) == -1 && strstr(err, "truncated data"), "%s", err);

    /* a staged file is a temporary next to the target, removed on discard */
    npy_staged s;
    remove("npy_test_c.npy");
    CHECK(npy_stage("npy_test_c.npy", &a, &s, err) == 0);
    CHECK(!exists("npy_test_c.npy") && exists(s.tmp_path));
    char tmp[256];
    snprintf(tmp, sizeof tmp, "%s", s.tmp_path);
    npy_discard(&s);
    CHECK(s.tmp_path == NULL && !exists("npy_test_c.npy") && !exists(tmp));
    CHECK(npy_save("no_such_folder/npy_test_c.npy", &a, err) == -1);
    test_write(&a);
    npy_free(&a);

    int64_t huge[2] = {INT64_MAX / 2, 4};
    CHECK(npy_alloc(&a, NPY_INT8, 2, huge, err) == -1 && strstr(err, "overflow"));
    remove("npy_test_a.npy");
    remove("npy_test_b.npy");
}

int main(void)
{
    test_valid_headers();
    test_rejected_headers();
    test_data_length();
    test_files();
    return qt_finish("cli_npy");
}
