/* megatron_flags: every argument of Megatron-LM's pretrain_gpt.py
 * (../shared/reference/megatron_arguments.csv) has exactly one treatment —
 * modelled (in the shared flag table) or one row of the shipped
 * megatron_flags.csv — with the kind the reference gives; the filter drops
 * ignored flags with their values, refuses the others with their reason and
 * leaves unknown flags to opt_parse; the loader rejects damaged files. Run
 * from the repository root. */
#include <criterion/criterion.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "sim/config/flags.h"
#include "sim/config/megatron_flags.h"
#include "sim/util/csvio.h"
#include "tests/unit/tmp_csv.h"

#define REFERENCE "../shared/reference/megatron_arguments.csv"

static ts_err E;

/* ------------------------------------------------ the shipped file against the reference */

static csvio_table *load_reference(void)
{
    csvio_table *ref = NULL;
    if (csvio_read(REFERENCE, NULL, 0, &ref, &E) != TS_OK)
        cr_skip_test(REFERENCE " not beside the checkout (%s): the shipped flag list is not checked", E.msg);
    return ref;
}

/* The shared flag table, as every command starts it. */
static void shared_table(opt_table *t, flags_state *s, config *c)
{
    opt_table_init(t, "test", NULL);
    cr_assert_eq(flags_register(s, t, c, &E), TS_OK, "%s", E.msg);
}

/* Whether name is the flag or one of the aliases of some reference row. */
static bool in_reference(const csvio_table *ref, const char *name)
{
    for (size_t r = 0; r < ref->nrows; r++) {
        if (!strcmp(csvio_cell(ref, r, "flag"), name))
            return true;
        char aliases[512];
        snprintf(aliases, sizeof aliases, "%s", csvio_cell(ref, r, "aliases"));
        for (char *save = NULL, *a = strtok_r(aliases, " ", &save); a; a = strtok_r(NULL, " ", &save))
            if (!strcmp(a, name))
                return true;
    }
    return false;
}

Test(megatron_flags, every_reference_flag_and_alias_has_exactly_one_treatment)
{
    csvio_table *ref = load_reference();
    opt_table t;
    flags_state s;
    config c;
    shared_table(&t, &s, &c);
    mflags_table *mt = NULL;
    cr_assert_eq(mflags_load(NULL, &mt, &E), TS_OK, "%s", E.msg);
    size_t names = 0, modelled = 0, rows = 0;
    for (size_t r = 0; r < ref->nrows; r++) {
        char list[1024];
        snprintf(list, sizeof list, "%s %s", csvio_cell(ref, r, "flag"), csvio_cell(ref, r, "aliases"));
        const char *kind = csvio_cell(ref, r, "kind");
        for (char *save = NULL, *name = strtok_r(list, " ", &save); name; name = strtok_r(NULL, " ", &save)) {
            names++;
            bool is_modelled = mflags_in_table(&t, name, strlen(name));
            const mflags_entry *e = mflags_find(mt, name);
            cr_expect(is_modelled || e,
                      "%s (reference line %d): no treatment: neither in the shared flag table "
                      "nor in topologies/megatron_flags.csv",
                      name, ref->rows[r].line);
            cr_expect(!(is_modelled && e), "%s: modelled (shared flag table) and also a row of the file (line %d)",
                      name, e ? e->line : 0);
            modelled += is_modelled;
            if (e) {
                rows++;
                cr_expect_str_eq(MFLAGS_KIND_NAMES[e->kind], kind, "%s (line %d): kind %s, the reference says %s", name,
                                 e->line, MFLAGS_KIND_NAMES[e->kind], kind);
            }
        }
    }
    cr_expect_eq(rows, mt->n, "the file has %zu rows, the reference names %zu of them", mt->n, rows);
    cr_expect_geq(modelled, 20, "only %zu reference flags are modelled", modelled);
    cr_expect_eq(names, modelled + rows);
    mflags_free(mt);
    flags_release(&s);
    config_free(&c);
    opt_table_free(&t);
    csvio_free(ref);
}

Test(megatron_flags, every_row_names_a_reference_flag)
{
    csvio_table *ref = load_reference();
    mflags_table *mt = NULL;
    cr_assert_eq(mflags_load(NULL, &mt, &E), TS_OK, "%s", E.msg);
    for (size_t i = 0; i < mt->n; i++)
        cr_expect(in_reference(ref, mt->entries[i].flag), "%s (line %d) is not a Megatron-LM flag of the reference",
                  mt->entries[i].flag, mt->entries[i].line);
    mflags_free(mt);
    csvio_free(ref);
}

