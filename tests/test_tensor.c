/* Tensor views: creation, accessors, contiguity, and rejection of bad or overflowing shapes. */
#include <stdint.h>
#include <string.h>

#include "core/tensor.h"
#include "qmoe/qmoe.h"
#include "support/testlib.h"

static qmoe_tensor *const SENTINEL = (qmoe_tensor *)(uintptr_t)0x1234;

/* Expects creation to fail with `code`, leave *out alone, and name `word` in the message. */
static void expect_fail(const int64_t *shape, int ndim, const int64_t *strides, qmoe_dtype dtype,
                        qmoe_format format, void *data, qmoe_status code, const char *word)
{
    qmoe_tensor *t = SENTINEL;
    qmoe_status st = qmoe_tensor_create(shape, ndim, strides, dtype, format, data, &t);
    CHECK_MSG(st == code, "got %d, want %d (%s)", (int)st, (int)code, word);
    CHECK(t == SENTINEL);
    CHECK_MSG(strstr(qmoe_last_error(), word) != NULL, "message '%s' lacks '%s'",
              qmoe_last_error(), word);
}

static void test_contiguous_defaults(void)
{
    int8_t buf[2 * 3 * 4];
    int64_t shape[3] = {2, 3, 4};
    qmoe_tensor *t = NULL;
    CHECK(qmoe_tensor_create(shape, 3, NULL, QMOE_DTYPE_INT8, QMOE_FORMAT_ND, buf, &t) == QMOE_OK);
    CHECK(strcmp(qmoe_last_error(), "") == 0);
    CHECK(qmoe_tensor_ndim(t) == 3);
    CHECK(qmoe_tensor_dim(t, 0) == 2 && qmoe_tensor_dim(t, 1) == 3 && qmoe_tensor_dim(t, 2) == 4);
    CHECK(qmoe_tensor_stride(t, 0) == 12 && qmoe_tensor_stride(t, 1) == 4 &&
          qmoe_tensor_stride(t, 2) == 1);
    CHECK(qmoe_tensor_dim(t, 3) == -1 && qmoe_tensor_dim(t, -1) == -1);
    CHECK(qmoe_tensor_stride(t, 3) == -1);
    CHECK(qmoe_tensor_dtype(t) == QMOE_DTYPE_INT8);
    CHECK(qmoe_tensor_format(t) == QMOE_FORMAT_ND);
    CHECK(qmoe_tensor_data(t) == buf);
    CHECK(qmoe_tensor_is_contiguous(t));
    CHECK(t->numel == 24);
    qmoe_tensor_destroy(t);
    qmoe_tensor_destroy(NULL);
}

static void test_strided_views(void)
{
    int8_t buf[64];
    qmoe_tensor *t = NULL;
    /* row stride > K: not contiguous */
    int64_t shape[2] = {3, 5}, padded[2] = {8, 1}, transposed[2] = {1, 3};
    CHECK(qmoe_tensor_create(shape, 2, padded, QMOE_DTYPE_INT8, QMOE_FORMAT_ND, buf, &t) == 0);
    CHECK(!qmoe_tensor_is_contiguous(t));
    CHECK(qmoe_tensor_stride(t, 0) == 8);
    qmoe_tensor_destroy(t);
    CHECK(qmoe_tensor_create(shape, 2, transposed, QMOE_DTYPE_INT8, QMOE_FORMAT_ND, buf, &t) == 0);
    CHECK(!qmoe_tensor_is_contiguous(t));
    qmoe_tensor_destroy(t);
    /* explicit row-major strides are contiguous; size-1 dims may carry any stride */
    int64_t rowmajor[2] = {5, 1}, one[2] = {1, 5}, one_strides[2] = {99, 1};
    CHECK(qmoe_tensor_create(shape, 2, rowmajor, QMOE_DTYPE_INT8, QMOE_FORMAT_ND, buf, &t) == 0);
    CHECK(qmoe_tensor_is_contiguous(t));
    qmoe_tensor_destroy(t);
    CHECK(qmoe_tensor_create(one, 2, one_strides, QMOE_DTYPE_INT8, QMOE_FORMAT_ND, buf, &t) == 0);
    CHECK(qmoe_tensor_is_contiguous(t));
    qmoe_tensor_destroy(t);
    /* zero strides (broadcast) are accepted for inputs */
    int64_t bcast[2] = {0, 1};
    CHECK(qmoe_tensor_create(shape, 2, bcast, QMOE_DTYPE_INT8, QMOE_FORMAT_ND, buf, &t) == 0);
    CHECK(!qmoe_tensor_is_contiguous(t));
    qmoe_tensor_destroy(t);
}

