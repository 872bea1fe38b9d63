/* The qmoe command-line program: dispatch to subcommands. */
#include <stdio.h>
#include <string.h>

#include "commands.h"
#include "qmoe/qmoe.h"

static const struct {
    const char *name;
    int (*fn)(int, char **);
    const char *help;
} commands[] = {
    {"run", cmd_run, "run the operator on .npy inputs, write .npy outputs"},
    {"gen", cmd_gen, "write a random, realistic case as .npy files"},
    {"demo", cmd_demo, "run the vendor sample's workload and verify rows against the reference"},
    {"bench", cmd_bench, "benchmark named shapes; JSON lines with ratios to measured peaks"},
    {"moe", cmd_moe, "a MoE layer: gen writes a random one (safetensors + .npy inputs)"},
};

static void usage(FILE *f)
{
    fprintf(f, "usage: qmoe <command> [options]   (qmoe <command> --help for its options)\n\n");
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        fprintf(f, "  %-6s %s\n", commands[i].name, commands[i].help);
    fprintf(f, "\nqmoe %s\n", qmoe_version());
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
        usage(stdout);
        return 0;
    }
    if (!strcmp(argv[1], "--version")) {
        printf("qmoe %s\n", qmoe_version());
        return 0;
    }
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (!strcmp(argv[1], commands[i].name)) return commands[i].fn(argc - 1, argv + 1);
    fprintf(stderr, "qmoe: unknown command '%s'\n", argv[1]);
    usage(stderr);
    return 2;
}