/* Megatron's default value as given on a command line: lists lose their
 * brackets and quotes ("['p2p']" -> "p2p"), enums their class name. */
static void default_as_argument(const char *def, char *buf, size_t cap)
{
    size_t n = 0;
    const char *dot = strncmp(def, "AttnBackend.", 12) ? NULL : def + 11;
    for (const char *p = dot ? dot + 1 : def; *p && n + 1 < cap; p++)
        if (!strchr("[]'\"", *p))
            buf[n++] = *p;
    buf[n] = '\0';
}

/* Every default-only row accepts Megatron's default (through the filter),
 * but for the rows whose accepted value is what trainsim models instead. */
Test(megatron_flags, default_only_rows_accept_the_reference_default)
{
    static const char *const MODELLED_VALUE[] = {NULL};
    csvio_table *ref = load_reference();
    mflags_table *mt = NULL;
    cr_assert_eq(mflags_load(NULL, &mt, &E), TS_OK, "%s", E.msg);
    opt_table t;
    opt_table_init(&t, "test", NULL);
    size_t checked = 0;
    for (size_t r = 0; r < ref->nrows; r++) {
        const char *flag = csvio_cell(ref, r, "flag");
        const mflags_entry *e = mflags_find(mt, flag);
        if (!e || e->treatment != MFLAGS_DEFAULT_ONLY)
            continue;
        bool exception = false;
        for (size_t k = 0; MODELLED_VALUE[k]; k++)
            exception = exception || !strcmp(flag, MODELLED_VALUE[k]);
        char def[256];
        default_as_argument(csvio_cell(ref, r, "default"), def, sizeof def);
        char *argv[] = {"test", (char *)flag, def, NULL};
        mflags_filtered f;
        int rc = mflags_filter(mt, &t, 3, argv, &f, &E);
        if (exception) {
            cr_expect_eq(rc, TS_EINVAL, "%s %s: Megatron's default is not what trainsim models", flag, def);
        } else {
            cr_expect_eq(rc, TS_OK, "%s %s (line %d, accepted '%s'): %s", flag, def, e->line, e->accepted, E.msg);
            cr_expect_eq(rc ? 1 : f.argc, 1, "%s %s: not dropped", flag, def);
            cr_expect_null(rc ? NULL : f.ignored, "%s %s: a default-only flag is dropped silently", flag, def);
            checked++;
        }
        mflags_filtered_free(&f);
    }
    cr_expect_gt(checked, 50);
    opt_table_free(&t);
    mflags_free(mt);
    csvio_free(ref);
}

/* The flags the brief names as changing performance are never ignored. */
Test(megatron_flags, performance_flags_are_refused)
{
    static const char *const REFUSED[] = {"--fp8-output-proj",
                                          "--tp-comm-overlap-cfg",
                                          "--overlap-param-gather-with-optimizer-step",
                                          "--torch-fsdp2-no-reshard-after-forward",
                                          "--cpu-offloading-num-layers",
                                          "--flash-attention-version",
                                          "--moe-router-fusion",
                                          "--use-grouped-gemm-for-shared-expert",
                                          "--rampup-batch-size",
                                          "--optimizer",
                                          "--transformer-impl",
                                          NULL};
    mflags_table *mt = NULL;
    cr_assert_eq(mflags_load(NULL, &mt, &E), TS_OK, "%s", E.msg);
    for (size_t i = 0; REFUSED[i]; i++) {
        const mflags_entry *e = mflags_find(mt, REFUSED[i]);
        cr_assert_not_null(e, "%s not in the file", REFUSED[i]);
        cr_expect_neq(e->treatment, MFLAGS_IGNORED, "%s is ignored but changes performance", REFUSED[i]);
    }
    static const char *const IGNORED[] = {"--lr",   "--data-path",      "--log-interval",  "--save",          "--load",
                                          "--seed", "--tokenizer-type", "--wandb-project", "--eval-interval", NULL};
    for (size_t i = 0; IGNORED[i]; i++) {
        const mflags_entry *e = mflags_find(mt, IGNORED[i]);
        cr_assert_not_null(e, "%s not in the file", IGNORED[i]);
        cr_expect_eq(e->treatment, MFLAGS_IGNORED, "%s", IGNORED[i]);
    }
    mflags_free(mt);
}

/* ------------------------------------------------ the filter, on a small file */

