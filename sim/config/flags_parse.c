/* flags_parse — the command line and a --megatron-script's arguments
 * parsed into the flag table (flags.h: flags_parse, flags_release). */
#include "sim/config/flags.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "sim/config/catalog.h"
#include "sim/config/catalog_models.h"
#include "sim/config/megatron_flags.h"
#include "sim/config/moe_flags.h"
#include "sim/config/topo.h"

/* ---------------------------------------------------------------- parse */

/* The table entry a flag argument names ("--x", "--x=v", "-t"), or NULL. */
static const opt_entry *entry_of(const opt_table *t, const char *arg)
{
    size_t len = strcspn(arg, "=");
    for (size_t i = 0; i < t->n; i++) {
        const opt_spec *sp = &t->entries[i].spec;
        if (sp->type == OPT_SECTION)
            continue;
        if ((strlen(sp->name) == len && !strncmp(sp->name, arg, len)) ||
            (sp->alias && strlen(sp->alias) == len && !strncmp(sp->alias, arg, len)))
            return &t->entries[i];
    }
    return NULL;
}

static bool is_flag(const char *a)
{
    return a[0] == '-' && a[1] && strcmp(a, "--") != 0;
}

/* Whether argv[1 ..] gives the flag arg names: the same table entry (long
 * name or alias), or for a flag the table lacks, the same name. */
static bool cmdline_gives(const opt_table *t, int argc, char **argv, const char *arg)
{
    const opt_entry *e = entry_of(t, arg);
    size_t len = strcspn(arg, "=");
    for (int i = 1; i < argc && strcmp(argv[i], "--") != 0; i++) {
        if (!is_flag(argv[i]))
            continue;
        if (e ? entry_of(t, argv[i]) == e : strcspn(argv[i], "=") == len && !strncmp(argv[i], arg, len))
            return true;
    }
    return false;
}

/* --megatron-script's value in argv (NULL if absent; left to opt_parse when
 * malformed). Not read under --help. */
static int script_path(int argc, char **argv, const char **path, ts_err *err)
{
    static const char NAME[] = "--megatron-script";
    *path = NULL;
    for (int i = 1; i < argc && strcmp(argv[i], "--") != 0; i++) {
        const char *a = argv[i], *v = NULL;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            *path = NULL;
            return TS_OK;
        }
        if (!strncmp(a, NAME, sizeof NAME - 1) && a[sizeof NAME - 1] == '=')
            v = a + sizeof NAME;
        else if (!strcmp(a, NAME) && i + 1 < argc && strncmp(argv[i + 1], "--", 2))
            v = argv[++i];
        if (v && *path)
            return err_set(err, TS_EINVAL, "flag --megatron-script given twice (give each flag once)");
        if (v)
            *path = v;
    }
    return TS_OK;
}

/* Append the script's arguments to av (*n so far) less those the command
 * line overrides, then --gpus from its world size (flags.h). What neither
 * gives resolves in flags_finish as any flag left out: Megatron-LM's
 * defaults. */
static int script_args(flags_state *s, const opt_table *t, int argc, char **argv, char **av, int *n, ts_err *err)
{
    const mscript *m = s->script;
    for (int i = 0; i < m->argc;) {
        const char *a = m->argv[i];
        if (!is_flag(a)) { /* a word that is no flag's value: kept unless unresolved ("$@") */
            if (!m->arg_why[i])
                av[(*n)++] = m->argv[i];
            i++;
            continue;
        }
        const opt_entry *e = entry_of(t, a);
        bool eq = strchr(a, '=') != NULL;
        int nv = 0;
        if (e && !eq)
            nv = e->spec.type != OPT_BOOL && i + 1 < m->argc && strncmp(m->argv[i + 1], "--", 2) ? 1 : 0;
        else if (!e && !eq)
            while (i + 1 + nv < m->argc && (!is_flag(m->argv[i + 1 + nv]) || m->arg_why[i + 1 + nv]))
                nv++;
        if (cmdline_gives(t, argc, argv, a)) {
            i += 1 + nv;
            continue;
        }
        int v = eq ? i : i + nv;
        if (e && m->arg_why[v])
            return err_set(err, TS_EINVAL,
                           "--megatron-script %s:%d: flag %.*s takes '%s', which the script alone does not give "
                           "(%s); give %.*s on the command line",
                           m->path, m->arg_line[v], (int)strcspn(a, "="), a, eq ? strchr(a, '=') + 1 : m->argv[v],
                           m->arg_why[v], (int)strcspn(a, "="), a);
        for (int k = 0; k <= nv; k++)
            av[(*n)++] = m->argv[i + k];
        i += 1 + nv;
    }
    if (cmdline_gives(t, argc, argv, "--gpus"))
        return TS_OK;
    if (m->world_why)
        return err_set(err, TS_EINVAL,
                       "--megatron-script %s: the GPU count is unknown: %s; give --gpus N on the command line", m->path,
                       m->world_why);
    if (m->world_size > 0) {
        snprintf(s->gpus_arg, sizeof s->gpus_arg, "--gpus=%d", m->world_size);
        av[(*n)++] = s->gpus_arg;
    }
    return TS_OK;
}

