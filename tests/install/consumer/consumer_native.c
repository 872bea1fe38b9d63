/* Uses the installed native API: versions agree, options and error info work as documented. */
#include <stdio.h>
#include <string.h>

#include "qmoe/qmoe.h"
#include "qmoe/runtime.h"

#if QMOE_VERSION < QMOE_VERSION_OF(0, 3, 0)
#error "qmoe/version.h: expected at least 0.3.0"
#endif

int main(void)
{
    char header[32];
    snprintf(header, sizeof header, "%d.%d.%d", QMOE_VERSION_MAJOR, QMOE_VERSION_MINOR,
             QMOE_VERSION_PATCH);
    if (strcmp(header, EXPECT_VERSION) || strcmp(qmoe_version(), EXPECT_VERSION) ||
        strcmp(QMOE_VERSION_STRING, EXPECT_VERSION)) {
        fprintf(stderr, "versions differ: header %s, library %s, package %s\n", header,
                qmoe_version(), EXPECT_VERSION);
        return 1;
    }
    qmoe_grouped_matmul_swiglu_quant_options o = QMOE_GROUPED_MATMUL_SWIGLU_QUANT_OPTIONS_INIT;
    uint64_t ws = 0;
    qmoe_grouped_matmul_swiglu_quant_executor *ex = NULL;
    qmoe_status st = qmoe_grouped_matmul_swiglu_quant_workspace_size(NULL, NULL, NULL, NULL, NULL, NULL, NULL,
                                                          NULL, NULL, NULL, &o, &ws, &ex);
    const qmoe_error_info *e = qmoe_last_error_info();
    if (st != QMOE_ERR_PARAM_NULLPTR || e->status != st || e->rule != QMOE_RULE_NULL ||
        strcmp(e->arg, "x") || ex) {
        fprintf(stderr, "unexpected error info: %d %d '%s' '%s'\n", (int)e->status, (int)e->rule,
                e->arg, e->message);
        return 1;
    }
    printf("qmoe %s, %d cores\n", qmoe_version(), qmoe_device_online_cores());
    return 0;
}
