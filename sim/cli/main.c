/* trainsim — predict distributed LLM training performance without the cluster.
 * Dispatches to the subcommands declared in cmd.h. */
#include <stdio.h>
#include <string.h>

#include "sim/cli/cmd.h"
#include "sim/util/afile.h"

#define TRAINSIM_VERSION "0.1.0"

typedef struct {
    const char *name;
    int (*run)(int argc, char **argv);
    const char *summary;
} command;

static int cmd_version(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    printf("trainsim %s\n", TRAINSIM_VERSION);
    return 0;
}

/* One row per subcommand; the first row is what runs with no command. */
static const command COMMANDS[] = {
    {"simulate", cmd_simulate, "predict one training iteration by discrete-event simulation"},
    {"version", cmd_version, "print the version"},
    {"config", cmd_config, "check flags and print the resolved configuration (presets: --list-models)"},
    {"schedule", cmd_schedule, "generate, validate, print, time and export a pipeline schedule"},
    {"calibrate", cmd_calibrate, "fit the cost model to trainexec --microbench samples"},
    {"search", cmd_search, "find the fastest layout that fits for a model, GPU count and batch"},
    {"sweep", cmd_sweep, "simulate every row of a CSV (resumable), appending to --out"},
    {"infer", cmd_infer, "predict an inference workload: static batch or request stream (TTFT, TPOT, tokens/s)"},
    {"topology", cmd_topology, "validate, summarise, list, route and draw a topology file"},
};
#define NCOMMANDS (sizeof COMMANDS / sizeof COMMANDS[0])

static void usage(FILE *f)
{
    fprintf(f, "usage: trainsim COMMAND [flags]   (trainsim COMMAND --help lists its flags)\n\ncommands:\n");
    for (size_t i = 0; i < NCOMMANDS; i++)
        fprintf(f, "  %-10s %s\n", COMMANDS[i].name, COMMANDS[i].summary);
    fprintf(f,
            "\nWith no command or with flags only, trainsim runs '%s'; with no flags it\n"
            "predicts GPT-3 175B on 1024 A100 80GB GPUs (DGX A100 nodes, HDR InfiniBand fat tree).\n",
            COMMANDS[0].name);
}

int main(int argc, char **argv)
{
    /* Every command writes its outputs through afile: on SIGINT, SIGTERM or
     * SIGHUP the handlers remove the temporaries, then the process dies of
     * the signal as it would have. */
    if (afile_install_signal_handlers() != TS_OK) {
        fprintf(stderr, "trainsim: cannot install the signal handlers that remove temporary files\n");
        return 1;
    }
    if (argc < 2)
        return COMMANDS[0].run(1, (char *[]){(char *)COMMANDS[0].name, NULL});
    if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
        usage(stdout);
        return 0;
    }
    for (size_t i = 0; i < NCOMMANDS; i++)
        if (!strcmp(argv[1], COMMANDS[i].name))
            return COMMANDS[i].run(argc - 1, argv + 1);
    if (argv[1][0] == '-') /* flags without a command */
        return COMMANDS[0].run(argc, argv);
    fprintf(stderr, "trainsim: unknown command '%s'; valid commands:", argv[1]);
    for (size_t i = 0; i < NCOMMANDS; i++)
        fprintf(stderr, " %s", COMMANDS[i].name);
    fprintf(stderr, " (trainsim --help)\n");
    return 2;
}
