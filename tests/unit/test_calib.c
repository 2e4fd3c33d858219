/* Tests for calib: CSV round trip, errors with locations, fitted tables. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "sim/model/calib.h"
#include "tests/unit/gpu_specs.h"

static const gpu_spec A100 = {GPU_SPEC_A100};

static char *tmpfile_with(const char *text)
{
    static char path[64];
    snprintf(path, sizeof path, "/tmp/trainsim-calib-XXXXXX");
    int fd = mkstemp(path);
    cr_assert_geq(fd, 0);
    FILE *f = fdopen(fd, "w");
    fputs(text, f);
    cr_assert_eq(fclose(f), 0);
    return path;
}

static calib_row gemm_row(int64_t m, int64_t n, int64_t k, double ns)
{
    calib_row r;
    memset(&r, 0, sizeof r);
    strcpy(r.gpu, "A100-SXM4-80GB");
    r.op = CALIB_GEMM;
    r.dtype = PREC_BF16;
    r.m = m;
    r.n = n;
    r.k = k;
    r.batch = 1;
    r.time_ns = ns;
    return r;
}

Test(calib, write_read_round_trip)
{
    calib_set s = {0, NULL};
    calib_row r = gemm_row(8192, 2304, 6144, 1.25e6);
    cr_assert_eq(calib_add(&s, &r, NULL), TS_OK);
    memset(&r, 0, sizeof r);
    strcpy(r.gpu, "A100-SXM4-80GB");
    r.op = CALIB_MEMORY;
    r.dtype = PREC_BF16;
    r.bytes = 268435456;
    r.time_ns = 160000.5;
    cr_assert_eq(calib_add(&s, &r, NULL), TS_OK);
    r.op = CALIB_LAUNCH;
    r.bytes = 0;
    r.time_ns = 3500;
    cr_assert_eq(calib_add(&s, &r, NULL), TS_OK);
    char path[] = "/tmp/trainsim-calib-rt-XXXXXX";
    int fd = mkstemp(path);
    close(fd);
    cr_assert_eq(calib_write(path, &s, NULL), TS_OK);
    calib_set back = {0, NULL};
    ts_err e;
    cr_assert_eq(calib_read(path, &back, &e), TS_OK, "%s", e.msg);
    cr_assert_eq(back.n, 3);
    for (size_t i = 0; i < 3; i++) {
        cr_assert_str_eq(back.rows[i].gpu, s.rows[i].gpu);
        cr_assert_eq(back.rows[i].op, s.rows[i].op);
        cr_assert_eq(back.rows[i].m, s.rows[i].m);
        cr_assert_eq(back.rows[i].bytes, s.rows[i].bytes);
        cr_assert_eq(back.rows[i].time_ns, s.rows[i].time_ns);
    }
    /* achieved columns are written for readers */
    FILE *f = fopen(path, "r");
    char buf[4096];
    size_t len = fread(buf, 1, sizeof buf - 1, f);
    buf[len] = 0;
    cr_assert_eq(fclose(f), 0);
    cr_assert(strstr(buf, "achieved_tflops"), "%s", buf);
    cr_assert(strstr(buf, ",185.5"), "%s", buf); /* 2*8192*2304*6144 / 1.25 ms */
    unlink(path);
    calib_free(&s);
    calib_free(&back);
}

Test(calib, errors_name_line_and_column)
{
    ts_err e;
    calib_set s;
    const char *p = tmpfile_with("gpu,op,dtype,m,n,k,batch,bytes,time_ns\n"
                                 "A100-SXM4-80GB,gemm,bf16,1,2,3,1,,10\n"
                                 "A100-SXM4-80GB,conv,bf16,1,2,3,1,,10\n");
    cr_assert_eq(calib_read(p, &s, &e), TS_EINVAL);
    cr_assert(strstr(e.msg, ":3:") && strstr(e.msg, "'op'") && strstr(e.msg, "gemm, memory"), "%s", e.msg);
    unlink(p);
    p = tmpfile_with("gpu,op,dtype,m,n,k,batch,bytes,time_ns\n"
                     "A100-SXM4-80GB,gemm,bf16,1,,3,1,,10\n");
    cr_assert_eq(calib_read(p, &s, &e), TS_EINVAL);
    cr_assert(strstr(e.msg, ":2:") && strstr(e.msg, "'n'"), "%s", e.msg);
    unlink(p);
    p = tmpfile_with("gpu,op,dtype,bytes,time_ns\nA100-SXM4-80GB,memory,bf16,100,-1\n");
    cr_assert_eq(calib_read(p, &s, &e), TS_EINVAL);
    cr_assert(strstr(e.msg, "time_ns"), "%s", e.msg);
    unlink(p);
    cr_assert_eq(calib_read("/nonexistent/calib.csv", &s, &e), TS_EIO);
}

