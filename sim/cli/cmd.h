/* cmd — the trainsim subcommands. Each takes the arguments after its name
 * (argv[0] is the subcommand name), prints its own output and errors, and
 * returns the process exit status: 0 success, 1 run failure, 2 bad usage. */
#ifndef TRAINSIM_CLI_CMD_H
#define TRAINSIM_CLI_CMD_H

/* Each subcommand adds its prototype here and its row to COMMANDS in main.c
 * ("simulate" goes first: it is what runs with no command). */

/* trainsim simulate: predict one training iteration (sim/core/simulate.h). */
int cmd_simulate(int argc, char **argv);

/* trainsim config: validate flags, print the resolved configuration. */
int cmd_config(int argc, char **argv);
/* trainsim calibrate: microbenchmark samples -> calibration CSV (cmd_calibrate.c). */
int cmd_calibrate(int argc, char **argv);
/* search: fastest layout that fits (cmd_search.c) */
int cmd_search(int argc, char **argv);
/* sweep: simulate every row of a CSV, resumably (cmd_sweep.c) */
int cmd_sweep(int argc, char **argv);

/* trainsim schedule: generate/import, validate, print, time and export a
 * pipeline schedule (cmd_schedule.c). */
int cmd_schedule(int argc, char **argv);

#endif