static void test_empty_and_scalar(void)
{
    qmoe_tensor *t = NULL;
    int64_t empty[2] = {5, 0}, empty2[2] = {0, 7};
    CHECK(qmoe_tensor_create(empty, 2, NULL, QMOE_DTYPE_FLOAT32, QMOE_FORMAT_ND, NULL, &t) == 0);
    CHECK(t && t->numel == 0);
    CHECK(qmoe_tensor_is_contiguous(t)); /* no elements: trivially contiguous */
    qmoe_tensor_destroy(t);
    CHECK(qmoe_tensor_create(empty2, 2, NULL, QMOE_DTYPE_INT64, QMOE_FORMAT_ND, NULL, &t) == 0);
    CHECK(qmoe_tensor_is_contiguous(t));
    qmoe_tensor_destroy(t);
    /* rank 0 is one element and needs data */
    float v = 1.0f;
    CHECK(qmoe_tensor_create(NULL, 0, NULL, QMOE_DTYPE_FLOAT32, QMOE_FORMAT_ND, &v, &t) == 0);
    CHECK(qmoe_tensor_ndim(t) == 0 && t->numel == 1 && qmoe_tensor_is_contiguous(t));
    qmoe_tensor_destroy(t);
    expect_fail(NULL, 0, NULL, QMOE_DTYPE_FLOAT32, QMOE_FORMAT_ND, NULL, QMOE_ERR_PARAM_NULLPTR,
                "data");
    int64_t one[1] = {3};
    expect_fail(one, 1, NULL, QMOE_DTYPE_INT8, QMOE_FORMAT_ND, NULL, QMOE_ERR_PARAM_NULLPTR,
                "data");
}

static void test_bad_arguments(void)
{
    int8_t buf[16];
    int64_t shape[2] = {2, 3};
    int64_t nine[9] = {1, 1, 1, 1, 1, 1, 1, 1, 1};
    CHECK(qmoe_tensor_create(shape, 2, NULL, QMOE_DTYPE_INT8, QMOE_FORMAT_ND, buf, NULL) ==
          QMOE_ERR_PARAM_NULLPTR);
    CHECK(strstr(qmoe_last_error(), "out") != NULL);
    expect_fail(NULL, 2, NULL, QMOE_DTYPE_INT8, QMOE_FORMAT_ND, buf, QMOE_ERR_PARAM_NULLPTR,
                "shape");
    expect_fail(nine, 9, NULL, QMOE_DTYPE_INT8, QMOE_FORMAT_ND, buf, QMOE_ERR_PARAM_INVALID,
                "rank");
    expect_fail(shape, -1, NULL, QMOE_DTYPE_INT8, QMOE_FORMAT_ND, buf, QMOE_ERR_PARAM_INVALID,
                "rank");
    expect_fail(shape, 2, NULL, (qmoe_dtype)42, QMOE_FORMAT_ND, buf, QMOE_ERR_PARAM_INVALID,
                "dtype");
    expect_fail(shape, 2, NULL, QMOE_DTYPE_INT8, (qmoe_format)7, buf, QMOE_ERR_PARAM_INVALID,
                "format");
    int64_t negative[2] = {2, -3};
    expect_fail(negative, 2, NULL, QMOE_DTYPE_INT8, QMOE_FORMAT_ND, buf, QMOE_ERR_PARAM_INVALID,
                "shape[1]");
    int64_t neg_stride[2] = {-3, 1};
    expect_fail(shape, 2, neg_stride, QMOE_DTYPE_INT8, QMOE_FORMAT_ND, buf,
                QMOE_ERR_PARAM_INVALID, "stride[0]");
}

static void test_overflow(void)
{
    int8_t buf[16];
    /* element count overflows int64 */
    int64_t huge[2] = {INT64_C(1) << 40, INT64_C(1) << 40};
    expect_fail(huge, 2, NULL, QMOE_DTYPE_INT8, QMOE_FORMAT_ND, buf, QMOE_ERR_PARAM_INVALID,
                "overflows");
    /* element count fits but the byte (bit) extent does not */
    int64_t wide[1] = {INT64_C(1) << 61};
    expect_fail(wide, 1, NULL, QMOE_DTYPE_FLOAT32, QMOE_FORMAT_ND, buf, QMOE_ERR_PARAM_INVALID,
                "overflows");
    int64_t wide64[1] = {INT64_MAX / 4};
    expect_fail(wide64, 1, NULL, QMOE_DTYPE_UINT64, QMOE_FORMAT_ND, buf, QMOE_ERR_PARAM_INVALID,
                "overflows");
    /* a small shape whose strides reach past int64 */
    int64_t shape[2] = {3, 2}, far[2] = {INT64_MAX / 2, 1};
    expect_fail(shape, 2, far, QMOE_DTYPE_INT8, QMOE_FORMAT_ND, buf, QMOE_ERR_PARAM_INVALID,
                "overflows");
    int64_t far2[2] = {INT64_MAX / 4, INT64_MAX / 4};
    expect_fail(shape, 2, far2, QMOE_DTYPE_INT8, QMOE_FORMAT_ND, buf, QMOE_ERR_PARAM_INVALID,
                "overflows");
    /* a large but representable extent is fine (memory is never touched by create) */
    int64_t big[2] = {INT64_C(1) << 20, INT64_C(1) << 20};
    qmoe_tensor *t = NULL;
    CHECK(qmoe_tensor_create(big, 2, NULL, QMOE_DTYPE_INT4, QMOE_FORMAT_ND, buf, &t) == 0);
    CHECK(t && t->numel == (INT64_C(1) << 40));
    qmoe_tensor_destroy(t);
}

int main(void)
{
    test_contiguous_defaults();
    test_strided_views();
    test_empty_and_scalar();
    test_bad_arguments();
    test_overflow();
    return qt_finish("test_tensor");
}
