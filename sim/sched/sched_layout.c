#include "sim/sched/sched_layout.h"

#include <stdio.h>
#include <string.h>

#define MAX_DEPTH  32
#define MAX_REPEAT 1000000
/* Atoms expanded, in all: bounds the work of repeated empty groups. */
#define MAX_WORK 10000000L

static const char VALID[] = "valid: E (embedding), t (transformer layer), L (loss), | (stage boundary), "
                            "( ) (group), *N (repeat the previous item or group N times)";

/* Parser state: the string, the position, the layout being filled. */
typedef struct {
    const char *s;
    size_t pos;
    sched_layout *out;
    int depth;
    long work;
    size_t e_pos, l_pos; /* 1-based positions of E and L; 0 = not seen */
    int l_stage;
    ts_err *err;
} lparse;

/* The error at string position at (0-based), naming what is there. */
static int fail_at(lparse *P, size_t at, const char *what)
{
    char c = P->s[at];
    if (c)
        return err_set(P->err, TS_EINVAL, "pipeline layout '%.200s', position %zu ('%c'): %s", P->s, at + 1, c, what);
    return err_set(P->err, TS_EINVAL, "pipeline layout '%.200s', position %zu (end of the string): %s", P->s, at + 1,
                   what);
}

static void skip_blank(lparse *P)
{
    while (P->s[P->pos] == ' ' || P->s[P->pos] == ',' || P->s[P->pos] == '\t')
        P->pos++;
}

static int parse_items(lparse *P, bool in_group);

/* One atom at P->pos (blanks skipped). */
static int parse_atom(lparse *P)
{
    sched_layout *o = P->out;
    size_t at = P->pos;
    char c = P->s[at];
    if (++P->work > MAX_WORK)
        return fail_at(P, at, "the layout expands to more than 10^7 items; use fewer repetitions");
    switch (c) {
    case 'E':
        if (P->e_pos)
            return fail_at(P, at, "E appears more than once (one embedding, at the start of the first stage)");
        if (o->n_stages > 1)
            return fail_at(P, at, "E must be in the first stage (the embedding is on stage 0)");
        if (o->layers[0] > 0)
            return fail_at(P, at, "E must come before the first stage's layers ('Et*4|...')");
        P->e_pos = at + 1;
        break;
    case 't':
        if (P->l_pos)
            return fail_at(P, at, "t after L: the loss ends the last stage ('...t*4L')");
        if (o->num_layers >= SCHED_LAYOUT_MAX_LAYERS)
            return fail_at(P, at, "the layout expands to more than 1000000 transformer layers");
        o->layers[o->n_stages - 1]++;
        o->num_layers++;
        break;
    case 'L':
        if (P->l_pos)
            return fail_at(P, at, "L appears more than once (one loss, at the end of the last stage)");
        P->l_pos = at + 1;
        P->l_stage = o->n_stages - 1;
        break;
    case '|':
        if (o->n_stages >= SCHED_LAYOUT_MAX_STAGES)
            return fail_at(P, at, "more than 1024 virtual stages");
        o->layers[o->n_stages++] = 0;
        break;
    case '(': {
        if (P->depth >= MAX_DEPTH)
            return fail_at(P, at, "groups nested more than 32 deep");
        P->pos++;
        P->depth++;
        int rc = parse_items(P, true);
        P->depth--;
        if (rc)
            return rc;
        if (P->s[P->pos] != ')')
            return fail_at(P, at, "this '(' is never closed; add ')'");
        break;
    }
    case 'm':
        return fail_at(P, at,
                       "multi-token prediction layers (m) are not modelled by trainsim; use E, t, L, |, ( ), *N");
    case ')':
        return fail_at(P, at, "')' without a matching '('");
    case '*':
        return fail_at(P, at, "'*' must follow an item or a group ('t*4', '(t|)*2')");
    default:
        return fail_at(P, at, VALID);
    }
    P->pos++;
    return TS_OK;
}

