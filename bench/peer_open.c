/*
 * Finding a peer's shared library at run time: the peers of `qmoe bench` (oneMKL, the oneDNN
 * plugin) come from the bench venv that `make bench-venv` fills, found next to the program, so a
 * build without them still runs and says what is missing.
 */
#define _GNU_SOURCE
#include "peer_open.h"

#include <dlfcn.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void *try_open(const char *path, int report, char *why, size_t why_size)
{
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h && report) {
        const char *e = dlerror();
        snprintf(why, why_size, "%s", e ? e : "dlopen failed");
    }
    return h;
}

void *peer_open(const char *env, const char *const *names, size_t n, char *where, size_t where_size,
                char *why, size_t why_size)
{
    why[0] = '\0';
    const char *path = env ? getenv(env) : NULL;
    if (path && *path) {
        snprintf(where, where_size, "%s", path);
        return try_open(path, 1, why, why_size);
    }
    char exe[PATH_MAX];
    ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (len > 0) {
        exe[len] = '\0';
        char *slash = strrchr(exe, '/');
        if (slash) *slash = '\0';
        for (size_t i = 0; i < n; i++) {
            /* <build>/tools/qmoe -> <build>/bench-venv/lib; a file that is there but does not
             * load (a missing dependency) is worth a message, an absent one is not */
            snprintf(where, where_size, "%s/../bench-venv/lib/%s", exe, names[i]);
            void *h = try_open(where, !why[0] && access(where, F_OK) == 0, why, why_size);
            if (h) return h;
        }
    }
    for (size_t i = 0; i < n; i++) {
        snprintf(where, where_size, "%s", names[i]);
        void *h = try_open(names[i], 0, why, why_size);
        if (h) return h;
    }
    return NULL;
}
