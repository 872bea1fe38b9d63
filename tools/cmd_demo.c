/* Placeholder until this subcommand lands. */
#include <stdio.h>

#include "commands.h"

int cmd_demo(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    fprintf(stderr, "qmoe demo: not implemented yet\n");
    return 2;
}
