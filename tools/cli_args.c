/* Option-value parsing shared by the subcommands. */
#include "cli_args.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int args_value(const char *cmd, int argc, char **argv, int *i, const char **value)
{
    if (*i + 1 >= argc) {
        fprintf(stderr, "qmoe %s: %s: needs a value\n", cmd, argv[*i]);
        return -1;
    }
    *value = argv[*i + 1];
    *i += 2;
    return 0;
}

int args_int(const char *cmd, const char *opt, const char *text, int64_t lo, int64_t hi,
             int64_t *out)
{
    char *end;
    errno = 0;
    long long v = strtoll(text, &end, 10);
    if (*text == '\0' || *end != '\0' || errno || v < lo || v > hi) {
        fprintf(stderr, "qmoe %s: %s: '%s' is not an integer in [%lld, %lld]\n", cmd, opt, text,
                (long long)lo, (long long)hi);
        return -1;
    }
    *out = v;
    return 0;
}

int args_choice(const char *cmd, const char *opt, const char *text, const char *const *names,
                int count, int *out)
{
    for (int i = 0; i < count; i++)
        if (!strcmp(text, names[i])) {
            *out = i;
            return 0;
        }
    fprintf(stderr, "qmoe %s: %s: '%s' is not one of", cmd, opt, text);
    for (int i = 0; i < count; i++) fprintf(stderr, " %s", names[i]);
    fputc('\n', stderr);
    return -1;
}

/* The library's kernel names, in qmoe_kernel order: dense from 0, the first unnamed id ends them
 * (so a kernel added to the library's list is known here without a change). */
enum { MAX_KERNELS = 64 };
static int kernel_names(const char **names)
{
    int n = 0;
    while (n < MAX_KERNELS && strcmp(qmoe_kernel_name((qmoe_kernel)n), "unknown")) {
        names[n] = qmoe_kernel_name((qmoe_kernel)n);
        n++;
    }
    return n;
}

int args_kernel(const char *cmd, const char *text, qmoe_kernel *out)
{
    const char *names[MAX_KERNELS];
    int k, n = kernel_names(names);
    if (args_choice(cmd, "--kernel", text, names, n, &k)) return -1;
    *out = (qmoe_kernel)k;
    return 0;
}

const char *args_kernel_list(void)
{
    static char list[MAX_KERNELS * 16];
    const char *names[MAX_KERNELS];
    int n = kernel_names(names);
    size_t at = 0, col = 20; /* after "  --kernel NAME     ", lines wrap before column 90 */
    list[0] = '\0';
    for (int i = 0; i < n && at < sizeof list; i++) {
        int wrap = i > 0 && col + strlen(names[i]) + 2 > 90;
        int w = snprintf(list + at, sizeof list - at, "%s%s%s", i == 0 ? "" : wrap ? ",\n" : ", ",
                         wrap ? "                    " : "", names[i]);
        col = wrap ? 20 + strlen(names[i]) : col + (size_t)w;
        at += (size_t)w;
        if (i == 0 && at < sizeof list)
            at += (size_t)snprintf(list + at, sizeof list - at, " (default)"), col += 10;
    }
    return list;
}

int args_group_list_type(const char *cmd, const char *text, qmoe_group_list_type *out)
{
    static const char *const names[] = {"cumsum", "count"};
    int k;
    if (args_choice(cmd, "--group-list-type", text, names, 2, &k)) return -1;
    *out = k ? QMOE_GROUP_LIST_COUNT : QMOE_GROUP_LIST_CUMSUM;
    return 0;
}
