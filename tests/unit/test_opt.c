/* opt: flag parsing, every error message, help text. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "sim/util/opt.h"

static const char *const COLORS[] = {"red", "green", "blue", NULL};

typedef struct {
    int layers;
    int64_t tokens;
    double bw;
    bool swiglu;
    const char *file;
    int color;
} vals;

static opt_table T;
static vals V;
static ts_err E;

static void setup(void)
{
    memset(&V, 0, sizeof V);
    V.layers = 24;
    V.bw = 25;
    V.color = 1;
    err_clear(&E);
    opt_table_init(&T, "trainsim test", "A table for tests.");
    cr_assert_eq(opt_section(&T, "Model", &E), TS_OK);
    cr_assert_eq(opt_add(&T,
                         &(opt_spec){.name = "--num-layers",
                                     .type = OPT_INT,
                                     .target = &V.layers,
                                     .min = 1,
                                     .max = 1000,
                                     .unit = "layers",
                                     .help = "transformer layers"},
                         &E),
                 TS_OK);
    cr_assert_eq(opt_add(&T,
                         &(opt_spec){.name = "--train-tokens",
                                     .type = OPT_INT64,
                                     .target = &V.tokens,
                                     .min = 0,
                                     .max = 1e15,
                                     .unit = "tokens",
                                     .help = "tokens"},
                         &E),
                 TS_OK);
    cr_assert_eq(opt_add(&T,
                         &(opt_spec){.name = "--nic-bandwidth",
                                     .alias = "-b",
                                     .type = OPT_DOUBLE,
                                     .target = &V.bw,
                                     .min = 0.001,
                                     .max = 1e4,
                                     .unit = "GB/s",
                                     .help = "NIC bandwidth"},
                         &E),
                 TS_OK);
    cr_assert_eq(
        opt_add(&T, &(opt_spec){.name = "--swiglu", .type = OPT_BOOL, .target = &V.swiglu, .help = "SwiGLU MLP"}, &E),
        TS_OK);
    cr_assert_eq(
        opt_add(
            &T,
            &(opt_spec){
                .name = "--topology", .type = OPT_STRING, .target = &V.file, .metavar = "FILE", .help = "topology CSV"},
            &E),
        TS_OK);
    cr_assert_eq(
        opt_add(&T,
                &(opt_spec){
                    .name = "--color", .type = OPT_ENUM, .target = &V.color, .enum_names = COLORS, .help = "a color"},
                &E),
        TS_OK);
}

static void teardown(void)
{
    opt_table_free(&T);
}

static int parse(int argc, const char **argv)
{
    return opt_parse(&T, argc, (char **)argv, &E);
}

TestSuite(opt, .init = setup, .fini = teardown);

Test(opt, parses_both_forms_and_records_set)
{
    const char *a[] = {"cmd",        "--num-layers", "96",           "--nic-bandwidth=12.5", "--swiglu",
                       "--topology", "x.csv",        "--color=blue", "--train-tokens",       "300000000000"};
    cr_assert_eq(parse(10, a), TS_OK, "%s", E.msg);
    cr_expect_eq(V.layers, 96);
    cr_expect_float_eq(V.bw, 12.5, 1e-12);
    cr_expect(V.swiglu);
    cr_expect_str_eq(V.file, "x.csv");
    cr_expect_eq(V.color, 2);
    cr_expect_eq(V.tokens, 300000000000LL);
    cr_expect(opt_was_set(&T, "--num-layers"));
    cr_expect(opt_target_set(&T, &V.bw));
    cr_expect(!opt_was_set(&T, "--no-such"));
}

Test(opt, alias_and_unset_flags_keep_values)
{
    const char *a[] = {"cmd", "-b", "50"};
    cr_assert_eq(parse(3, a), TS_OK, "%s", E.msg);
    cr_expect_float_eq(V.bw, 50.0, 1e-12);
    cr_expect(opt_was_set(&T, "--nic-bandwidth"));
    cr_expect(!opt_was_set(&T, "--num-layers"));
    cr_expect_eq(V.layers, 24);
}

Test(opt, switch_accepts_explicit_false)
{
    V.swiglu = true;
    const char *a[] = {"cmd", "--swiglu=false"};
    cr_assert_eq(parse(2, a), TS_OK, "%s", E.msg);
    cr_expect(!V.swiglu);
    const char *b[] = {"cmd", "--color=red", "--swiglu=maybe"};
    opt_table_free(&T);
    setup();
    cr_assert_eq(parse(3, b), TS_EINVAL);
    cr_expect(strstr(E.msg, "--swiglu") && strstr(E.msg, "maybe"), "%s", E.msg);
}

Test(opt, unknown_flag_names_nearest)
{
    const char *a[] = {"cmd", "--num-layer", "4"};
    cr_assert_eq(parse(3, a), TS_EINVAL);
    cr_expect(strstr(E.msg, "unknown flag '--num-layer'"), "%s", E.msg);
    cr_expect(strstr(E.msg, "did you mean --num-layers?"), "%s", E.msg);
    const char *b[] = {"cmd", "--topolgy=x"};
    cr_assert_eq(parse(2, b), TS_EINVAL);
    cr_expect(strstr(E.msg, "'--topolgy'") && strstr(E.msg, "--topology"), "%s", E.msg);
}

Test(opt, missing_value)
{
    const char *a[] = {"cmd", "--num-layers"};
    cr_assert_eq(parse(2, a), TS_EINVAL);
    cr_expect(strstr(E.msg, "--num-layers: missing value"), "%s", E.msg);
    cr_expect(strstr(E.msg, "layers"), "%s", E.msg);
    const char *b[] = {"cmd", "--color", "--swiglu"};
    cr_assert_eq(parse(3, b), TS_EINVAL);
    cr_expect(strstr(E.msg, "--color: missing value") && strstr(E.msg, "red|green|blue"), "%s", E.msg);
}

Test(opt, non_number_and_trailing_junk)
{
    const char *a[] = {"cmd", "--num-layers", "abc"};
    cr_assert_eq(parse(3, a), TS_EINVAL);
    cr_expect(strstr(E.msg, "--num-layers: 'abc' is not an integer"), "%s", E.msg);
    cr_expect(strstr(E.msg, "[1, 1000] layers"), "%s", E.msg);
    opt_table_free(&T);
    setup();
    const char *b[] = {"cmd", "--num-layers=12x"};
    cr_assert_eq(parse(2, b), TS_EINVAL);
    cr_expect(strstr(E.msg, "'12x' is not an integer"), "%s", E.msg);
    opt_table_free(&T);
    setup();
    const char *c[] = {"cmd", "--nic-bandwidth", "2.5.1"};
    cr_assert_eq(parse(3, c), TS_EINVAL);
    cr_expect(strstr(E.msg, "'2.5.1' is not a finite number"), "%s", E.msg);
    opt_table_free(&T);
    setup();
    const char *h[] = {"cmd", "--nic-bandwidth", "0x10"};
    cr_assert_eq(parse(3, h), TS_EINVAL);
    cr_expect(strstr(E.msg, "'0x10' is not a finite number"), "%s", E.msg);
    opt_table_free(&T);
    setup();
    const char *d[] = {"cmd", "--nic-bandwidth", "inf"};
    cr_assert_eq(parse(3, d), TS_EINVAL);
    cr_expect(strstr(E.msg, "'inf'"), "%s", E.msg);
}

Test(opt, out_of_range_says_range)
{
    const char *a[] = {"cmd", "--num-layers", "0"};
    cr_assert_eq(parse(3, a), TS_EINVAL);
    cr_expect(strstr(E.msg, "--num-layers: 0 is out of range (valid: 1 to 1000 layers)"), "%s", E.msg);
    opt_table_free(&T);
    setup();
    const char *b[] = {"cmd", "-b", "-3"};
    cr_assert_eq(parse(3, b), TS_EINVAL);
    cr_expect(strstr(E.msg, "--nic-bandwidth: -3 is out of range") && strstr(E.msg, "GB/s"), "%s", E.msg);
}

Test(opt, bad_enum_lists_names)
{
    const char *a[] = {"cmd", "--color", "purple"};
    cr_assert_eq(parse(3, a), TS_EINVAL);
    cr_expect(strstr(E.msg, "--color: 'purple' is not valid (valid: red|green|blue)"), "%s", E.msg);
}

Test(opt, flag_given_twice)
{
    const char *a[] = {"cmd", "--num-layers", "4", "--num-layers=5"};
    cr_assert_eq(parse(4, a), TS_EINVAL);
    cr_expect(strstr(E.msg, "--num-layers given twice"), "%s", E.msg);
    opt_table_free(&T);
    setup();
    const char *b[] = {"cmd", "-b", "4", "--nic-bandwidth=5"};
    cr_assert_eq(parse(4, b), TS_EINVAL);
    cr_expect(strstr(E.msg, "--nic-bandwidth given twice"), "%s", E.msg);
}

Test(opt, positional_rejected_unless_allowed)
{
    const char *a[] = {"cmd", "stray"};
    cr_assert_eq(parse(2, a), TS_EINVAL);
    cr_expect(strstr(E.msg, "unexpected argument 'stray'"), "%s", E.msg);
    opt_table_free(&T);
    setup();
    T.max_positional = 1;
    const char *b[] = {"cmd", "in.csv", "--num-layers", "3"};
    cr_assert_eq(parse(4, b), TS_OK, "%s", E.msg);
    cr_expect_eq(T.n_positional, 1);
    cr_expect_str_eq(T.positional[0], "in.csv");
}

Test(opt, help_flag_and_text)
{
    const char *a[] = {"cmd", "--num-layers", "7", "--help"};
    cr_assert_eq(parse(4, a), TS_OK);
    cr_expect(T.help_requested);
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    opt_help(&T, f);
    cr_assert_eq(fclose(f), 0);
    cr_expect(strstr(buf, "usage: trainsim test"), "%s", buf);
    cr_expect(strstr(buf, "Model:"), "%s", buf);
    cr_expect(strstr(buf, "--num-layers INT"), "%s", buf);
    cr_expect(strstr(buf, "unit: layers; default: 24; range: 1 to 1000"), "%s", buf);
    cr_expect(strstr(buf, "-b, --nic-bandwidth NUM"), "%s", buf);
    cr_expect(strstr(buf, "unit: GB/s; default: 25"), "%s", buf);
    cr_expect(strstr(buf, "[red|green|blue]") && strstr(buf, "default: green"), "%s", buf);
    cr_expect(strstr(buf, "--topology FILE"), "%s", buf);
    free(buf);
}

Test(opt, spec_errors_are_programming_errors)
{
    int x;
    cr_expect_eq(opt_add(&T, &(opt_spec){.name = "--num-layers", .type = OPT_INT, .target = &x}, &E), TS_ESTATE);
    cr_expect(strstr(E.msg, "registered twice"), "%s", E.msg);
    cr_expect_eq(opt_add(&T, &(opt_spec){.name = "-x", .type = OPT_INT, .target = &x}, &E), TS_ESTATE);
    cr_expect_eq(opt_add(&T, &(opt_spec){.name = "--e", .type = OPT_ENUM, .target = &x}, &E), TS_ESTATE);
}

Test(opt, edit_distance)
{
    cr_expect_eq(opt_edit_distance("kitten", "sitting"), 3);
    cr_expect_eq(opt_edit_distance("", "abc"), 3);
    cr_expect_eq(opt_edit_distance("same", "same"), 0);
    cr_expect_str_eq(opt_nearest(&T, "--swiglo"), "--swiglu");
}

Test(opt, find_by_long_name)
{
    const opt_spec *s = opt_find(&T, "--nic-bandwidth");
    cr_assert_not_null(s);
    cr_expect_str_eq(s->name, "--nic-bandwidth");
    cr_expect_null(opt_find(&T, "-b"), "an alias is not a long name");
    cr_expect_null(opt_find(&T, "--no-such-flag"));
}

Test(opt, many_flags_keep_their_defaults)
{
    /* the table grows (realloc) past 32 entries: defaults must survive the move */
    static int many[40];
    static char names[40][32];
    for (int i = 0; i < 40; i++) {
        many[i] = 100 + i;
        snprintf(names[i], sizeof names[i], "--flag-%d", i);
        cr_assert_eq(opt_add(&T, &(opt_spec){.name = names[i], .type = OPT_INT, .target = &many[i], .unit = "u"}, &E),
                     TS_OK);
    }
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    opt_help(&T, f);
    cr_assert_eq(fclose(f), 0);
    cr_expect(strstr(buf, "--flag-0 INT\n"), "%s", buf);
    cr_expect(strstr(buf, "unit: u; default: 100\n"), "%s", buf);
    cr_expect(strstr(buf, "unit: u; default: 139\n"), "%s", buf);
    cr_expect(strstr(buf, "unit: layers; default: 24;"), "%s", buf);
    free(buf);
    const char *a[] = {"cmd", "--flag-39=5"};
    cr_assert_eq(parse(2, a), TS_OK, "%s", E.msg);
    cr_expect_eq(many[39], 5);
}
