/* sched_layout: Megatron-core's pipeline layout strings (the Llama 3 405B
 * layout, repetition, nesting, errors with positions) and the uneven
 * splits every other flag reduces to. */
#include <criterion/criterion.h>
#include <string.h>

#include "sim/sched/sched_layout.h"

static sched_layout L;

static void parse_ok(const char *s)
{
    ts_err e = {0};
    int rc = sched_layout_parse(s, &L, &e);
    cr_assert_eq(rc, TS_OK, "'%s': %s", s, e.msg);
}

/* Parse s expecting failure; the message must contain want. */
static void parse_fails(const char *s, const char *want)
{
    ts_err e = {0};
    int rc = sched_layout_parse(s, &L, &e);
    cr_assert_eq(rc, TS_EINVAL, "'%s' parsed", s);
    cr_expect(strstr(e.msg, want) != NULL, "'%s': message '%s' lacks '%s'", s, e.msg, want);
    cr_expect_eq(L.n_stages, 0, "a failed parse leaves an empty layout");
}

Test(sched_layout, llama3_405b)
{
    parse_ok("Et*3|(t*4|)*30t*3L");
    cr_assert_eq(L.n_stages, 32);
    cr_expect_eq(L.num_layers, 126);
    cr_expect_eq(L.layers[0], 3);
    cr_expect_eq(L.layers[31], 3);
    for (int i = 1; i < 31; i++)
        cr_expect_eq(L.layers[i], 4, "stage %d", i);
    cr_expect_eq(L.emb_stage, 0);
    cr_expect_eq(L.loss_stage, 31);
    int v = 0;
    ts_err e = {0};
    cr_assert_eq(sched_layout_check(&L, 16, 126, &v, &e), TS_OK, "%s", e.msg);
    cr_expect_eq(v, 2);
    char buf[64];
    sched_layout_format(&L, buf, sizeof buf);
    cr_expect_str_eq(buf, "3 4x30 3");
}

Test(sched_layout, repetition_and_nesting)
{
    parse_ok("E((t|)*2t*2|)*2tL");
    /* ((t|)*2 t*2 |)*2 = t|t|tt| t|t|tt| then tL */
    int want[] = {1, 1, 2, 1, 1, 2, 1};
    cr_assert_eq(L.n_stages, 7);
    for (int i = 0; i < 7; i++)
        cr_expect_eq(L.layers[i], want[i], "stage %d", i);
    parse_ok("E t * 2 , | t*2 L"); /* blanks and commas are cosmetic */
    cr_expect_eq(L.n_stages, 2);
    cr_expect_eq(L.layers[0], 2);
    cr_expect_eq(L.layers[1], 2);
    parse_ok("E|t*8|t*8|L"); /* stages with the embedding or the loss only */
    cr_expect_eq(L.layers[0], 0);
    cr_expect_eq(L.layers[3], 0);
    parse_ok("Et||tL"); /* an empty stage, as Megatron-core allows */
    cr_expect_eq(L.n_stages, 3);
    cr_expect_eq(L.layers[1], 0);
    parse_ok("E(t)*1L");
    cr_expect_eq(L.num_layers, 1);
}

Test(sched_layout, errors_name_the_position)
{
    parse_fails("Et*3|(t*4|*30t*3L", "position 6 ('('): this '(' is never closed");
    parse_fails("Et*|tL", "position 4 ('|'): '*' needs a repetition count");
    parse_fails("Et*0|tL", "position 4 ('0'): repetition count 0");
    parse_fails("Etx|tL", "position 3 ('x'): valid: E (embedding)");
    parse_fails("t|EtL", "position 3 ('E'): E must be in the first stage");
    parse_fails("tE|tL", "position 2 ('E'): E must come before");
    parse_fails("EEt|tL", "position 2 ('E'): E appears more than once");
    parse_fails("Et|tL|", "position 5 ('L'): L must be in the last stage");
    parse_fails("Et|tLt", "position 6 ('t'): t after L");
    parse_fails("Et|tLL", "position 6 ('L'): L appears more than once");
    parse_fails("Et)|tL", "position 3 (')'): ')' without a matching '('");
    parse_fails("E*2t|tL", "E appears more than once");
    parse_fails("*3Et|tL", "position 1 ('*'): '*' must follow");
    parse_fails("Et|tmL", "position 5 ('m'): multi-token prediction");
    parse_fails("t|tL", "no E");
    parse_fails("Et|t", "no L");
    parse_fails("", "no E");
    parse_fails("Et*9999999L", "repetition count above 1000000");
    parse_fails("E(t|)*1024L", "position 4 ('|'): more than 1024 virtual stages");
    parse_fails("E((((t*1000)*1000)*1000)*1000)L", "more than 1000000 transformer layers");
    parse_fails("E((()*1000000)*1000000)L", "more than 10^7 items");
    char deep[80] = "E";
    memset(deep + 1, '(', 33); /* E then 33 '(' */
    deep[34] = '\0';
    parse_fails(deep, "nested more than 32 deep");
}