/* A value outside calib.h's ranges is refused with FILE:LINE, the column and
 * the range; the bounds themselves are accepted. */
static void expect_refused(const char *csv, const char *line, const char *col, const char *range)
{
    ts_err e;
    calib_set s = {0, NULL};
    const char *p = tmpfile_with(csv);
    int rc = calib_read(p, &s, &e);
    unlink(p);
    cr_assert_eq(rc, TS_EINVAL, "accepted: %s", csv);
    cr_assert(strstr(e.msg, line) && strstr(e.msg, col) && strstr(e.msg, range), "%s: %s", csv, e.msg);
}

static void expect_accepted(const char *csv)
{
    ts_err e;
    calib_set s = {0, NULL};
    const char *p = tmpfile_with(csv);
    int rc = calib_read(p, &s, &e);
    unlink(p);
    cr_assert_eq(rc, TS_OK, "%s: %s", csv, e.msg);
    cr_assert_eq(s.n, 1);
    calib_free(&s);
}

#define GEMM_HEAD "gpu,op,dtype,m,n,k,batch,bytes,time_ns\n# comment\n"
#define MEM_HEAD  "gpu,op,dtype,bytes,time_ns\n"
#define LINK_HEAD "gpu,op,dtype,ranks,alpha_ns,gbps,time_ns\n"

Test(calib, values_outside_physical_ranges_refused)
{
    /* non-finite and negative times */
    expect_refused(GEMM_HEAD "CPU,gemm,fp32,64,64,64,1,,nan\n", ":3:", "'time_ns'", "[0.001, 1e+12]");
    expect_refused(GEMM_HEAD "CPU,gemm,fp32,64,64,64,1,,inf\n", ":3:", "'time_ns'", "[0.001, 1e+12]");
    expect_refused(MEM_HEAD "CPU,memory,fp32,4096,-5\n", ":2:", "'time_ns'", "[0.001, 1e+12]");
    /* a kernel of more than 1000 s; the bound itself is accepted */
    expect_refused(MEM_HEAD "CPU,memory,fp32,4096,1.0001e12\n", ":2:", "'time_ns'", "[0.001, 1e+12]");
    expect_accepted(MEM_HEAD "CPU,memory,fp32,4096,1e12\n");
    /* GEMM dimensions above 2^24 */
    expect_refused(GEMM_HEAD "CPU,gemm,fp32,16777217,64,64,1,,1e6\n", ":3:", "'m'", "[1, 16777216]");
    expect_refused(GEMM_HEAD "CPU,gemm,fp32,64,64,64,16777217,,1e6\n", ":3:", "'batch'", "[1, 16777216]");
    expect_refused(GEMM_HEAD "CPU,gemm,fp32,64,64,0,1,,1e6\n", ":3:", "'k'", "[1, 16777216]");
    /* bytes above 2^50 */
    expect_refused(MEM_HEAD "CPU,memory,fp32,1125899906842625,1e9\n", ":2:", "'bytes'", "[1, 1125899906842624]");
    /* link rows: bandwidth in the catalogue's range, latency >= 0, finite */
    expect_refused(LINK_HEAD "CPU,p2p,fp32,2,5,1e300,\n", ":2:", "'gbps'", "[0.001, 1e+06]");
    expect_refused(LINK_HEAD "CPU,p2p,fp32,2,5,0,\n", ":2:", "'gbps'", "[0.001, 1e+06]");
    expect_refused(LINK_HEAD "CPU,allreduce,fp32,2,-1,10,\n", ":2:", "'alpha_ns'", "[0, 1e+12]");
    expect_refused(LINK_HEAD "CPU,allreduce,fp32,2,nan,10,\n", ":2:", "'alpha_ns'", "[0, 1e+12]");
    expect_refused(LINK_HEAD "CPU,allreduce,fp32,1,5,10,\n", ":2:", "'ranks'", "[2, 1048576]");
    expect_accepted(LINK_HEAD "CPU,allreduce,fp32,2,0,1e6,\n");
}

