/* Placeholder until this subcommand lands. */
#include <stdio.h>

#include "commands.h"

int cmd_bench(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    fprintf(stderr, "qmoe bench: not implemented yet\n");
    return 2;
}
