/* qmoe_device_isa: a device's own instruction sets, or for a CPU device those this CPU offers
 * to the kernels (CPU feature detection is the kernels'; the runtime below them does not call
 * up into it). */
#include <pthread.h>

#include "kernels/cpu_features.h"
#include "runtime/device.h"

static char isa[256];

static void detect_once(void) { qmoe_cpu_isa_list(isa, sizeof isa); }

const char *qmoe_device_isa(const qmoe_device *dev)
{
    const char *own = dev ? qmoe_device_own_isa(dev) : NULL;
    if (own) return own;
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, detect_once);
    return isa;
}