/* The argument vector opt_parse reads: argv[0], the --megatron-script
 * arguments (if any) and argv[1 ..]; into s->argv_owned, its count in *n. */
static int build_argv(flags_state *s, const opt_table *t, int argc, char **argv, int *n, ts_err *err)
{
    const char *path = NULL;
    int rc = script_path(argc, argv, &path, err);
    if (!rc && path && (rc = mscript_load(path, &s->script, err)))
        return err_prefix(err, "--megatron-script ");
    size_t extra = s->script ? (size_t)s->script->argc + 1 : 0; /* + --gpus */
    char **av = rc ? NULL : calloc((size_t)argc + extra + 1, sizeof *av);
    if (!rc && !av)
        return err_set(err, TS_ENOMEM, "out of memory copying %d arguments", argc);
    s->argv_owned = av;
    *n = 0;
    if (!rc)
        av[(*n)++] = argv[0];
    if (!rc && s->script)
        rc = script_args(s, t, argc, argv, av, n, err);
    for (int i = 1; !rc && i < argc; i++)
        av[(*n)++] = argv[i];
    return rc;
}

/* After opt_parse or mflags_filter failed on err: when the flag its message is about
 * ("unknown flag 'X'", "flag X: ...") comes from the script, not the command
 * line, say where the script writes it. */
static int blame_script(const flags_state *s, int argc, char **argv, ts_err *err)
{
    const mscript *m = s->script;
    for (int i = 0; m && err && i < m->argc; i++) {
        const char *a = m->argv[i];
        size_t len = strcspn(a, "=");
        if (!is_flag(a) || m->arg_why[i] || len >= 100)
            continue;
        char quoted[112], named[112];
        snprintf(quoted, sizeof quoted, "flag '%.*s'", (int)len, a);
        snprintf(named, sizeof named, "flag %.*s", (int)len, a);
        const char *q = strstr(err->msg, named);
        bool about = strstr(err->msg, quoted) || (q && (q[strlen(named)] == ':' || q[strlen(named)] == ' '));
        /* mflags_filter's messages start with the flag: "--num-experts: not modelled: ..." */
        about |= !strncmp(err->msg, a, len) && (err->msg[len] == ':' || err->msg[len] == ' ' || err->msg[len] == '=');
        bool cmdline = false;
        for (int k = 1; k < argc; k++)
            cmdline |= strcspn(argv[k], "=") == len && !strncmp(argv[k], a, len);
        if (about && !cmdline)
            return err_prefix(err, "--megatron-script %s:%d: ", m->path, m->arg_line[i]);
    }
    return err ? err->code : TS_EINVAL;
}

/* --recompute-modules takes a list, as Megatron-LM (nargs='*'): every
 * argument up to the next one starting with --. Its names go into
 * s->rc_modules; the list is cut to its first value in s->argv_owned, so
 * opt_parse sees one --recompute-modules VALUE (and refuses the flag given
 * twice, as every flag). */
static int take_recompute_modules(flags_state *s, int *n, ts_err *err)
{
    static const char FLAG[] = "--recompute-modules";
    char **a = s->argv_owned;
    for (int i = 1; i < *n; i++) {
        size_t fl = sizeof FLAG - 1;
        if (strncmp(a[i], FLAG, fl) || (a[i][fl] != '\0' && a[i][fl] != '='))
            continue;
        int first = a[i][fl] == '=' ? i : i + 1; /* the argument holding the first value */
        int end = i + 1;
        while (end < *n && strncmp(a[end], "--", 2))
            end++;
        if (first >= end)
            return err_set(err, TS_EINVAL, "--recompute-modules: needs one or more of core_attn, mlp, layernorm");
        unsigned bits = 0;
        for (int j = first; j < end; j++) {
            /* one argument may hold several names, space- or comma-separated (a sweep cell) */
            const char *arg = j == i ? a[i] + fl + 1 : a[j];
            for (const char *name = arg; *name;) {
                size_t len = strcspn(name, " ,");
                int k = 0;
                while (CONFIG_RC_MODULE_NAMES[k] &&
                       (strlen(CONFIG_RC_MODULE_NAMES[k]) != len || strncmp(CONFIG_RC_MODULE_NAMES[k], name, len)))
                    k++;
                if (len && !CONFIG_RC_MODULE_NAMES[k])
                    return err_set(err, TS_EINVAL,
                                   "--recompute-modules: unknown module '%.*s' (valid: core_attn, mlp, layernorm, moe, "
                                   "moe_act, mla_up_proj, shared_experts)",
                                   (int)len, name);
                if (len)
                    bits |= 1u << k;
                name += len;
                name += strspn(name, " ,");
            }
        }
        if (!bits)
            return err_set(err, TS_EINVAL, "--recompute-modules: needs one or more of core_attn, mlp, layernorm");
        s->rc_modules = bits;
        int keep = first + 1; /* drop the values after the first */
        memmove(&a[keep], &a[end], (size_t)(*n - end + 1) * sizeof *a);
        *n -= end - keep;
    }
    return TS_OK;
}

