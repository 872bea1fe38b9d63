/* The safetensors reader of `qmoe moe run` (tools/safetensors_read.c) against the rules of
 * docs/moe-layer.md "Checkpoint rules": hand-written headers for each rule (the same hostile
 * files tests/cli/test_checkpoint_rules.py gives both readers), and a header of 400k tensors
 * (about 30 MB), which the old pairwise duplicate check took many minutes over (ctest's
 * timeout for this test is what catches a reader that is not n log n). */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "safetensors_read.h"
#include "support/testlib.h"

static uint8_t data[256];

/* Parses `json` against a data section of `len` bytes; the error text (or "") in err. */
static int parse(const char *json, uint64_t len, str_file *f, char *err)
{
    memset(f, 0, sizeof *f);
    err[0] = 0;
    return str_parse_header(json, strlen(json), data, len, f, err);
}

static void accepts(const char *json, uint64_t len, size_t tensors)
{
    str_file f;
    char err[STR_ERR_LEN];
    int rc = parse(json, len, &f, err);
    CHECK_MSG(rc == 0, "refused %s: %s", json, err);
    if (!rc) {
        CHECK(f.n == tensors);
        for (size_t k = 0; k < f.n; k++) CHECK(str_find(&f, f.tensors[k].name) == &f.tensors[k]);
        CHECK(str_find(&f, "absent") == NULL);
        str_close(&f);
    }
}

static void refuses(const char *json, uint64_t len, const char *needle)
{
    str_file f;
    char err[STR_ERR_LEN];
    int rc = parse(json, len, &f, err);
    CHECK_MSG(rc != 0, "accepted %s", json);
    if (rc) {
        CHECK_MSG(strstr(err, needle) != NULL, "refused %s with \"%s\", expected \"%s\"", json, err, needle);
        CHECK(f.n == 0 && f.tensors == NULL && f.meta == NULL && f.by_name == NULL);
    } else {
        str_close(&f);
    }
}

#define T(name, dtype, shape, b, e) "\"" name "\":{\"dtype\":\"" dtype "\",\"shape\":" shape ",\"data_offsets\":[" #b "," #e "]}"

static void rules(void)
{
    accepts("{}", 0, 0);
    accepts("{" T("a", "F32", "[2]", 0, 8) "," T("b", "I8", "[3]", 8, 11) "}", 11, 2);
    /* empty tensors anywhere in the tiling, two at one offset */
    accepts("{" T("e", "F32", "[0]", 0, 0) "," T("a", "F32", "[2]", 0, 8) "," T("z", "F16", "[4,0]", 8, 8) ","
            T("y", "U8", "[0]", 8, 8) "}", 8, 4);
    accepts("{\"__metadata__\":{\"k\":\"v\",\"j\":\"w\"}," T("a", "F32", "[1]", 0, 4) "}", 4, 1);
    /* a router [2^40, 0] holds no bytes: the reader takes it (the layer rules refuse it) */
    accepts("{" T("r", "F32", "[1099511627776,0]", 0, 0) "}", 0, 1);

    refuses("{" T("a", "F32", "[2]", 0, 8) "," T("a", "F32", "[2]", 8, 16) "}", 16, "tensor a given twice");
    refuses("{" T("a", "F32", "[2]", 0, 8) "," T("b", "F32", "[2]", 4, 12) "}", 12, "overlap");
    refuses("{" T("a", "F32", "[2]", 0, 8) "," T("b", "F32", "[2]", 0, 8) "}", 8, "overlap");
    refuses("{" T("a", "F32", "[2]", 0, 8) "," T("b", "F32", "[2]", 12, 20) "}", 20, "hole");
    refuses("{" T("a", "F32", "[2]", 4, 12) "}", 12, "hole");
    refuses("{" T("a", "F32", "[2]", 0, 8) "}", 9, "bytes after the last tensor");
    refuses("{\"__metadata__\":{\"k\":\"v\",\"k\":\"w\"}}", 0, "__metadata__ key k given twice");
    refuses("{" T("a", "F32", "[2]", 0, 9) "}", 9, "do not hold 8 bytes");
    refuses("{" T("a", "F32", "[-2]", 0, 8) "}", 8, "non-negative integer");
    refuses("{" T("a", "F32", "[2.0]", 0, 8) "}", 8, "expected");
    refuses("{" T("a", "F32", "[02]", 0, 8) "}", 8, "leading zero");
    refuses("{" T("a", "F32", "[4611686018427387905]", 0, 8) "}", 8, "integer over 2^62");
    refuses("{" T("a", "F32", "[4611686018427387904,4611686018427387904,0]", 0, 0) "}", 0, "shape overflows");
    refuses("{" T("a", "C64", "[1]", 0, 8) "}", 8, "unknown dtype");
    refuses("{" T("a", "F32", "[1,1,1,1,1,1,1,1,1]", 0, 4) "}", 4, "more than 8 numbers");
    refuses("{\"a\\u0041\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4, "unsupported escape");
    refuses("{\"a\":{\"dtype\":\"F32\",\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4, "repeated key");
    refuses("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4],\"x\":1}}", 4, "unexpected");
    refuses("{\"__metadata__\":{\"k\":1}}", 0, "expected '\"'");
    refuses("{} x", 0, "text after the header object");
}

/* n empty tensors named as experts, in reverse name order; the header text (malloc'ed). */
static char *many(size_t n, size_t *len)
{
    size_t cap = n * 128 + 16, at = 0;
    char *s = malloc(cap);
    if (!s) return NULL;
    s[at++] = '{';
    for (size_t k = 0; k < n; k++)
        at += (size_t)snprintf(s + at, cap - at, "%s\"model.layers.%zu.mlp.experts.%zu.w\":{\"dtype\":\"F32\","
                               "\"shape\":[0],\"data_offsets\":[0,0]}", k ? "," : "", (n - k) / 256, (n - k) % 256);
    s[at++] = '}';
    s[at] = 0;
    *len = at;
    return s;
}

static void large_header(void)
{
    size_t n = 400000, len = 0;
    char *json = many(n, &len);
    CHECK(json != NULL);
    if (!json) return;
    str_file f;
    memset(&f, 0, sizeof f);
    char err[STR_ERR_LEN] = "";
    int rc = str_parse_header(json, len, data, 0, &f, err);
    CHECK_MSG(rc == 0, "a %zu-byte header of %zu tensors refused: %s", len, n, err);
    if (!rc) {
        CHECK(f.n == n);
        size_t found = 0;
        for (size_t k = 0; k < f.n; k += 997) found += str_find(&f, f.tensors[k].name) == &f.tensors[k];
        CHECK(found == (f.n + 996) / 997);
        str_close(&f);
    }
    /* the same header with its last name repeated first: refused by name */
    char *dup = malloc(len + 128);
    CHECK(dup != NULL);
    if (dup) {
        int w = snprintf(dup, len + 128, "{\"model.layers.0.mlp.experts.1.w\":{\"dtype\":\"F32\",\"shape\":[0],"
                                         "\"data_offsets\":[0,0]},%s", json + 1);
        memset(&f, 0, sizeof f);
        rc = str_parse_header(dup, (size_t)w, data, 0, &f, err);
        CHECK(rc != 0 && strstr(err, "model.layers.0.mlp.experts.1.w given twice"));
        free(dup);
    }
    printf("a %zu-byte header of %zu tensors parsed\n", len, n);
    free(json);
}

int main(void)
{
    rules();
    large_header();
    return qt_finish("safetensors_read");
}
