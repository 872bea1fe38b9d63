/* The caller's bytes after a weight was converted from them. llama.cpp's default loading maps the
 * model file (read-only, shared) and hands set_tensor pointers into that mapping; the pages it
 * touched stay in the process, so without this the model is held twice (the file's pages and the
 * prepacked objects). Dropping the whole pages of a read-only shared file mapping (MADV_DONTNEED)
 * never changes what they read — the next touch maps the file's bytes again — so it is done only
 * there; anonymous, private or writable memory is left as it is. */
#define _DEFAULT_SOURCE /* madvise */
#include <stdint.h>
#include <stdio.h>
#include <sys/mman.h>
#include <unistd.h>

#include "qmoe_ggml.h"

/* 1 when [p, p + n) lies inside one mapping of /proc/self/maps that is readable, not writable,
 * shared and backed by a file (an inode). */
static int in_readonly_file_mapping(uintptr_t p, size_t n)
{
    FILE *f = fopen("/proc/self/maps", "r");
    if (!f) return 0;
    char line[512];
    int ok = 0;
    while (fgets(line, sizeof line, f)) {
        unsigned long lo, hi, inode;
        char perms[5];
        if (sscanf(line, "%lx-%lx %4s %*s %*s %lu", &lo, &hi, perms, &inode) != 4) continue;
        if (p < lo || p >= hi) continue;
        ok = p + n <= hi && perms[0] == 'r' && perms[1] == '-' && perms[3] == 's' && inode != 0;
        break;
    }
    fclose(f);
    return ok;
}

int qg_source_release(const void *data, size_t size)
{
    long ps = sysconf(_SC_PAGESIZE);
    uintptr_t p = (uintptr_t)data, page = ps > 0 ? (uintptr_t)ps : 4096;
    if (!data || size < page || p > UINTPTR_MAX - size) return 0;
    uintptr_t a = (p + page - 1) / page * page, z = (p + size) / page * page;
    if (z <= a || !in_readonly_file_mapping(p, size)) return 0;
    return madvise((void *)a, z - a, MADV_DONTNEED) == 0; /* fails on mlock'ed pages: kept */
}