/* --hierarchical-context-parallel-sizes takes a list of sizes (Megatron-LM:
 * nargs='+'), cut like --recompute-modules to its first value for
 * opt_parse. Two levels are modelled (a2a+p2p's all-to-all and ring). */
static int take_hcp(flags_state *s, int *n, ts_err *err)
{
    static const char FLAG[] = "--hierarchical-context-parallel-sizes";
    char **a = s->argv_owned;
    for (int i = 1; i < *n; i++) {
        size_t fl = sizeof FLAG - 1;
        if (strncmp(a[i], FLAG, fl) || (a[i][fl] != '\0' && a[i][fl] != '='))
            continue;
        int first = a[i][fl] == '=' ? i : i + 1;
        int end = i + 1;
        while (end < *n && strncmp(a[end], "--", 2))
            end++;
        int v[3], nv = 0;
        for (int j = first; j < end; j++) {
            const char *arg = j == i ? a[i] + fl + 1 : a[j];
            for (const char *q = arg; *q;) {
                size_t len = strcspn(q, " ,");
                if (len) {
                    char *e = NULL;
                    long x = strtol(q, &e, 10);
                    if (e != q + len || x < 1 || x > 65536)
                        return err_set(err, TS_EINVAL, "%s: '%.*s' is not a size in [1, 65536]", FLAG, (int)len, q);
                    if (nv == 2)
                        return err_set(err, TS_EINVAL,
                                       "%s: more than two sizes: two levels are modelled (the all-to-all size and "
                                       "the ring size of a2a+p2p)",
                                       FLAG);
                    v[nv++] = (int)x;
                }
                q += len;
                q += strspn(q, " ,");
            }
        }
        if (nv != 2)
            return err_set(err, TS_EINVAL, "%s: needs two sizes, the all-to-all size and the ring size (e.g. 2 8)",
                           FLAG);
        s->hcp_a2a = v[0];
        s->hcp_p2p = v[1];
        int keep = first + 1;
        memmove(&a[keep], &a[end], (size_t)(*n - end + 1) * sizeof *a);
        *n -= end - keep;
    }
    return TS_OK;
}

int flags_parse(flags_state *s, opt_table *t, int argc, char **argv, ts_err *err)
{
    flags_release(s);
    if (argc < 1)
        return err_set(err, TS_EINVAL, "no command name in the argument vector");
    int n = 0;
    int rc = build_argv(s, t, argc, argv, &n, err);
    if (rc)
        return rc;
    if ((rc = take_recompute_modules(s, &n, err)) || (rc = take_hcp(s, &n, err)))
        return s->script ? blame_script(s, argc, argv, err) : rc;
    /* s->argv_owned[0 .. n) is the whole vector: script arguments, then the
     * command line. Megatron-LM flags trainsim does not model: ignored ones
     * are dropped here (and listed), refused ones fail (megatron_flags.h). */
    mflags_filtered f;
    rc = mflags_filter(NULL, t, n, s->argv_owned, &f, err);
    if (rc)
        return s->script ? blame_script(s, argc, argv, err) : rc;
    free(s->argv_owned); /* the same strings, fewer of them */
    s->argv_owned = f.argv;
    s->megatron_ignored = f.ignored;
    rc = opt_parse(t, f.argc, s->argv_owned, err);
    return rc && s->script ? blame_script(s, argc, argv, err) : rc;
}

void flags_release(flags_state *s)
{
    free(s->argv_owned);
    s->argv_owned = NULL;
    mscript_free(s->script);
    s->script = NULL;
    free(s->megatron_ignored);
    s->megatron_ignored = NULL;
    moe_flags_release(&s->moe);
}
