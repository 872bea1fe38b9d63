/* Instruction sets of this CPU for qmoe_device_isa(), from the kernels' CPU feature detection. */
#include "kernels/cpu_features.h"
#include "runtime/device.h"

static char isa[256];

static void detect_once(void) { qmoe_cpu_isa_list(isa, sizeof isa); }

const char *qmoe_cpu_isa_string(void)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, detect_once);
    return isa;
}
