/* cmd — the trainsim subcommands. Each takes the arguments after its name
 * (argv[0] is the subcommand name), prints its own output and errors, and
 * returns the process exit status (cmd_exit_status below). */
#ifndef TRAINSIM_CLI_CMD_H
#define TRAINSIM_CLI_CMD_H

/* trainsim simulate's status when the simulated run does not fit in the
 * GPU's memory (its peak, overheads included, above the HBM of some rank):
 * the report is printed in full, its first line saying so. Distinct from
 * 1 and 2 so that scripts can tell "ran, but would run out of memory" from
 * a failure or bad input. */
#define CMD_EXIT_DOES_NOT_FIT 3

/* The exit status of every subcommand for a library status code:
 *
 *   0  TS_OK       success
 *   2  TS_EINVAL   bad usage or input: a flag, a value, a configuration
 *                  that cannot run, a bad cell in an input file
 *   1  any other   the run failed: a file that cannot be opened, read or
 *                  written (TS_EIO), out of memory (TS_ENOMEM), an internal
 *                  error (TS_ESTATE), a request this build cannot serve
 *                  (TS_ENOTSUP)
 *
 *   3  (simulate only) the run does not fit in memory: CMD_EXIT_DOES_NOT_FIT
 *
 * A failure with no status code gets the status of its kind: 2 for bad usage
 * (an unknown command, flags that do not go together), 1 when the run failed
 * (search: no layout fits). Every malformed input file is bad input (2), the
 * schedule of --import and calibrate's --microbench samples included; a file
 * that cannot be read is a failure (1). */
int cmd_exit_status(int rc);

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

/* trainsim infer: one inference workload, static batch or request stream
 * (cmd_infer.c); search --inference dispatches to cmd_search_inference. */
int cmd_infer(int argc, char **argv);
int cmd_search_inference(int argc, char **argv);

/* trainsim schedule: generate/import, validate, print, time and export a
 * pipeline schedule (cmd_schedule.c). */
int cmd_schedule(int argc, char **argv);

/* trainsim topology: validate, summarise, list, route and draw a topology
 * file (cmd_topology.c). */
int cmd_topology(int argc, char **argv);

#endif
