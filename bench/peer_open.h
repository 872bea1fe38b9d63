/* Finding a peer's shared library at run time (dlopen), so that neither the qmoe program nor the
 * library links a peer. */
#ifndef QMOE_BENCH_PEER_OPEN_H
#define QMOE_BENCH_PEER_OPEN_H

#include <stddef.h>

/* dlopen (RTLD_NOW | RTLD_LOCAL) of the first of: the path in environment variable `env` when it
 * is set (then nothing else is tried), <program dir>/../bench-venv/lib/<name> (what make
 * bench-venv installs beside <build>/tools/qmoe), then <name> on the loader's search path, for
 * each of the `n` names in order. Returns the handle and the path it came from in `where`, or
 * NULL with `why` holding the loader's error for a file that exists but would not load ("" when
 * none was found at all). */
void *peer_open(const char *env, const char *const *names, size_t n, char *where, size_t where_size,
                char *why, size_t why_size);

#endif