static const char *FIXTURE = "# a comment\n"
                             "flag,treatment,reason,kind,accepted\n"
                             "--lr,ignored,learning-rate schedule,value,\n"
                             "--data-path,ignored,data path,list,\n"
                             "--log-params,ignored,logging,store_true,\n"
                             "--no-thing,ignored,logging,boolean_optional,\n"
                             "--num-experts,refused,mixture of experts,value,\n"
                             "--cp,default-only,context parallelism,value,1\n"
                             "--backend,default-only,attention kernels,value,unfused|local\n"
                             "--cp-comm,default-only,context parallelism,list,p2p\n"
                             "--num-layers,refused,shadowed by the table,value,\n";

static mflags_table *MT;
static opt_table T;
static int LAYERS;
static bool SP;
static mflags_filtered F;

static void setup(void)
{
    err_clear(&E);
    cr_assert_eq(mflags_load(tmp_csv(FIXTURE), &MT, &E), TS_OK, "%s", E.msg);
    opt_table_init(&T, "test", NULL);
    cr_assert_eq(opt_add(&T, &(opt_spec){.name = "--num-layers", .type = OPT_INT, .target = &LAYERS}, &E), TS_OK);
    cr_assert_eq(opt_add(&T, &(opt_spec){.name = "--sp", .alias = "-s", .type = OPT_BOOL, .target = &SP}, &E), TS_OK);
}

static void teardown(void)
{
    mflags_filtered_free(&F);
    opt_table_free(&T);
    mflags_free(MT);
    MT = NULL;
}

TestSuite(filter, .init = setup, .fini = teardown);

/* Filter a NULL-terminated list (after the command name). */
static int filter(const char *first, ...)
{
    static const char *argv[64];
    int argc = 0;
    argv[argc++] = "test";
    va_list ap;
    va_start(ap, first);
    for (const char *a = first; a && argc < 63; a = va_arg(ap, const char *))
        argv[argc++] = a;
    va_end(ap);
    argv[argc] = NULL;
    mflags_filtered_free(&F);
    err_clear(&E);
    return mflags_filter(MT, &T, argc, (char **)argv, &F, &E);
}

/* The filtered arguments after the command name, space-separated. */
static const char *kept(void)
{
    static char buf[512];
    size_t off = 0;
    buf[0] = '\0';
    for (int i = 1; i < F.argc; i++)
        off += (size_t)snprintf(buf + off, sizeof buf - off, "%s%s", i > 1 ? " " : "", F.argv[i]);
    cr_assert_null(F.argv[F.argc], "argv not NULL-terminated");
    return buf;
}

Test(filter, ignored_value_flag_is_dropped_with_its_value)
{
    cr_assert_eq(filter("--lr", "1e-4", "--num-layers", "4", NULL), TS_OK, "%s", E.msg);
    cr_expect_str_eq(kept(), "--num-layers 4");
    cr_expect_str_eq(F.ignored, "--lr");
    cr_expect_eq(F.n_ignored, 1);
    cr_assert_eq(filter("--lr=-3", "--num-layers=4", NULL), TS_OK, "%s", E.msg);
    cr_expect_str_eq(kept(), "--num-layers=4");
    cr_assert_eq(filter("--lr", "-3", NULL), TS_OK, "%s", E.msg); /* a negative number is a value */
    cr_expect_str_eq(kept(), "");
}

Test(filter, list_takes_every_argument_up_to_the_next_double_dash)
{
    cr_assert_eq(filter("--data-path", "0.3", "a", "-1", "-s", "b", "--num-layers", "2", NULL), TS_OK, "%s", E.msg);
    cr_expect_str_eq(kept(), "--num-layers 2");
    cr_assert_eq(filter("--data-path", NULL), TS_OK, "%s", E.msg); /* nargs='*': none is fine */
    cr_expect_str_eq(kept(), "");
    /* --flag=value takes that one value: what follows stays (opt_parse then
     * reports it as an unexpected argument, as argparse would) */
    cr_assert_eq(filter("--data-path=a", "b", NULL), TS_OK, "%s", E.msg);
    cr_expect_str_eq(kept(), "b");
}

Test(filter, switches_take_no_value)
{
    cr_assert_eq(filter("--log-params", "--no-thing", "--sp", NULL), TS_OK, "%s", E.msg);
    cr_expect_str_eq(kept(), "--sp");
    cr_expect_str_eq(F.ignored, "--log-params, --no-thing");
    cr_expect_eq(filter("--log-params=1", NULL), TS_EINVAL);
    cr_expect(strstr(E.msg, "--log-params: takes no value"), "%s", E.msg);
    cr_expect_null(F.argv, "nothing kept on failure");
}

Test(filter, ignored_flags_are_listed_once_in_the_order_given)
{
    cr_assert_eq(filter("--log-params", "--lr", "1", "--log-params", "--data-path", "x", "--lr=2", NULL), TS_OK, "%s",
                 E.msg);
    cr_expect_str_eq(F.ignored, "--log-params, --lr, --data-path");
    cr_expect_eq(F.n_ignored, 3);
}