Test(calib, rows_faster_than_any_gpu_refused)
{
    /* 2 * 2^24^3 FLOP in 1 ms = 9.4e9 TFLOP/s > 1e6 */
    expect_refused(GEMM_HEAD "CPU,gemm,fp32,16777216,16777216,16777216,1,,1e6\n", ":3:", "'time_ns'",
                   "(0, 1e+06] TFLOP/s");
    /* 2 * 1000^3 FLOP in 2 ns = 1e6 TFLOP/s: the bound, accepted; in 1.99 ns: refused */
    expect_accepted(GEMM_HEAD "CPU,gemm,fp32,1000,1000,1000,1,,2\n");
    expect_refused(GEMM_HEAD "CPU,gemm,fp32,1000,1000,1000,1,,1.99\n", ":3:", "1.00503e+06 TFLOP/s",
                   "(0, 1e+06] TFLOP/s");
    /* 1e9 bytes in 1000 ns = 1e6 GB/s: accepted; in 999 ns: refused */
    expect_accepted(MEM_HEAD "CPU,memory,fp32,1000000000,1000\n");
    expect_refused(MEM_HEAD "CPU,memory,fp32,1000000000,999\n", ":2:", "'time_ns'", "[0.001, 1e+06] GB/s");
}

Test(calib, fit_recovers_efficiencies)
{
    cost_params base;
    cr_assert_eq(cost_params_default(&A100, PREC_BF16, &base, NULL), TS_OK);
    calib_set s = {0, NULL};
    /* launch 2 us; square GEMMs at 30%, 60%, 75% of 312 TFLOP/s */
    const int64_t dims[] = {256, 1024, 8192};
    const double eff[] = {0.30, 0.60, 0.75};
    for (int i = 0; i < 3; i++) {
        double f = 2.0 * dims[i] * dims[i] * dims[i];
        calib_row r = gemm_row(dims[i], dims[i], dims[i], 2000 + f / (312e3 * eff[i]));
        cr_assert_eq(calib_add(&s, &r, NULL), TS_OK);
        r.time_ns *= 1.0 + 1e-4; /* a repeat within 1%: averaged into one knot */
        cr_assert_eq(calib_add(&s, &r, NULL), TS_OK);
    }
    calib_row l = gemm_row(0, 0, 0, 2000);
    l.op = CALIB_LAUNCH;
    cr_assert_eq(calib_add(&s, &l, NULL), TS_OK);
    /* rows of another GPU are ignored */
    calib_row o = gemm_row(512, 512, 512, 1);
    strcpy(o.gpu, "H100-SXM5-80GB");
    cr_assert_eq(calib_add(&s, &o, NULL), TS_OK);
    cost_params p;
    ts_err e;
    cr_assert_eq(calib_fit(&s, &base, PREC_BF16, &p, &e), TS_OK, "%s", e.msg);
    cr_assert_eq(p.launch_ns, 2000.0);
    cr_assert_eq(p.gemm.n, 3);
    for (int i = 0; i < 3; i++)
        cr_assert(fabs(p.gemm.eff[i] - eff[i]) < 1e-4, "%g", p.gemm.eff[i]);
    /* no memory rows: the default memory table is kept */
    cr_assert_eq(p.mem.n, base.mem.n);
    cost_model *cm;
    cr_assert_eq(cost_model_new(&p, &cm, NULL), TS_OK);
    cr_assert(fabs(cost_gemm_eff(cm, 1024, 1024, 1024) - 0.60) < 1e-4);
    cost_model_free(cm);
    /* a dtype without rows is an error that says what is missing */
    cr_assert_eq(calib_fit(&s, &base, PREC_FP16, &p, &e), TS_EINVAL);
    cr_assert(strstr(e.msg, "dtype=fp16"), "%s", e.msg);
    calib_free(&s);
}

Test(calib, load_params_from_file)
{
    const char *p = tmpfile_with("# measured\n"
                                 "gpu,op,dtype,m,n,k,batch,bytes,time_ns,achieved_tflops,achieved_gbps\n"
                                 "A100-SXM4-80GB,memory,bf16,,,,,1000000,4000,,\n"
                                 "A100-SXM4-80GB,memory,bf16,,,,,1000000000,600000,,\n"
                                 "A100-SXM4-80GB,launch,bf16,,,,,,3000,,\n");
    cost_params out;
    ts_err e;
    cr_assert_eq(calib_load_params(p, &A100, PREC_BF16, &out, &e), TS_OK, "%s", e.msg);
    cr_assert_eq(out.launch_ns, 3000.0);
    cr_assert_eq(out.mem.n, 2);
    cr_assert(fabs(out.mem.eff[1] - 1e9 / (597000.0 * 2039)) < 1e-9);
    unlink(p);
}

