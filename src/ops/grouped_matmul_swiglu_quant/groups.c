#include "ops/grouped_matmul_swiglu_quant/groups.h"

#include "core/checked.h"
#include "core/status.h"

qmoe_status qmoe_gmm_check_groups(const qmoe_gmm_params *p)
{
    int64_t end = 0;
    for (int64_t e = 0; e < p->E_groups; e++) {
        int64_t v = p->gl[e * p->gl_s];
        if (v < 0)
            return qmoe_fail_arg(QMOE_ERR_PARAM_INVALID, QMOE_RULE_VALUE, "groupList",
                                 "groupList[%lld] = %lld is negative", (long long)e, (long long)v);
        if (p->group_list_type == QMOE_GROUP_LIST_COUNT) {
            if (!qmoe_add_i64(end, v, &end) || end > p->M)
                return qmoe_fail_arg(QMOE_ERR_PARAM_INVALID, QMOE_RULE_VALUE, "groupList",
                                 "groupList: counts up to entry %lld add up past M = %lld",
                                 (long long)e, (long long)p->M);
        } else {
            if (v < end)
                return qmoe_fail_arg(QMOE_ERR_PARAM_INVALID, QMOE_RULE_VALUE, "groupList",
                                 "groupList[%lld] = %lld is less than groupList[%lld] = %lld "
                                 "(cumulative ends must not decrease)",
                                 (long long)e, (long long)v, (long long)(e - 1), (long long)end);
            if (v > p->M)
                return qmoe_fail_arg(QMOE_ERR_PARAM_INVALID, QMOE_RULE_VALUE, "groupList",
                                     "groupList[%lld] = %lld exceeds M = %lld",
                                 (long long)e, (long long)v, (long long)p->M);
            end = v;
        }
    }
    return QMOE_OK;
}
