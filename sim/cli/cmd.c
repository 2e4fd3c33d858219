/* cmd — the exit status shared by the subcommands (see cmd.h). */
#include "sim/cli/cmd.h"

#include "sim/util/err.h"

int cmd_exit_status(int rc)
{
    int status = 1;
    if (rc == TS_OK)
        status = 0;
    else if (rc == TS_EINVAL)
        status = 2;
    return status;
}
