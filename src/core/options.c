#include "core/options.h"

#include <stdint.h>
#include <string.h>

#include "core/status.h"

enum { OPTIONS_MAX_SIZE = 4096 };

qmoe_status qmoe_read_options(const void *in, void *out, size_t out_size, size_t base_size,
                              const char *arg)
{
    memset(out, 0, out_size);
    if (in) {
        uint32_t size;
        memcpy(&size, in, sizeof size); /* struct_size, the first field */
        if (size == 0) size = (uint32_t)base_size;
        if (size < base_size || size > OPTIONS_MAX_SIZE)
            return qmoe_fail_arg(QMOE_ERR_PARAM_INVALID, QMOE_RULE_OPTION, arg,
                                 "%s: struct_size = %u, expected 0 or %zu..%u (sizeof the struct)",
                                 arg, (unsigned)size, base_size, (unsigned)OPTIONS_MAX_SIZE);
        memcpy(out, in, size < out_size ? size : out_size);
        for (size_t i = out_size; i < size; i++)
            if (((const unsigned char *)in)[i])
                return qmoe_fail_arg(QMOE_ERR_PARAM_INVALID, QMOE_RULE_OPTION, arg,
                                     "%s: struct_size = %u: a field past the %zu bytes this "
                                     "library knows is set (built against a newer qmoe?)",
                                     arg, (unsigned)size, out_size);
    }
    uint32_t mine = (uint32_t)out_size;
    memcpy(out, &mine, sizeof mine);
    return QMOE_OK;
}
