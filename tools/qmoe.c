/* Placeholder main until the CLI lands. */
#include <stdio.h>
#include "qmoe/qmoe.h"
int main(void)
{
    printf("qmoe %s\n", qmoe_version());
    return 0;
}