Test(filter, value_flag_without_value_is_an_error)
{
    cr_expect_eq(filter("--lr", NULL), TS_EINVAL);
    cr_expect(strstr(E.msg, "--lr: missing value"), "%s", E.msg);
    cr_expect_eq(filter("--lr", "--num-layers", "3", NULL), TS_EINVAL);
}

Test(filter, refused_flag_names_what_it_changes)
{
    cr_expect_eq(filter("--num-layers", "2", "--num-experts", "8", NULL), TS_EINVAL);
    cr_expect_str_eq(E.msg, "--num-experts: not modelled: mixture of experts (Megatron-LM flag; remove it or see "
                            "docs/inputs.md#megatron-flags)");
}

Test(filter, default_only_passes_silently_at_its_value_and_is_refused_otherwise)
{
    cr_assert_eq(filter("--cp", "1", "--backend=local", "--cp-comm", "p2p", "p2p", NULL), TS_OK, "%s", E.msg);
    cr_expect_str_eq(kept(), "");
    cr_expect_null(F.ignored);
    cr_assert_eq(filter("--cp", "1.0", NULL), TS_OK, "%s", E.msg); /* numbers compare by value */
    cr_expect_eq(filter("--cp", "2", NULL), TS_EINVAL);
    cr_expect_str_eq(E.msg, "--cp 2: not modelled: context parallelism (Megatron-LM flag; trainsim accepts only --cp "
                            "1; remove it or see docs/inputs.md#megatron-flags)");
    cr_expect_eq(filter("--backend=flash", NULL), TS_EINVAL);
    cr_expect(strstr(E.msg, "--backend=flash: not modelled: attention kernels"), "%s", E.msg);
    cr_expect(strstr(E.msg, "accepts only --backend unfused or local"), "%s", E.msg);
    cr_expect_eq(filter("--cp-comm", "p2p", "a2a", NULL), TS_EINVAL);
    cr_expect(strstr(E.msg, "--cp-comm p2p a2a: not modelled"), "%s", E.msg);
    cr_expect_eq(filter("--cp-comm", NULL), TS_EINVAL, "no value is not the accepted value");
}

Test(filter, unknown_flags_and_table_flags_pass_through)
{
    cr_assert_eq(filter("--nope", "3", "--num-layers", "4", "-s", "pos", NULL), TS_OK, "%s", E.msg);
    cr_expect_str_eq(kept(), "--nope 3 --num-layers 4 -s pos");
    cr_expect_null(F.ignored);
    /* the table wins over a row of the file */
    cr_assert_eq(filter("--num-layers=4", NULL), TS_OK, "%s", E.msg);
    cr_expect_str_eq(kept(), "--num-layers=4");
}

Test(filter, nothing_is_filtered_after_the_separator_or_help)
{
    cr_assert_eq(filter("--lr", "1", "--", "--lr", "--num-experts", NULL), TS_OK, "%s", E.msg);
    cr_expect_str_eq(kept(), "-- --lr --num-experts");
    cr_assert_eq(filter("--help", "--num-experts", "8", NULL), TS_OK, "%s", E.msg);
    cr_expect_str_eq(kept(), "--help --num-experts 8");
    cr_assert_eq(filter("-h", "--num-experts", NULL), TS_OK, "%s", E.msg);
    cr_expect_str_eq(kept(), "-h --num-experts");
}

Test(filter, shipped_file_is_read_only_when_needed)
{
    opt_table t;
    opt_table_init(&t, "test", NULL);
    int layers = 0;
    cr_assert_eq(opt_add(&t, &(opt_spec){.name = "--num-layers", .type = OPT_INT, .target = &layers}, &E), TS_OK);
    const char *argv[] = {"test", "--num-layers", "2", "--lr", "1e-4", "--seed", "3", NULL};
    cr_assert_eq(mflags_filter(NULL, &t, 7, (char **)argv, &F, &E), TS_OK, "%s", E.msg);
    cr_expect_str_eq(kept(), "--num-layers 2");
    cr_expect_str_eq(F.ignored, "--lr, --seed");
    mflags_filtered_free(&F);
    /* all flags known: no file needed, even where none can be found */
    setenv("TRAINSIM_DATA_DIR", "/nonexistent", 1);
    cr_expect_eq(mflags_filter(NULL, &t, 3, (char **)argv, &F, &E), TS_OK, "%s", E.msg);
    mflags_filtered_free(&F);
    cr_expect_eq(mflags_filter(NULL, &t, 5, (char **)argv, &F, &E), TS_EIO);
    cr_expect(strstr(E.msg, "megatron_flags.csv not found"), "%s", E.msg);
    unsetenv("TRAINSIM_DATA_DIR");
    opt_table_free(&t);
}