/* A calibrated-only device takes peaks and links from the rows alone. */
Test(calib, device_params_from_rows_only)
{
    gpu_spec cpu = {.name = "CPU", .calibrated_only = true};
    calib_set s = {0, NULL};
    calib_row r;
    memset(&r, 0, sizeof r);
    strcpy(r.gpu, "CPU");
    r.dtype = PREC_FP32;
    r.op = CALIB_LAUNCH;
    r.time_ns = 100;
    cr_assert_eq(calib_add(&s, &r, NULL), TS_OK);
    r.op = CALIB_GEMM;
    r.batch = 1;
    r.m = r.n = r.k = 100; /* 2e6 flops in 1000 ns busy: 2 TFLOP/s */
    r.time_ns = 1100;
    cr_assert_eq(calib_add(&s, &r, NULL), TS_OK);
    r.m = r.n = r.k = 200;
    r.time_ns = 100 + 16e3; /* 1 TFLOP/s: efficiency 0.5 */
    cr_assert_eq(calib_add(&s, &r, NULL), TS_OK);
    memset(&r.m, 0, 4 * sizeof r.m);
    r.op = CALIB_MEMORY;
    r.bytes = 1000;
    r.time_ns = 100 + 100; /* 10 GB/s busy */
    cr_assert_eq(calib_add(&s, &r, NULL), TS_OK);
    r.bytes = 100000;
    r.time_ns = 100 + 20000; /* 5 GB/s */
    cr_assert_eq(calib_add(&s, &r, NULL), TS_OK);
    cost_params cp;
    commcost_params cc;
    ts_err e;
    cr_assert_eq(calib_device_params(&s, &cpu, PREC_FP32, &cp, &cc, &e), TS_EINVAL);
    cr_assert(strstr(e.msg, "p2p row") != NULL, "%s", e.msg);
    r.op = CALIB_P2P;
    r.time_ns = 0;
    r.bytes = 0;
    r.ranks = 2;
    r.alpha_ns = 1000;
    r.gbps = 2;
    cr_assert_eq(calib_add(&s, &r, NULL), TS_OK);
    r.op = CALIB_ALLREDUCE;
    r.ranks = 4;
    r.alpha_ns = 3000;
    r.gbps = 1;
    cr_assert_eq(calib_add(&s, &r, NULL), TS_OK);
    cr_assert_eq(calib_device_params(&s, &cpu, PREC_FP32, &cp, &cc, &e), TS_OK, "%s", e.msg);
    cr_assert_float_eq(cp.peak_tflops, 2.0, 1e-9);
    cr_assert_float_eq(cp.hbm_gbps, 10.0, 1e-9);
    cr_assert_float_eq(cp.launch_ns, 100.0, 1e-9);
    cr_assert_eq(cp.dtype_bytes, 4);
    cr_assert_float_eq(cp.overlap_slowdown, 0.0, 0);
    cr_assert_float_eq(cp.gemm.eff[cp.gemm.n - 1], 0.5, 1e-6);
    cr_assert_float_eq(cp.mem.eff[0], 1.0, 1e-6);
    cr_assert_float_eq(cp.mem.eff[1], 0.5, 1e-6);
    cr_assert_float_eq(cc.nvlink_alpha_ns, 1000.0, 1e-9);
    cr_assert_float_eq(cc.nvlink_p2p_gbps, 2.0, 1e-9);
    cr_assert_float_eq(cc.nvlink_allreduce_busbw_gbps, 1.5, 1e-9); /* 1 x 2(n-1)/n, n = 4 */
    /* at another dtype nothing matches: an error naming the dtype */
    cr_assert_eq(calib_device_params(&s, &cpu, PREC_BF16, &cp, &cc, &e), TS_EINVAL);
    cr_assert(strstr(e.msg, "dtype=bf16") != NULL, "%s", e.msg);
    calib_free(&s);
}