Test(sched_layout, check_against_the_run)
{
    ts_err e = {0};
    int v = 0;
    parse_ok("Et*3|(t*4|)*30t*3L");
    cr_expect_eq(sched_layout_check(&L, 5, 126, &v, &e), TS_EINVAL);
    cr_expect(strstr(e.msg, "32 virtual stages is not a multiple of --pipeline-model-parallel-size 5"), "%s", e.msg);
    cr_expect_eq(sched_layout_check(&L, 16, 128, &v, &e), TS_EINVAL);
    cr_expect(strstr(e.msg, "hold 126 transformer layers (t) but --num-layers is 128"), "%s", e.msg);
    cr_expect_eq(sched_layout_check(&L, 32, 126, &v, &e), TS_OK);
    cr_expect_eq(v, 1);
}

Test(sched_layout, even)
{
    ts_err e = {0};
    cr_assert_eq(sched_layout_even(&L, 8, 96, &e), TS_OK);
    cr_expect_eq(L.layers[7], 12);
    cr_expect(sched_layout_is_even(&L));
    cr_expect_eq(sched_layout_even(&L, 8, 100, &e), TS_EINVAL);
    cr_expect_eq(sched_layout_even(&L, 2048, 4096, &e), TS_EINVAL);
}

/* Megatron-core's rank-level first/last split with interleaving: rank 0's
 * and rank p-1's layers spread evenly over their chunks. */
Test(sched_layout, first_last_interleaved)
{
    ts_err e = {0};
    /* p 4, v 2: rank 0 holds 4 (2 per chunk), rank 3 holds 2 (1 per chunk),
     * ranks 1-2 hold (30 - 6) / 2 = 12 (6 per chunk). */
    cr_assert_eq(sched_layout_first_last(&L, 4, 2, 30, 4, 2, &e), TS_OK, "%s", e.msg);
    int want[] = {2, 6, 6, 1, 2, 6, 6, 1};
    for (int i = 0; i < 8; i++)
        cr_expect_eq(L.layers[i], want[i], "stage %d", i);
    cr_expect_eq(L.num_layers, 30);
    /* v = 1 is the classic split */
    cr_assert_eq(sched_layout_first_last(&L, 4, 1, 30, 7, 7, &e), TS_OK, "%s", e.msg);
    cr_expect_eq(L.layers[0], 7);
    cr_expect_eq(L.layers[1], 8);
    cr_expect_eq(L.layers[3], 7);
    cr_expect_eq(sched_layout_first_last(&L, 4, 2, 30, 3, 1, &e), TS_EINVAL);
    cr_expect(strstr(e.msg, "multiples of the 2 chunks"), "%s", e.msg);
    cr_expect_eq(sched_layout_first_last(&L, 4, 2, 30, 4, 4, &e), TS_EINVAL);
    cr_expect(strstr(e.msg, "leaves 22 layers"), "%s", e.msg);
    cr_expect_eq(sched_layout_first_last(&L, 2, 2, 8, 4, 4, &e), TS_OK, "%s", e.msg);
}

Test(sched_layout, account_for_embedding_and_loss)
{
    ts_err e = {0};
    /* Llama 3 405B's published layout is the account-for form: 126 + 2 = 128 = 32 x 4. */
    cr_assert_eq(sched_layout_account(&L, 16, 2, 126, true, true, &e), TS_OK, "%s", e.msg);
    sched_layout parsed;
    cr_assert_eq(sched_layout_parse("Et*3|(t*4|)*30t*3L", &parsed, &e), TS_OK);
    cr_expect_eq(memcmp(&L, &parsed, sizeof L), 0);
    cr_assert_eq(sched_layout_account(&L, 4, 1, 31, true, false, &e), TS_OK, "%s", e.msg);
    cr_expect_eq(L.layers[0], 7);
    cr_expect_eq(L.layers[3], 8);
    cr_assert_eq(sched_layout_account(&L, 4, 1, 3, true, false, &e), TS_OK, "%s", e.msg);
    cr_expect_eq(L.layers[0], 0, "a stage with the embedding only");
    cr_expect_eq(sched_layout_account(&L, 16, 2, 128, true, true, &e), TS_EINVAL);
    cr_expect(strstr(e.msg, "use --num-layers 126 or 158"), "%s", e.msg);
}

Test(sched_layout, format_truncates_whole_items)
{
    ts_err e = {0};
    cr_assert_eq(sched_layout_first_last(&L, 4, 1, 30, 7, 7, &e), TS_OK);
    char buf[8];
    size_t n = sched_layout_format(&L, buf, sizeof buf);
    cr_expect_eq(n, strlen("7 8x2 7"));
    cr_expect_str_eq(buf, "7 8x2 7");
    char tiny[4];
    sched_layout_format(&L, tiny, sizeof tiny);
    cr_expect_str_eq(tiny, "7");
}
