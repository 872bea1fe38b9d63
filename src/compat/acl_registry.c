/* Every live handle the layer gave out (memory, streams, executors), so that frees and uses of
 * unknown or stale handles are errors instead of crashes, and aclFinalize can release what the
 * program left behind. A plain array: programs hold few handles at a time. */
#include <stdlib.h>

#include "compat/compat.h"
#include "qmoe/runtime.h"

typedef struct entry {
    void *ptr;
    compat_kind kind;
    int device;
} entry;

static entry *entries;
static size_t count, capacity;

static size_t find(const void *ptr, compat_kind kind)
{
    for (size_t i = 0; i < count; i++)
        if (entries[i].ptr == ptr && entries[i].kind == kind) return i;
    return count;
}

int compat_registry_add(void *ptr, compat_kind kind, int device)
{
    if (count == capacity) {
        size_t grown = capacity ? capacity * 2 : 64;
        entry *e = realloc(entries, grown * sizeof *e);
        if (!e) return 0;
        entries = e;
        capacity = grown;
    }
    entries[count++] = (entry){.ptr = ptr, .kind = kind, .device = device};
    return 1;
}

int compat_registry_has(const void *ptr, compat_kind kind) { return find(ptr, kind) < count; }

int compat_registry_remove(void *ptr, compat_kind kind)
{
    size_t i = find(ptr, kind);
    if (i == count) return 0;
    entries[i] = entries[--count];
    return 1;
}

void compat_registry_release_streams(int device)
{
    for (size_t i = 0; i < count;) {
        if (entries[i].kind == COMPAT_STREAM && entries[i].device == device) {
            compat_release(entries[i].ptr, COMPAT_STREAM);
            entries[i] = entries[--count];
        } else {
            i++;
        }
    }
}

void compat_registry_release_all(void)
{
    static const compat_kind order[] = {COMPAT_STREAM, COMPAT_EXECUTOR, COMPAT_DEVICE_MEM,
                                        COMPAT_HOST_MEM};
    for (size_t k = 0; k < sizeof order / sizeof order[0]; k++)
        for (size_t i = 0; i < count; i++)
            if (entries[i].kind == order[k]) compat_release(entries[i].ptr, entries[i].kind);
    free(entries);
    entries = NULL;
    count = capacity = 0;
}

void compat_release(void *ptr, compat_kind kind)
{
    if (kind == COMPAT_EXECUTOR) {
        compat_executor_free(ptr);
    } else if (kind == COMPAT_STREAM) {
        qmoe_stream_destroy(((compat_stream *)ptr)->native);
        free(ptr);
    } else {
        free(ptr);
    }
}