/* Memory rows naming a kernel kind: written and read back with the kernel
 * column, fitted into that kind's table, and used for the layer ops of that
 * kind (a GELU op costs with the gelu table, an unnamed op with the generic
 * one); rows without a kernel give no kind tables. */
Test(calib, per_kernel_memory_tables)
{
    cost_params base;
    cr_assert_eq(cost_params_default(&A100, PREC_BF16, &base, NULL), TS_OK);
    for (int k = 0; k < COST_MEM_KINDS; k++)
        cr_assert_eq(base.mem_kind[k].n, 0);
    calib_set s = {0, NULL};
    calib_row l = gemm_row(0, 0, 0, 1000);
    l.op = CALIB_LAUNCH;
    cr_assert_eq(calib_add(&s, &l, NULL), TS_OK);
    const int64_t sizes[] = {1 << 16, 1 << 20, 1 << 24};
    for (int i = 0; i < 3; i++) {
        calib_row r = gemm_row(0, 0, 0, 0);
        r.op = CALIB_MEMORY;
        r.bytes = sizes[i];
        strcpy(r.kernel, "copy");
        r.time_ns = 1000 + (double)sizes[i] / (2039 * 0.8); /* 80% of HBM */
        cr_assert_eq(calib_add(&s, &r, NULL), TS_OK);
        strcpy(r.kernel, "gelu");
        r.time_ns = 1000 + (double)sizes[i] / (2039 * 0.1); /* 10% of HBM */
        cr_assert_eq(calib_add(&s, &r, NULL), TS_OK);
    }
    char *path = tmpfile_with("");
    cr_assert_eq(calib_write(path, &s, NULL), TS_OK);
    calib_set back = {0, NULL};
    ts_err e;
    cr_assert_eq(calib_read(path, &back, &e), TS_OK, "%s", e.msg);
    unlink(path);
    cr_assert_eq(back.n, s.n);
    cr_assert_str_eq(back.rows[2].kernel, "gelu");
    cost_params p;
    cr_assert_eq(calib_fit(&back, &base, PREC_BF16, &p, &e), TS_OK, "%s", e.msg);
    cr_assert_eq(p.mem_kind[COST_MEM_GELU].n, 3);
    cr_assert_eq(p.mem_kind[COST_MEM_COPY].n, 3);
    cr_assert_eq(p.mem_kind[COST_MEM_SOFTMAX].n, 0);
    for (int i = 0; i < 3; i++)
        cr_assert(fabs(p.mem_kind[COST_MEM_GELU].eff[i] - 0.1) < 1e-4);
    cost_model *cm;
    cr_assert_eq(cost_model_new(&p, &cm, NULL), TS_OK);
    layer_op gelu = {.name = "gelu.bwd", .kind = LAYER_OP_MEM, .bytes = 1 << 20};
    layer_op other = {.name = "mystery", .kind = LAYER_OP_MEM, .bytes = 1 << 20};
    double want = 1000 + (double)(1 << 20) / (2039 * 0.1);
    cr_assert(fabs((double)cost_op_ns(cm, &gelu) - want) < 2, "%lld", (long long)cost_op_ns(cm, &gelu));
    cr_assert_eq(cost_op_ns(cm, &other), cost_mem_ns(cm, 1 << 20));
    cr_assert_lt(cost_op_ns(cm, &other), cost_op_ns(cm, &gelu));
    cost_model_free(cm);
    cr_assert_eq(cost_mem_kind_of_op("ln1.bwd"), COST_MEM_LAYERNORM);
    cr_assert_eq(cost_mem_kind_of_op("final.ln"), COST_MEM_LAYERNORM);
    cr_assert_eq(cost_mem_kind_of_op("attn.softmax"), COST_MEM_SOFTMAX);
    cr_assert_eq(cost_mem_kind_of_op("mlp.dropadd"), COST_MEM_RESIDUAL);
    cr_assert_eq(cost_mem_kind_of_op("qkv"), -1);
    /* an unknown kernel name is an error naming the column */
    char *bad = tmpfile_with("gpu,op,dtype,bytes,time_ns,kernel\nA100-SXM4-80GB,memory,bf16,64,10,erf\n");
    calib_set none = {0, NULL};
    cr_assert_eq(calib_read(bad, &none, &e), TS_EINVAL);
    unlink(bad);
    cr_assert(strstr(e.msg, "kernel"), "%s", e.msg);
    calib_free(&none);
    calib_free(&back);
    calib_free(&s);
}
