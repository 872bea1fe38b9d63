/* Placeholder until this subcommand lands. */
#include <stdio.h>

#include "commands.h"

int cmd_gen(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    fprintf(stderr, "qmoe gen: not implemented yet\n");
    return 2;
}
