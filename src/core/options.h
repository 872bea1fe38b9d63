/* Reading a caller's growable options struct (qmoe_grouped_matmul_swiglu_quant_options, qmoe_device_options): its first
 * field is uint32_t struct_size, new fields are only ever appended. */
#ifndef QMOE_CORE_OPTIONS_H
#define QMOE_CORE_OPTIONS_H

#include <stddef.h>

#include "qmoe/qmoe.h"

/* Copies the caller's struct `in` (NULL: all defaults) into the library's `out` of `out_size`
 * bytes: the first struct_size bytes (0 stands for `base_size`, the 0.2 layout), zeros (the
 * defaults) after them; out's struct_size becomes out_size. QMOE_ERR_PARAM_INVALID (rule
 * QMOE_RULE_OPTION, argument `arg`) for a struct_size below base_size or above 4096, or a larger
 * struct with a nonzero byte past out_size: a field this library does not know. */
/* The most threads (or parts) any threads option of the library takes. */
enum { QMOE_MAX_THREADS = 4096 };

qmoe_status qmoe_read_options(const void *in, void *out, size_t out_size, size_t base_size,
                              const char *arg);

#endif