/* ------------------------------------------------ flags_parse, print, damaged files */

Test(megatron_flags, flags_parse_drops_ignored_and_refuses)
{
    opt_table t;
    flags_state s;
    config c;
    shared_table(&t, &s, &c);
    const char *ok[] = {"test", "--lr", "1e-4",           "--num-layers", "8", "--data-path",
                        "a",    "b",    "--log-interval", "10",           NULL};
    cr_assert_eq(flags_parse(&s, &t, 10, (char **)ok, &E), TS_OK, "%s", E.msg);
    cr_expect_eq(c.model.num_layers, 8);
    cr_expect_str_eq(flags_ignored(&s), "--lr, --data-path, --log-interval");
    flags_release(&s);
    cr_expect_null(flags_ignored(&s));
    config_free(&c);
    opt_table_free(&t);
    shared_table(&t, &s, &c);
    const char *bad[] = {"test", "--moe-apply-probs-on-input", NULL};
    cr_expect_eq(flags_parse(&s, &t, 2, (char **)bad, &E), TS_EINVAL);
    cr_expect(strstr(E.msg, "--moe-apply-probs-on-input: not modelled: mixture of experts"), "%s", E.msg);
    flags_release(&s);
    config_free(&c);
    opt_table_free(&t);
}

Test(megatron_flags, print_lists_every_flag_with_counts)
{
    mflags_table *mt = NULL;
    cr_assert_eq(mflags_load(tmp_csv(FIXTURE), &mt, &E), TS_OK, "%s", E.msg);
    opt_table t;
    opt_table_init(&t, "test", NULL);
    int layers = 0;
    cr_assert_eq(opt_section(&t, "Model", &E), TS_OK);
    cr_assert_eq(opt_add(&t, &(opt_spec){.name = "--num-layers", .type = OPT_INT, .target = &layers}, &E), TS_OK);
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    cr_assert_eq(mflags_print(mt, &t, f, &E), TS_OK, "%s", E.msg);
    cr_assert_eq(fclose(f), 0);
    cr_expect(strstr(buf, "--num-layers"), "%s", buf);
    cr_expect(strstr(buf, " modelled "), "%s", buf);
    cr_expect(!strstr(buf, "shadowed"), "a row the table has is not printed: %s", buf);
    cr_expect(strstr(buf, "(accepted: unfused or local)"), "%s", buf);
    cr_expect(strstr(buf, "\n1 modelled, 1 refused, 4 ignored, 3 default-only\n"), "%s", buf);
    free(buf);
    opt_table_free(&t);
    mflags_free(mt);
}

static void expect_load_error(const char *rows, const char *want)
{
    char text[1024];
    snprintf(text, sizeof text, "flag,treatment,reason,kind,accepted\n--lr,ignored,lr,value,\n%s", rows);
    mflags_table *mt = NULL;
    cr_expect_eq(mflags_load(tmp_csv(text), &mt, &E), TS_EINVAL, "%s", rows);
    cr_expect(strstr(E.msg, want), "want '%s'\n got '%s'", want, E.msg);
    cr_expect_null(mt);
}

Test(megatron_flags, damaged_files_fail_with_file_line_and_column)
{
    expect_load_error("--lr,refused,x,value,\n", ":3: column 'flag': --lr listed twice (also line 2");
    expect_load_error("lr,ignored,x,value,\n", ":3: column 'flag': 'lr' is not a flag name");
    expect_load_error("--a=1,ignored,x,value,\n", "'--a=1' is not a flag name");
    expect_load_error("--a,modelled,x,value,\n", ":3: column 'treatment': 'modelled' is not valid");
    expect_load_error("--a,ignored,x,store,\n", ":3: column 'kind': 'store' is not valid");
    expect_load_error("--a,ignored,,value,\n", ":3: column 'reason'");
    expect_load_error("--a,default-only,x,value,\n", ":3: column 'accepted': --a: default-only needs the accepted");
    expect_load_error("--a,default-only,x,store_true,1\n", ":3: column 'kind': --a: default-only needs a flag that "
                                                           "takes values");
    expect_load_error("--a,refused,x,value,1\n", ":3: column 'accepted': --a: accepted values belong to default-only");
    mflags_table *mt = NULL;
    cr_expect_eq(mflags_load("/nonexistent/megatron_flags.csv", &mt, &E), TS_EIO);
}