/* An atom and its optional '*N': the atom is parsed again N-1 times. */
static int parse_item(lparse *P)
{
    size_t start = P->pos;
    int rc = parse_atom(P);
    if (rc)
        return rc;
    skip_blank(P);
    if (P->s[P->pos] != '*')
        return TS_OK;
    P->pos++; /* the '*' */
    skip_blank(P);
    if (P->s[P->pos] < '0' || P->s[P->pos] > '9')
        return fail_at(P, P->pos, "'*' needs a repetition count, a whole number >= 1 ('t*4')");
    size_t num_at = P->pos;
    long n = 0;
    while (P->s[P->pos] >= '0' && P->s[P->pos] <= '9') {
        n = n * 10 + (P->s[P->pos++] - '0');
        if (n > MAX_REPEAT)
            return fail_at(P, num_at, "repetition count above 1000000");
    }
    if (n < 1)
        return fail_at(P, num_at, "repetition count 0; use a whole number >= 1 (or drop the item)");
    size_t after = P->pos;
    for (long k = 1; k < n; k++) {
        P->pos = start;
        if ((rc = parse_atom(P)))
            return rc;
    }
    P->pos = after;
    return TS_OK;
}

/* Items until the end of the string, or ')' inside a group. */
static int parse_items(lparse *P, bool in_group)
{
    for (;;) {
        skip_blank(P);
        char c = P->s[P->pos];
        if (c == '\0' || (c == ')' && in_group))
            return TS_OK;
        int rc = parse_item(P);
        if (rc)
            return rc;
    }
}

static void set_ends(sched_layout *l)
{
    l->emb_stage = 0;
    l->loss_stage = l->n_stages - 1;
}

int sched_layout_parse(const char *str, sched_layout *out, ts_err *err)
{
    memset(out, 0, sizeof *out);
    out->n_stages = 1;
    lparse P = {.s = str ? str : "", .out = out, .err = err};
    int rc = parse_items(&P, false);
    if (rc == TS_OK && !P.e_pos)
        rc = err_set(err, TS_EINVAL,
                     "pipeline layout '%.200s': no E; the embedding must start the first stage ('Et*4|...')", P.s);
    if (rc == TS_OK && !P.l_pos)
        rc = err_set(err, TS_EINVAL, "pipeline layout '%.200s': no L; the loss must end the last stage ('...|t*4L')",
                     P.s);
    if (rc == TS_OK && P.l_stage != out->n_stages - 1)
        rc = fail_at(&P, P.l_pos - 1, "L must be in the last stage (nothing but blanks may follow it)");
    if (rc == TS_OK)
        set_ends(out);
    else
        memset(out, 0, sizeof *out);
    return rc;
}

int sched_layout_check(const sched_layout *l, int p, int num_layers, int *v, ts_err *err)
{
    if (p < 1 || l->n_stages < 1 || l->n_stages % p)
        return err_set(err, TS_EINVAL,
                       "pipeline layout: %d virtual stages is not a multiple of --pipeline-model-parallel-size %d "
                       "(list p x v stages, v chunks per rank)",
                       l->n_stages, p);
    if (l->num_layers != num_layers)
        return err_set(err, TS_EINVAL,
                       "pipeline layout: its stages hold %d transformer layers (t) but --num-layers is %d (give "
                       "--num-layers %d, or change the t counts)",
                       l->num_layers, num_layers, l->num_layers);
    *v = l->n_stages / p;
    return TS_OK;
}

static int check_stages(int stages, ts_err *err)
{
    if (stages < 1 || stages > SCHED_LAYOUT_MAX_STAGES)
        return err_set(err, TS_EINVAL, "%d virtual pipeline stages (p x v): must be in [1, %d]", stages,
                       SCHED_LAYOUT_MAX_STAGES);
    return TS_OK;
}

int sched_layout_even(sched_layout *out, int stages, int num_layers, ts_err *err)
{
    memset(out, 0, sizeof *out);
    int rc = check_stages(stages, err);
    if (rc)
        return rc;
    if (num_layers < stages || num_layers % stages)
        return err_set(err, TS_EINVAL,
                       "--num-layers %d does not split evenly over %d virtual pipeline stages (use a multiple of %d)",
                       num_layers, stages, stages);
    out->n_stages = stages;
    out->num_layers = num_layers;
    for (int i = 0; i < stages; i++)
        out->layers[i] = num_layers / stages;
    set_ends(out);
    return TS_OK;
}

