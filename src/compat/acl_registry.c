/* Every live handle the layer gave out (memory, streams, executors, tensors), so that frees and
 * uses of unknown or stale handles are errors instead of crashes, and aclFinalize can release
 * what the program left behind. Open-addressing hash tables keyed by pointer: a program may hold
 * many tensors at once, and every operator call looks its tensors up. Tensors live in their own
 * table: they do not depend on aclInit, so aclFinalize leaves them alone. */
#include <stdint.h>
#include <stdlib.h>

#include "compat/compat.h"
#include "qmoe/runtime.h"

typedef struct entry {
    void *ptr; /* NULL: an empty slot */
    compat_kind kind;
    int device;
    compat_release_fn release; /* how the handle's owner releases it (NULL: tensors, kept) */
} entry;

typedef struct table {
    entry *slots;
    size_t capacity, count; /* capacity: 0 or a power of two; count <= capacity / 2 */
} table;

static table handles, tensors;

static table *table_for(compat_kind kind) { return kind == COMPAT_TENSOR ? &tensors : &handles; }

static size_t hash(const void *ptr, size_t capacity)
{
    uint64_t h = (uint64_t)(uintptr_t)ptr * 0x9E3779B97F4A7C15ull; /* Fibonacci hashing */
    return (size_t)(h >> 17) & (capacity - 1);
}

/* The slot holding (ptr, kind), or the empty slot where it would go. */
static size_t find(const table *t, const void *ptr, compat_kind kind)
{
    size_t i = hash(ptr, t->capacity);
    while (t->slots[i].ptr && !(t->slots[i].ptr == ptr && t->slots[i].kind == kind))
        i = (i + 1) & (t->capacity - 1);
    return i;
}

static int grow(table *t)
{
    size_t capacity = t->capacity ? t->capacity * 2 : 64;
    entry *slots = calloc(capacity, sizeof *slots);
    if (!slots) return 0;
    table bigger = {slots, capacity, 0};
    for (size_t i = 0; i < t->capacity; i++)
        if (t->slots[i].ptr) {
            bigger.slots[find(&bigger, t->slots[i].ptr, t->slots[i].kind)] = t->slots[i];
            bigger.count++;
        }
    free(t->slots);
    *t = bigger;
    return 1;
}

int compat_registry_add(void *ptr, compat_kind kind, int device, compat_release_fn release)
{
    table *t = table_for(kind);
    if ((t->count + 1) * 2 > t->capacity && !grow(t)) return 0;
    size_t i = find(t, ptr, kind);
    if (!t->slots[i].ptr) t->count++;
    t->slots[i] = (entry){.ptr = ptr, .kind = kind, .device = device, .release = release};
    return 1;
}

int compat_registry_has(const void *ptr, compat_kind kind)
{
    const table *t = table_for(kind);
    return t->capacity && ptr && t->slots[find(t, ptr, kind)].ptr != NULL;
}

/* Empties slot i and moves later entries of its probe run back so every lookup still finds
 * them (no tombstones). */
static void erase(table *t, size_t i)
{
    size_t mask = t->capacity - 1;
    t->slots[i].ptr = NULL;
    t->count--;
    for (size_t j = (i + 1) & mask; t->slots[j].ptr; j = (j + 1) & mask) {
        size_t home = hash(t->slots[j].ptr, t->capacity);
        /* j may move to i when its home is not in the cyclic range (i, j] */
        if (((j - home) & mask) >= ((j - i) & mask)) {
            t->slots[i] = t->slots[j];
            t->slots[j].ptr = NULL;
            i = j;
        }
    }
}

int compat_registry_remove(void *ptr, compat_kind kind)
{
    table *t = table_for(kind);
    if (!t->capacity || !ptr) return 0;
    size_t i = find(t, ptr, kind);
    if (!t->slots[i].ptr) return 0;
    erase(t, i);
    if (!t->count) { /* a program that frees what it made leaves nothing behind */
        free(t->slots);
        *t = (table){NULL, 0, 0};
    }
    return 1;
}

void compat_registry_release_streams(int device)
{
    table *t = &handles;
    for (size_t i = 0; i < t->capacity;) {
        entry e = t->slots[i];
        if (e.ptr && e.kind == COMPAT_STREAM && e.device == device) {
            erase(t, i); /* may move another entry into slot i: look at it again */
            e.release(e.ptr);
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
        for (size_t i = 0; i < handles.capacity; i++)
            if (handles.slots[i].ptr && handles.slots[i].kind == order[k])
                handles.slots[i].release(handles.slots[i].ptr);
    free(handles.slots);
    handles = (table){NULL, 0, 0};
}
