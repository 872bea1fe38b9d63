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

int args_kernel(const char *cmd, const char *text, qmoe_kernel *out)
{
    enum { KERNELS = QMOE_KERNEL_NEON_I8MM + 1 };
    const char *names[KERNELS];
    int k;
    for (int i = 0; i < KERNELS; i++) names[i] = qmoe_kernel_name((qmoe_kernel)i);
    if (args_choice(cmd, "--kernel", text, names, KERNELS, &k)) return -1;
    *out = (qmoe_kernel)k;
    return 0;
}

int args_group_list_type(const char *cmd, const char *text, qmoe_group_list_type *out)
{
    static const char *const names[] = {"cumsum", "count"};
    int k;
    if (args_choice(cmd, "--group-list-type", text, names, 2, &k)) return -1;
    *out = k ? QMOE_GROUP_LIST_COUNT : QMOE_GROUP_LIST_CUMSUM;
    return 0;
}