int sched_layout_first_last(sched_layout *out, int p, int v, int num_layers, int first, int last, ts_err *err)
{
    memset(out, 0, sizeof *out);
    if (p < 1 || v < 1)
        return err_set(err, TS_EINVAL, "pipeline size %d and chunks per rank %d must be >= 1", p, v);
    int rc = check_stages(p * v, err);
    if (rc)
        return rc;
    if (first < 0 || last < 0)
        return err_set(err, TS_EINVAL, "first/last stage layers must be >= 0 (0 = even share), got %d/%d", first, last);
    int ends = (first > 0) + (last > 0);
    if (ends > p)
        return err_set(err, TS_EINVAL,
                       "--decoder-first-pipeline-num-layers and --decoder-last-pipeline-num-layers need "
                       "--pipeline-model-parallel-size >= 2 (got %d)",
                       p);
    if (first % v || last % v)
        return err_set(err, TS_EINVAL,
                       "--decoder-first/last-pipeline-num-layers %d/%d must be multiples of the %d chunks per "
                       "pipeline rank (Megatron-core splits a rank's layers evenly over its chunks)",
                       first, last, v);
    long rest = (long)num_layers - first - last;
    int mid = p - ends;
    if (rest < (long)mid * v || (mid == 0 && rest != 0) || (mid > 0 && rest % ((long)mid * v)))
        return err_set(err, TS_EINVAL,
                       "--num-layers %d minus the first/last pipeline stage layers (%d + %d) leaves %ld layers for "
                       "the other %d pipeline ranks of %d chunks each; they must split evenly with at least one "
                       "layer per chunk",
                       num_layers, first, last, rest, mid, v);
    int per_mid = mid ? (int)(rest / ((long)mid * v)) : 0;
    out->n_stages = p * v;
    out->num_layers = num_layers;
    for (int c = 0; c < v; c++)
        for (int r = 0; r < p; r++) {
            int n = per_mid;
            if (r == 0 && first)
                n = first / v;
            else if (r == p - 1 && last)
                n = last / v;
            out->layers[c * p + r] = n;
        }
    set_ends(out);
    return TS_OK;
}

int sched_layout_account(sched_layout *out, int p, int v, int num_layers, bool emb, bool loss, ts_err *err)
{
    memset(out, 0, sizeof *out);
    if (p < 1 || v < 1)
        return err_set(err, TS_EINVAL, "pipeline size %d and chunks per rank %d must be >= 1", p, v);
    int S = p * v, rc = check_stages(S, err);
    if (rc)
        return rc;
    long total = (long)num_layers + emb + loss;
    if (total % S || total / S < 1) {
        long lo = (total / S) * S - emb - loss, hi = lo + S;
        while (lo < 1)
            lo += S, hi += S;
        return err_set(err, TS_EINVAL,
                       "--num-layers %d plus %s (%ld) is not divisible by the %d virtual pipeline stages (p x v = "
                       "%d x %d): Megatron-core counts %s as a layer of the split (use --num-layers %ld or %ld)",
                       num_layers,
                       emb && loss ? "the embedding and the loss"
                       : emb       ? "the embedding"
                                   : "the loss",
                       total, S, p, v, emb && loss ? "each" : "it", lo, hi);
    }
    int k = (int)(total / S);
    out->n_stages = S;
    out->num_layers = num_layers;
    for (int i = 0; i < S; i++)
        out->layers[i] = k;
    out->layers[0] -= emb;
    out->layers[S - 1] -= loss;
    set_ends(out);
    return TS_OK;
}

bool sched_layout_is_even(const sched_layout *l)
{
    for (int i = 1; i < l->n_stages; i++)
        if (l->layers[i] != l->layers[0])
            return false;
    return true;
}

int sched_layout_max_layers(const sched_layout *l)
{
    int mx = 0;
    for (int i = 0; i < l->n_stages; i++)
        if (l->layers[i] > mx)
            mx = l->layers[i];
    return mx;
}

size_t sched_layout_format(const sched_layout *l, char *buf, size_t size)
{
    size_t at = 0;
    if (size)
        buf[0] = '\0';
    for (int i = 0; i < l->n_stages;) {
        int j = i;
        while (j < l->n_stages && l->layers[j] == l->layers[i])
            j++;
        char item[32];
        int n = j - i > 1 ? snprintf(item, sizeof item, "%s%dx%d", i ? " " : "", l->layers[i], j - i)
                          : snprintf(item, sizeof item, "%s%d", i ? " " : "", l->layers[i]);
        if (n > 0) {
            if (at + (size_t)n < size)
                memcpy(buf + at, item, (size_t)n + 1);
            else if (at < size)
                buf[at] = '\0'; /* truncated: keep whole items only */
            at += (size_t)n;
        }
        i = j;
    }
    return at;
}
