/* trainsim — predict distributed LLM training performance without the cluster.
 * Dispatches to the subcommands in cmd.h. */
#include <stdio.h>
#include <string.h>

#include "cmd.h"

typedef struct {
    const char *name;
    int (*run)(int argc, char **argv);
    const char *summary;
} command;

static const command COMMANDS[] = {
    {"simulate", cmd_simulate, "simulate one training iteration and report time, memory, throughput"},
    {"schedule", cmd_schedule, "generate, validate, print, export/import and time pipeline schedules"},
};
#define NCOMMANDS (sizeof COMMANDS / sizeof COMMANDS[0])

static void usage(FILE *f)
{
    fprintf(f, "usage: trainsim COMMAND [flags]   (trainsim COMMAND --help lists its flags)\n\ncommands:\n");
    for (size_t i = 0; i < NCOMMANDS; i++)
        fprintf(f, "  %-10s %s\n", COMMANDS[i].name, COMMANDS[i].summary);
    fprintf(f, "\nWith no command, 'trainsim' runs 'simulate' on the built-in default:\n"
               "GPT-3 175B on 1024 A100 80GB GPUs (DGX A100 nodes, HDR InfiniBand fat tree).\n");
}

int main(int argc, char **argv)
{
    if (argc < 2)
        return cmd_simulate(1, (char *[]){"simulate", NULL});
    if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
        usage(stdout);
        return 0;
    }
    for (size_t i = 0; i < NCOMMANDS; i++)
        if (!strcmp(argv[1], COMMANDS[i].name))
            return COMMANDS[i].run(argc - 1, argv + 1);
    if (argv[1][0] == '-') /* flags without a command: simulate */
        return cmd_simulate(argc, argv);
    fprintf(stderr, "trainsim: unknown command '%s'; valid commands:", argv[1]);
    for (size_t i = 0; i < NCOMMANDS; i++)
        fprintf(stderr, " %s", COMMANDS[i].name);
    fprintf(stderr, " (trainsim --help)\n");
    return 2;
}
