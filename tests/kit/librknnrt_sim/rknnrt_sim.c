/* A simulated librknnrt.so: the C ABI rknn-toolkit-lite2's binding loads with ctypes from
 * /usr/lib/librknnrt.so, answering as the real runtime is documented to, on no NPU at all.
 *
 * Derived from (facts only, declarations written here): the public rknn_api.h of
 * airockchip/rknn-toolkit2 (struct layouts, query commands, error codes, core masks), the symbols
 * rknn-toolkit-lite2 2.3.2's rknnlite/api/rknn_runtime*.so names (its strings), the .rknn layout
 * in docs/hardware.md (header, FlatBuffer block, trailing JSON) as rknnlaunch/model/_rknnfile.py
 * reads it, and the simulated NPU of tests/sdk/rknnlite_fake.py (SimulatedNpu): the same latency
 * model and the same per-core queue files, so C and Python simulated contexts share one NPU.
 *
 * What it does:
 *  - rknn_init parses the model bytes: inputs/outputs (graph -> norm_tensor), the toolkit version
 *    (a model newer than this runtime: RKNN_ERR_MODEL_INVALID) and target_platform (a model for
 *    another NPU: RKNN_ERR_TARGET_PLATFORM_UNMATCH);
 *  - rknn_set_core_mask rejects a mask naming cores the SoC lacks (RKNN_ERR_PARAM_INVALID);
 *  - an unknown or destroyed context answers RKNN_ERR_CTX_INVALID;
 *  - rknn_run queues a job on the context's cores: each core keeps the time its queued work ends
 *    (a native double at offset 0 of LOCKDIR/core<N>.lock, read and written under flock), a job
 *    starts when submitted or when the core frees, and the caller sleeps until it ends. Latency:
 *    RKNN_SIM_CORE_MS on one core (default 1000/73.5), scaled 32/23/18 for 1/2/3 cores;
 *  - a core named in RKNN_SIM_FAIL_CORES (a mask) or in LOCKDIR/fail-cores fails every job with
 *    "failed to submit!" (the 6.1-kernel failure of docs/hardware.md), read at every run; the
 *    next rknn_outputs_get then fails too (the binding does not check rknn_run's code);
 *  - outputs: every element is the centre byte of input 0; RKNN_SIM_OUTPUT_VALUES names a file of
 *    whitespace-separated floats used instead when its count matches output 0 (the probe's
 *    expected answer);
 *  - it says it is simulated: the embedded version line and the SDK_VERSION query.
 *
 * Settings (environment): RKNN_SIM_SOC (rk3588 | rk3576 | rk3566 | rk3568 | rk3562; default: the
 * device-tree compatible file, else rk3588), RKNN_SIM_LOCK_DIR (default /tmp/rknn-sim),
 * RKNN_SIM_CORE_MS, RKNN_SIM_FAIL_CORES, RKNN_SIM_OUTPUT_VALUES.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#ifndef SIM_VERSION
#define SIM_VERSION "2.5.0"
#endif
#define SIM_LINE "librknnrt version: " SIM_VERSION " (simulated: rknnlaunch tests/kit/librknnrt_sim)"
/* Found by `strings` as the real file's version line is (rknnlaunch/npu/_librknnrt.py). */
__attribute__((used)) const char rknnrt_sim_version_line[] = SIM_LINE;

/* --- the ABI (rknn_api.h facts) ------------------------------------------------------------ */
typedef uint64_t rknn_context;
enum {
    RKNN_SUCC = 0, RKNN_ERR_FAIL = -1, RKNN_ERR_TIMEOUT = -2, RKNN_ERR_DEVICE_UNAVAILABLE = -3,
    RKNN_ERR_MALLOC_FAIL = -4, RKNN_ERR_PARAM_INVALID = -5, RKNN_ERR_MODEL_INVALID = -6,
    RKNN_ERR_CTX_INVALID = -7, RKNN_ERR_INPUT_INVALID = -8, RKNN_ERR_OUTPUT_INVALID = -9,
    RKNN_ERR_DEVICE_UNMATCH = -10, RKNN_ERR_TARGET_PLATFORM_UNMATCH = -13,
};
enum {
    Q_IN_OUT_NUM = 0, Q_INPUT_ATTR = 1, Q_OUTPUT_ATTR = 2, Q_PERF_DETAIL = 3, Q_PERF_RUN = 4,
    Q_SDK_VERSION = 5, Q_MEM_SIZE = 6, Q_CUSTOM_STRING = 7, Q_NATIVE_INPUT_ATTR = 8,
    Q_NATIVE_OUTPUT_ATTR = 9, Q_NATIVE_NHWC_INPUT_ATTR = 10, Q_NATIVE_NHWC_OUTPUT_ATTR = 11,
    Q_DEVICE_MEM_INFO = 12, Q_INPUT_DYNAMIC_RANGE = 13, Q_CURRENT_INPUT_ATTR = 14,
    Q_CURRENT_OUTPUT_ATTR = 15, Q_CURRENT_NATIVE_INPUT_ATTR = 16, Q_CURRENT_NATIVE_OUTPUT_ATTR = 17,
};
enum { T_FLOAT32 = 0, T_FLOAT16 = 1, T_INT8 = 2, T_UINT8 = 3, T_INT16 = 4, T_UINT16 = 5,
       T_INT32 = 6, T_UINT32 = 7, T_INT64 = 8, T_BOOL = 9 };
enum { F_NCHW = 0, F_NHWC = 1, F_NC1HWC2 = 2, F_UNDEFINED = 3 };
#define MAX_DIMS 16
#define MAX_NAME 256

typedef struct { uint32_t n_input, n_output; } rknn_input_output_num;
typedef struct {
    uint32_t index, n_dims, dims[MAX_DIMS];
    char name[MAX_NAME];
    uint32_t n_elems, size;
    int fmt, type, qnt_type;
    int8_t fl;
    int32_t zp;
    float scale;
    uint32_t w_stride, size_with_stride;
    uint8_t pass_through;
    uint32_t h_stride;
} rknn_tensor_attr;
typedef struct { int64_t run_duration; } rknn_perf_run;
typedef struct { char api_version[256], drv_version[256]; } rknn_sdk_version;
typedef struct { char string[1024]; } rknn_custom_string;
typedef struct {
    uint32_t total_weight_size, total_internal_size;
    uint64_t total_dma_allocated_size;
    uint32_t total_sram_size, free_sram_size, reserved[10];
} rknn_mem_size;
typedef struct { uint32_t index; void *buf; uint32_t size; uint8_t pass_through; int type, fmt; } rknn_input;
typedef struct { uint8_t want_float, is_prealloc; uint32_t index; void *buf; uint32_t size; } rknn_output;
typedef struct { rknn_context ctx; int32_t real_model_offset; uint32_t real_model_size;
                 int32_t model_buffer_fd; uint32_t model_buffer_flags; uint8_t reserved[112]; } rknn_init_extend;
typedef struct { uint64_t frame_id; int32_t non_block, timeout_ms, fence_fd; } rknn_run_extend;
typedef struct { uint64_t frame_id; } rknn_output_extend;

/* --- logging: librknnrt writes "E RKNN: ..." lines to stderr ------------------------------- */
static void sim_log(const char *level, const char *format, ...) __attribute__((format(printf, 2, 3)));
#include <stdarg.h>
static void sim_log(const char *level, const char *format, ...) {
    char line[1024];
    va_list args;
    va_start(args, format);
    int n = snprintf(line, sizeof line, "%s RKNN: [sim] ", level);
    vsnprintf(line + n, sizeof line - (size_t)n, format, args);
    va_end(args);
    size_t len = strlen(line);
    if (len < sizeof line - 1) line[len++] = '\n';
    ssize_t ignored = write(2, line, len);
    (void)ignored;
}

/* --- a small JSON reader (enough for the toolkit's metadata) ------------------------------- */
typedef enum { J_NULL, J_BOOL, J_NUM, J_STR, J_ARR, J_OBJ } jtype;
typedef struct jnode {
    jtype type;
    double num;
    char *str;          /* J_STR value */
    char *key;          /* member name when inside an object */
    struct jnode *child, *next;
} jnode;

typedef struct { const char *p, *end; int depth; } jreader;

static void jfree(jnode *n) {
    while (n) {
        jnode *next = n->next;
        jfree(n->child);
        free(n->str);
        free(n->key);
        free(n);
        n = next;
    }
}
static void jskip(jreader *r) {
    while (r->p < r->end && (*r->p == ' ' || *r->p == '\n' || *r->p == '\r' || *r->p == '\t')) r->p++;
}
static char *jstring(jreader *r) {
    if (r->p >= r->end || *r->p != '"') return NULL;
    r->p++;
    size_t cap = 32, len = 0;
    char *out = malloc(cap);
    if (!out) return NULL;
    while (r->p < r->end && *r->p != '"') {
        char c = *r->p++;
        if (c == '\\' && r->p < r->end) {
            char e = *r->p++;
            c = e == 'n' ? '\n' : e == 't' ? '\t' : e == 'r' ? '\r' : e == 'b' ? '\b' : e == 'f' ? '\f' : e;
            if (e == 'u') { /* keep it simple: \uXXXX -> '?' (names we compare are ASCII) */
                r->p += (r->end - r->p >= 4) ? 4 : r->end - r->p;
                c = '?';
            }
        }
        if (len + 2 > cap) {
            cap *= 2;
            char *grown = realloc(out, cap);
            if (!grown) { free(out); return NULL; }
            out = grown;
        }
        out[len++] = c;
    }
    if (r->p >= r->end) { free(out); return NULL; }
    r->p++;
    out[len] = 0;
    return out;
}
static jnode *jvalue(jreader *r) {
    jskip(r);
    if (r->p >= r->end || ++r->depth > 64) return NULL;
    jnode *n = calloc(1, sizeof *n);
    if (!n) return NULL;
    char c = *r->p;
    if (c == '{' || c == '[') {
        n->type = c == '{' ? J_OBJ : J_ARR;
        char close = c == '{' ? '}' : ']';
        r->p++;
        jnode **tail = &n->child;
        jskip(r);
        if (r->p < r->end && *r->p == close) { r->p++; r->depth--; return n; }
        for (;;) {
            char *key = NULL;
            if (n->type == J_OBJ) {
                jskip(r);
                key = jstring(r);
                jskip(r);
                if (!key || r->p >= r->end || *r->p != ':') { free(key); jfree(n); return NULL; }
                r->p++;
            }
            jnode *item = jvalue(r);
            if (!item) { free(key); jfree(n); return NULL; }
            item->key = key;
            *tail = item;
            tail = &item->next;
            jskip(r);
            if (r->p < r->end && *r->p == ',') { r->p++; continue; }
            if (r->p < r->end && *r->p == close) { r->p++; break; }
            jfree(n);
            return NULL;
        }
    } else if (c == '"') {
        n->type = J_STR;
        n->str = jstring(r);
        if (!n->str) { jfree(n); return NULL; }
    } else if (c == 't' || c == 'f' || c == 'n') {
        n->type = c == 'n' ? J_NULL : J_BOOL;
        n->num = c == 't';
        while (r->p < r->end && *r->p >= 'a' && *r->p <= 'z') r->p++;
    } else {
        char *stop;
        n->type = J_NUM;
        n->num = strtod(r->p, &stop);
        if (stop == r->p || stop > r->end) { jfree(n); return NULL; }
        r->p = stop;
    }
    r->depth--;
    return n;
}
static jnode *jget(const jnode *obj, const char *key) {
    if (!obj || obj->type != J_OBJ) return NULL;
    for (jnode *m = obj->child; m; m = m->next)
        if (m->key && strcmp(m->key, key) == 0) return m;
    return NULL;
}

/* --- SoCs (docs/hardware.md "SoCs and cores") ---------------------------------------------- */
typedef struct { const char *name; int cores; const char *npu; } soc_spec;
static const soc_spec SOCS[] = {
    {"rk3588", 3, "RKNPU2-V2"}, {"rk3588s", 3, "RKNPU2-V2"}, {"rk3576", 2, "RKNPU2-F2"},
    {"rk3566", 1, "RKNPU2-LITE"}, {"rk3568", 1, "RKNPU2-LITE"}, {"rk3562", 1, "RKNPU2-RK3562"},
};
static const soc_spec *soc_named(const char *name) {
    for (size_t i = 0; i < sizeof SOCS / sizeof SOCS[0]; i++)
        if (strcasecmp(SOCS[i].name, name) == 0) return &SOCS[i];
    return NULL;
}
static const soc_spec *board_soc(void) {
    const char *named = getenv("RKNN_SIM_SOC");
    if (named && soc_named(named)) return soc_named(named);
    const char *files[] = {getenv("RKNN_NPU_COMPATIBLE_FILE"), "/proc/device-tree/compatible"};
    for (int f = 0; f < 2; f++) {
        if (!files[f] || !*files[f]) continue;
        FILE *handle = fopen(files[f], "rb");
        if (!handle) continue;
        char data[512];
        size_t got = fread(data, 1, sizeof data - 1, handle);
        fclose(handle);
        data[got] = 0;
        for (size_t at = 0; at < got; at += strlen(data + at) + 1)
            if (strncmp(data + at, "rockchip,", 9) == 0 && soc_named(data + at + 9))
                return soc_named(data + at + 9);
    }
    return &SOCS[0];
}

/* --- contexts -------------------------------------------------------------------------------- */
typedef struct {
    char name[MAX_NAME];
    uint32_t n_dims, dims[MAX_DIMS];
    int type, fmt;
} tensor;

#define MAX_TENSORS 64
#define MAX_CONTEXTS 256
#define HANDLE_BASE 0x5A4D0000u

typedef struct {
    int used;
    const soc_spec *soc;
    uint32_t n_in, n_out;
    tensor in[MAX_TENSORS], out[MAX_TENSORS];
    uint32_t mask;           /* 0 = AUTO */
    float value;             /* what the outputs carry (centre byte of input 0) */
    int inputs_set;
    int last_run_failed;
    int64_t last_run_us;
    void *owned[MAX_TENSORS];
} context;

static context contexts[MAX_CONTEXTS];
static pthread_mutex_t table_lock = PTHREAD_MUTEX_INITIALIZER;

static context *ctx_of(rknn_context handle) {
    if (handle < HANDLE_BASE || handle >= HANDLE_BASE + MAX_CONTEXTS) return NULL;
    context *c = &contexts[handle - HANDLE_BASE];
    return c->used ? c : NULL;
}
#define CTX_OR_FAIL(c, handle, fn)                                                     \
    context *c = ctx_of(handle);                                                       \
    if (!c) {                                                                          \
        sim_log("E", "%s: invalid context 0x%llx (not initialised, or destroyed)", fn, \
                (unsigned long long)(handle));                                         \
        return RKNN_ERR_CTX_INVALID;                                                   \
    }

static const char *lock_dir(void) {
    const char *dir = getenv("RKNN_SIM_LOCK_DIR");
    return dir && *dir ? dir : "/tmp/rknn-sim";
}
static int open_in_lock_dir(const char *name) {
    char path[512];
    mkdir(lock_dir(), 0777);
    snprintf(path, sizeof path, "%s/%s", lock_dir(), name);
    return open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0666);
}

static int type_of(const char *text) {
    static const struct { const char *name; int type; } names[] = {
        {"float32", T_FLOAT32}, {"float16", T_FLOAT16}, {"int8", T_INT8}, {"uint8", T_UINT8},
        {"int16", T_INT16}, {"uint16", T_UINT16}, {"int32", T_INT32}, {"uint32", T_UINT32},
        {"int64", T_INT64}, {"bool", T_BOOL}, {"bool8", T_BOOL},
    };
    if (!text) return -1;
    if (strncasecmp(text, "VSI_NN_TYPE_", 12) == 0) text += 12;
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (strcasecmp(text, names[i].name) == 0) return names[i].type;
    return -1;
}
static uint32_t type_size(int type) {
    switch (type) {
    case T_FLOAT32: case T_INT32: case T_UINT32: return 4;
    case T_FLOAT16: case T_INT16: case T_UINT16: return 2;
    case T_INT64: return 8;
    default: return 1;
    }
}
static uint32_t elems(const tensor *t) {
    uint32_t n = 1;
    for (uint32_t i = 0; i < t->n_dims; i++) n *= t->dims[i] ? t->dims[i] : 1;
    return n;
}

static int version_newer(const char *model, const char *runtime) {
    int a[3] = {0}, b[3] = {0};
    sscanf(model, "%d.%d.%d", &a[0], &a[1], &a[2]);
    sscanf(runtime, "%d.%d.%d", &b[0], &b[1], &b[2]);
    for (int i = 0; i < 3; i++)
        if (a[i] != b[i]) return a[i] > b[i];
    return 0;
}

/* The toolkit's I/O info strings (FlatBuffer fields 12/13) name each tensor's runtime layout;
 * the JSON keeps NCHW graph shapes. An input whose shape is [1, C<=4, H, W] is exchanged as NHWC. */
static int parse_model(context *c, const uint8_t *data, size_t size) {
    if (size < 24 || memcmp(data, "RKNN", 4) != 0) {
        sim_log("E", "Invalid RKNN model file: it does not start with RKNN");
        return RKNN_ERR_MODEL_INVALID;
    }
    uint64_t format, block;
    memcpy(&format, data + 8, 8);
    memcpy(&block, data + 16, 8);
    uint64_t header = format <= 1 ? 24 : 64;
    if (format > 1000 || block > size || header + block + 8 > size) {
        sim_log("E", "Invalid RKNN model: truncated (%zu bytes)", size);
        return RKNN_ERR_MODEL_INVALID;
    }
    uint64_t json_length;
    memcpy(&json_length, data + header + block, 8);
    if (json_length > size - header - block - 8) {
        sim_log("E", "Invalid RKNN model: truncated metadata");
        return RKNN_ERR_MODEL_INVALID;
    }
    jreader reader = {(const char *)data + header + block + 8, (const char *)data + header + block + 8 + json_length, 0};
    jnode *meta = jvalue(&reader);
    if (!meta || meta->type != J_OBJ) {
        jfree(meta);
        sim_log("E", "Invalid RKNN model: the metadata is not JSON");
        return RKNN_ERR_MODEL_INVALID;
    }
    int code = RKNN_SUCC;
    jnode *version = jget(meta, "version");
    if (version && version->type == J_STR && version_newer(version->str, SIM_VERSION)) {
        sim_log("E", "The model was built by rknn-toolkit2 %s, newer than this librknnrt %s", version->str, SIM_VERSION);
        sim_log("E", "Invalid RKNN model version %llu", (unsigned long long)format);
        code = RKNN_ERR_MODEL_INVALID;
        goto done;
    }
    jnode *targets = jget(meta, "target_platform");
    if (targets) {
        int matched = 0, any = 0;
        const char *first = NULL;
        jnode *one = targets->type == J_ARR ? targets->child : targets;
        for (; one; one = targets->type == J_ARR ? one->next : NULL) {
            if (one->type != J_STR) continue;
            any = 1;
            first = first ? first : one->str;
            const soc_spec *spec = soc_named(one->str);
            if (spec && strcmp(spec->npu, c->soc->npu) == 0) matched = 1;
        }
        if (any && !matched) {
            sim_log("E", "The model is built for %s, but the current platform is %s", first, c->soc->name);
            code = RKNN_ERR_TARGET_PLATFORM_UNMATCH;
            goto done;
        }
    }
    jnode *norm = jget(meta, "norm_tensor"), *graph = jget(meta, "graph");
    for (jnode *link = graph ? graph->child : NULL; link; link = link->next) {
        jnode *left = jget(link, "left"), *right = jget(link, "right");
        jnode *left_id = jget(link, "left_tensor_id"), *right_id = jget(link, "right_tensor_id");
        if (!left || left->type != J_STR || !right || right->type != J_STR || strcmp(right->str, "norm_tensor") != 0 || !right_id)
            continue;
        int is_input = strcmp(left->str, "input") == 0;
        if (!is_input && strcmp(left->str, "output") != 0) continue;
        uint32_t slot = left_id ? (uint32_t)left_id->num : 0;
        if (slot >= MAX_TENSORS) continue;
        jnode *found = NULL;
        for (jnode *t = norm ? norm->child : NULL; t; t = t->next) {
            jnode *id = jget(t, "tensor_id");
            if (id && (int)id->num == (int)right_id->num) { found = t; break; }
        }
        if (!found) continue;
        tensor *dst = is_input ? &c->in[slot] : &c->out[slot];
        memset(dst, 0, sizeof *dst);
        jnode *name = jget(found, "url");
        if (!name || name->type != J_STR) name = jget(found, "name");
        snprintf(dst->name, sizeof dst->name, "%s", name && name->type == J_STR ? name->str : "tensor");
        jnode *shape = jget(found, "size");
        if (!shape || shape->type != J_ARR) shape = jget(found, "shape");
        for (jnode *d = shape ? shape->child : NULL; d && dst->n_dims < MAX_DIMS; d = d->next)
            dst->dims[dst->n_dims++] = d->num > 0 ? (uint32_t)d->num : 1;
        jnode *dtype = jget(found, "dtype");
        int type = -1;
        if (dtype && dtype->type == J_OBJ) {
            jnode *vx = jget(dtype, "vx_type");
            type = type_of(vx && vx->type == J_STR ? vx->str : NULL);
        } else if (dtype && dtype->type == J_STR) {
            type = type_of(dtype->str);
        }
        if (is_input) {
            dst->type = type >= 0 ? type : T_UINT8;
            dst->fmt = F_NCHW;
            if (dst->n_dims == 4 && dst->dims[1] <= 4 && dst->dims[3] > 4) { /* NCHW graph -> NHWC runtime */
                uint32_t ch = dst->dims[1];
                dst->dims[1] = dst->dims[2];
                dst->dims[2] = dst->dims[3];
                dst->dims[3] = ch;
                dst->fmt = F_NHWC;
            } else if (dst->n_dims == 4 && dst->dims[3] <= 4) {
                dst->fmt = F_NHWC;
            }
            if (slot + 1 > c->n_in) c->n_in = slot + 1;
        } else {
            dst->type = type >= 0 ? type : T_FLOAT16;
            dst->fmt = F_NCHW;
            if (slot + 1 > c->n_out) c->n_out = slot + 1;
        }
    }
    if (c->n_in == 0 || c->n_out == 0) {
        sim_log("E", "Invalid RKNN model: the metadata names no inputs or no outputs");
        code = RKNN_ERR_MODEL_INVALID;
    }
done:
    jfree(meta);
    return code;
}

int rknn_init(rknn_context *handle, void *model, uint32_t size, uint32_t flag, rknn_init_extend *extend) {
    (void)flag;
    (void)extend;
    if (!handle || !model) return RKNN_ERR_PARAM_INVALID;
    /* The real driver has crashed on overlapping inits (docs/hardware.md): an init that finds
     * another one in progress, in any process, fails the way rknnlite_fake's SimulatedNpu does. */
    int init_fd = open_in_lock_dir("init.lock");
    if (init_fd >= 0 && flock(init_fd, LOCK_EX | LOCK_NB) != 0) {
        sim_log("E", "rknn_init: another process is initialising concurrently (driver crash)");
        close(init_fd);
        return RKNN_ERR_FAIL;
    }
    uint8_t *bytes = model;
    size_t length = size;
    uint8_t *loaded = NULL;
    if (size == 0) { /* size 0: `model` is a path */
        FILE *file = fopen((const char *)model, "rb");
        struct stat st;
        if (!file || fstat(fileno(file), &st) != 0) {
            if (file) fclose(file);
            sim_log("E", "rknn_init: cannot open model %s", (const char *)model);
            if (init_fd >= 0) close(init_fd);
            return RKNN_ERR_MODEL_INVALID;
        }
        loaded = malloc((size_t)st.st_size + 1);
        length = loaded ? fread(loaded, 1, (size_t)st.st_size, file) : 0;
        fclose(file);
        bytes = loaded;
    }
    pthread_mutex_lock(&table_lock);
    int slot = -1;
    for (int i = 0; i < MAX_CONTEXTS; i++)
        if (!contexts[i].used) { slot = i; break; }
    int code = RKNN_ERR_MALLOC_FAIL;
    if (slot >= 0 && bytes) {
        context *c = &contexts[slot];
        memset(c, 0, sizeof *c);
        c->soc = board_soc();
        code = parse_model(c, bytes, length);
        if (code == RKNN_SUCC) {
            c->used = 1;
            *handle = HANDLE_BASE + (rknn_context)slot;
            if (getenv("RKNN_LOG_LEVEL") && atoi(getenv("RKNN_LOG_LEVEL")) >= 3)
                sim_log("I", "RKNN Runtime Information, %s, %s with %d cores", SIM_LINE, c->soc->name, c->soc->cores);
        }
    }
    pthread_mutex_unlock(&table_lock);
    free(loaded);
    if (init_fd >= 0) close(init_fd);
    return code;
}

int rknn_dup_context(rknn_context *in, rknn_context *out) {
    if (!in || !out) return RKNN_ERR_PARAM_INVALID;
    CTX_OR_FAIL(c, *in, "rknn_dup_context");
    pthread_mutex_lock(&table_lock);
    for (int i = 0; i < MAX_CONTEXTS; i++)
        if (!contexts[i].used) {
            contexts[i] = *c;
            memset(contexts[i].owned, 0, sizeof contexts[i].owned);
            *out = HANDLE_BASE + (rknn_context)i;
            pthread_mutex_unlock(&table_lock);
            return RKNN_SUCC;
        }
    pthread_mutex_unlock(&table_lock);
    return RKNN_ERR_MALLOC_FAIL;
}

int rknn_destroy(rknn_context handle) {
    CTX_OR_FAIL(c, handle, "rknn_destroy");
    pthread_mutex_lock(&table_lock);
    for (int i = 0; i < MAX_TENSORS; i++) free(c->owned[i]);
    c->used = 0;
    pthread_mutex_unlock(&table_lock);
    return RKNN_SUCC;
}

static void fill_attr(const tensor *t, uint32_t index, rknn_tensor_attr *attr) {
    memset(attr, 0, sizeof *attr);
    attr->index = index;
    attr->n_dims = t->n_dims;
    memcpy(attr->dims, t->dims, sizeof attr->dims);
    snprintf(attr->name, sizeof attr->name, "%s", t->name);
    attr->n_elems = elems(t);
    attr->size = attr->n_elems * type_size(t->type);
    attr->fmt = t->fmt;
    attr->type = t->type;
    attr->qnt_type = 0;
    attr->scale = 1.0f;
    attr->w_stride = t->n_dims == 4 ? t->dims[2] : 0;
    attr->size_with_stride = attr->size;
    attr->h_stride = t->n_dims == 4 ? t->dims[1] : 0;
}

int rknn_query(rknn_context handle, int cmd, void *info, uint32_t size) {
    CTX_OR_FAIL(c, handle, "rknn_query");
    if (!info) return RKNN_ERR_PARAM_INVALID;
    switch (cmd) {
    case Q_IN_OUT_NUM: {
        if (size < sizeof(rknn_input_output_num)) return RKNN_ERR_PARAM_INVALID;
        rknn_input_output_num *num = info;
        num->n_input = c->n_in;
        num->n_output = c->n_out;
        return RKNN_SUCC;
    }
    case Q_INPUT_ATTR: case Q_OUTPUT_ATTR: case Q_NATIVE_INPUT_ATTR: case Q_NATIVE_OUTPUT_ATTR:
    case Q_NATIVE_NHWC_INPUT_ATTR: case Q_NATIVE_NHWC_OUTPUT_ATTR: case Q_CURRENT_INPUT_ATTR:
    case Q_CURRENT_OUTPUT_ATTR: case Q_CURRENT_NATIVE_INPUT_ATTR: case Q_CURRENT_NATIVE_OUTPUT_ATTR: {
        if (size < sizeof(rknn_tensor_attr)) return RKNN_ERR_PARAM_INVALID;
        rknn_tensor_attr *attr = info;
        int input = cmd == Q_INPUT_ATTR || cmd == Q_NATIVE_INPUT_ATTR || cmd == Q_NATIVE_NHWC_INPUT_ATTR ||
                    cmd == Q_CURRENT_INPUT_ATTR || cmd == Q_CURRENT_NATIVE_INPUT_ATTR;
        uint32_t index = attr->index;
        if (index >= (input ? c->n_in : c->n_out)) return RKNN_ERR_PARAM_INVALID;
        fill_attr(input ? &c->in[index] : &c->out[index], index, attr);
        return RKNN_SUCC;
    }
    case Q_SDK_VERSION: {
        if (size < sizeof(rknn_sdk_version)) return RKNN_ERR_PARAM_INVALID;
        rknn_sdk_version *version = info;
        snprintf(version->api_version, sizeof version->api_version, "%s (simulated: rknnlaunch librknnrt_sim)", SIM_VERSION);
        snprintf(version->drv_version, sizeof version->drv_version, "0.9.8");
        return RKNN_SUCC;
    }
    case Q_PERF_RUN: {
        if (size < sizeof(rknn_perf_run)) return RKNN_ERR_PARAM_INVALID;
        ((rknn_perf_run *)info)->run_duration = c->last_run_us;
        return RKNN_SUCC;
    }
    case Q_MEM_SIZE:
        if (size < sizeof(rknn_mem_size)) return RKNN_ERR_PARAM_INVALID;
        memset(info, 0, sizeof(rknn_mem_size));
        return RKNN_SUCC;
    case Q_CUSTOM_STRING:
        if (size < sizeof(rknn_custom_string)) return RKNN_ERR_PARAM_INVALID;
        memset(info, 0, sizeof(rknn_custom_string));
        return RKNN_SUCC;
    default: /* dynamic ranges, perf detail, device memory: a static model on no NPU has none */
        return RKNN_ERR_PARAM_INVALID;
    }
}

int rknn_set_core_mask(rknn_context handle, uint32_t mask) {
    CTX_OR_FAIL(c, handle, "rknn_set_core_mask");
    uint32_t all = (1u << c->soc->cores) - 1;
    if (mask == 0xffff) mask = all;
    if (mask & ~all) {
        sim_log("E", "core mask 0x%x names cores %s lacks (it has %d: mask 0x%x)", mask, c->soc->name, c->soc->cores, all);
        return RKNN_ERR_PARAM_INVALID;
    }
    c->mask = mask;
    return RKNN_SUCC;
}

int rknn_set_batch_core_num(rknn_context handle, int core_num) {
    CTX_OR_FAIL(c, handle, "rknn_set_batch_core_num");
    return core_num >= 1 && core_num <= c->soc->cores ? RKNN_SUCC : RKNN_ERR_PARAM_INVALID;
}

int rknn_inputs_set(rknn_context handle, uint32_t n_inputs, rknn_input *inputs) {
    CTX_OR_FAIL(c, handle, "rknn_inputs_set");
    if (!inputs || n_inputs != c->n_in) {
        sim_log("E", "rknn_inputs_set: %u inputs given, the model has %u", n_inputs, c->n_in);
        return RKNN_ERR_PARAM_INVALID;
    }
    for (uint32_t i = 0; i < n_inputs; i++) {
        if (inputs[i].index >= c->n_in || !inputs[i].buf || inputs[i].size == 0) {
            sim_log("E", "rknn_inputs_set: input %u has no data", i);
            return RKNN_ERR_INPUT_INVALID;
        }
    }
    const tensor *t = &c->in[inputs[0].index];
    const uint8_t *bytes = inputs[0].buf;
    size_t centre = inputs[0].size / 2;
    if (t->n_dims == 4 && t->fmt == F_NHWC) {
        size_t h = t->dims[1], w = t->dims[2], ch = t->dims[3];
        centre = ((h / 2) * w + w / 2) * ch * type_size(inputs[0].type == T_FLOAT32 ? T_FLOAT32 : T_UINT8);
    }
    if (centre >= inputs[0].size) centre = 0;
    c->value = inputs[0].type == T_FLOAT32 ? *(const float *)(bytes + (centre & ~(size_t)3)) : (float)bytes[centre];
    c->inputs_set = 1;
    return RKNN_SUCC;
}

int rknn_set_input_shapes(rknn_context handle, uint32_t n_inputs, rknn_tensor_attr *attrs) {
    CTX_OR_FAIL(c, handle, "rknn_set_input_shapes");
    if (!attrs || n_inputs != c->n_in) return RKNN_ERR_PARAM_INVALID;
    for (uint32_t i = 0; i < n_inputs; i++) /* a static model accepts only its own shape */
        if (attrs[i].n_dims != c->in[i].n_dims || memcmp(attrs[i].dims, c->in[i].dims, attrs[i].n_dims * 4) != 0)
            return RKNN_ERR_PARAM_INVALID;
    return RKNN_SUCC;
}

int rknn_set_input_shape(rknn_context handle, rknn_tensor_attr *attr) {
    CTX_OR_FAIL(c, handle, "rknn_set_input_shape");
    return attr && c->n_in == 1 ? rknn_set_input_shapes(handle, 1, attr) : RKNN_ERR_PARAM_INVALID;
}

static double monotonic_s(void) {
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (double)now.tv_sec + (double)now.tv_nsec / 1e9;
}

static uint32_t failing_cores(void) {
    uint32_t mask = 0;
    const char *env = getenv("RKNN_SIM_FAIL_CORES");
    if (env && *env) mask |= (uint32_t)strtoul(env, NULL, 0);
    char path[512];
    snprintf(path, sizeof path, "%s/fail-cores", lock_dir());
    FILE *file = fopen(path, "r");
    if (file) {
        unsigned long more = 0;
        if (fscanf(file, "%li", (long *)&more) == 1) mask |= (uint32_t)more;
        fclose(file);
    }
    return mask;
}

int rknn_run(rknn_context handle, rknn_run_extend *extend) {
    (void)extend;
    CTX_OR_FAIL(c, handle, "rknn_run");
    if (!c->inputs_set) {
        sim_log("E", "rknn_run: no inputs set (call rknn_inputs_set first)");
        return RKNN_ERR_INPUT_INVALID;
    }
    int fds[8], cores[8], n = 0;
    uint32_t mask = c->mask;
    if (mask == 0) { /* AUTO: the core whose queue ends first */
        double best = 1e300;
        int pick = 0;
        for (int core = 0; core < c->soc->cores; core++) {
            char name[32];
            snprintf(name, sizeof name, "core%d.lock", core);
            int fd = open_in_lock_dir(name);
            double free_at = 0;
            if (fd >= 0) {
                flock(fd, LOCK_SH);
                if (pread(fd, &free_at, sizeof free_at, 0) != (ssize_t)sizeof free_at) free_at = 0;
                flock(fd, LOCK_UN);
                close(fd);
            }
            if (free_at < best) { best = free_at; pick = core; }
        }
        mask = 1u << pick;
    }
    uint32_t failing = failing_cores() & mask;
    c->last_run_failed = failing != 0;
    if (failing) {
        sim_log("E", "failed to submit!, op id: 0, op name: Conv, flags: 0x5, task start: 0, task number: 1, "
                "run task counter: 0, int status: 0 (core mask 0x%x)", failing);
        return RKNN_ERR_FAIL;
    }
    for (int core = 0; core < c->soc->cores && n < 8; core++) {
        if (!(mask & (1u << core))) continue;
        char name[32];
        snprintf(name, sizeof name, "core%d.lock", core);
        fds[n] = open_in_lock_dir(name);
        if (fds[n] < 0) {
            sim_log("E", "rknn_run: cannot open %s/%s: %s", lock_dir(), name, strerror(errno));
            for (int i = 0; i < n; i++) close(fds[i]);
            return RKNN_ERR_DEVICE_UNAVAILABLE;
        }
        cores[n++] = core;
    }
    (void)cores;
    static const double multi_core_ms[] = {32.0, 32.0, 23.0, 18.0}; /* YOLOv8s, 1/2/3 cores */
    const char *ms_env = getenv("RKNN_SIM_CORE_MS");
    double single = ms_env && *ms_env ? atof(ms_env) : 1000.0 / 73.5;
    double latency = single * multi_core_ms[n > 3 ? 3 : n] / multi_core_ms[1] / 1000.0;
    for (int i = 0; i < n; i++) flock(fds[i], LOCK_EX); /* ascending core order: no deadlock */
    double start = monotonic_s();
    for (int i = 0; i < n; i++) {
        double free_at = 0;
        if (pread(fds[i], &free_at, sizeof free_at, 0) == (ssize_t)sizeof free_at && free_at > start) start = free_at;
    }
    double ends = start + latency;
    for (int i = 0; i < n; i++) {
        ssize_t wrote = pwrite(fds[i], &ends, sizeof ends, 0);
        (void)wrote;
    }
    for (int i = n - 1; i >= 0; i--) {
        flock(fds[i], LOCK_UN);
        close(fds[i]);
    }
    double wait = ends - monotonic_s();
    if (wait > 0) {
        struct timespec pause = {(time_t)wait, (long)((wait - (double)(time_t)wait) * 1e9)};
        while (nanosleep(&pause, &pause) != 0 && errno == EINTR) {}
    }
    c->last_run_us = (int64_t)(latency * 1e6);
    return RKNN_SUCC;
}

int rknn_wait(rknn_context handle, rknn_run_extend *extend) {
    (void)extend;
    CTX_OR_FAIL(c, handle, "rknn_wait");
    (void)c;
    return RKNN_SUCC;
}

/* RKNN_SIM_OUTPUT_VALUES: floats for output 0 (the probe's expected answer), read per call. */
static int load_values(float *dst, uint32_t count) {
    const char *path = getenv("RKNN_SIM_OUTPUT_VALUES");
    if (!path || !*path) return 0;
    FILE *file = fopen(path, "r");
    if (!file) return 0;
    uint32_t got = 0;
    float value;
    while (got < count && fscanf(file, "%f", &value) == 1) dst[got++] = value;
    int extra = fscanf(file, "%f", &value) == 1;
    fclose(file);
    return got == count && !extra;
}

static uint16_t to_half(float value) { /* enough for the simulator's round numbers */
    uint32_t bits;
    memcpy(&bits, &value, 4);
    uint32_t sign = (bits >> 16) & 0x8000, exponent = (bits >> 23) & 0xff, mantissa = bits & 0x7fffff;
    if (exponent < 113) return (uint16_t)sign;
    if (exponent > 142) return (uint16_t)(sign | 0x7c00);
    return (uint16_t)(sign | ((exponent - 112) << 10) | (mantissa >> 13));
}

int rknn_outputs_get(rknn_context handle, uint32_t n_outputs, rknn_output *outputs, rknn_output_extend *extend) {
    (void)extend;
    CTX_OR_FAIL(c, handle, "rknn_outputs_get");
    if (!outputs || n_outputs > c->n_out) return RKNN_ERR_PARAM_INVALID;
    /* rknn-toolkit-lite2 2.3.2 does not check rknn_run's code (seen with this simulator): the
     * failed job shows where it next asks, so its inference() returns None, not stale outputs. */
    if (c->last_run_failed) {
        sim_log("E", "rknn_outputs_get: the last job failed to submit; no outputs");
        return RKNN_ERR_FAIL;
    }
    for (uint32_t i = 0; i < n_outputs; i++) {
        uint32_t index = outputs[i].index;
        if (index >= c->n_out) return RKNN_ERR_OUTPUT_INVALID;
        const tensor *t = &c->out[index];
        uint32_t count = elems(t);
        int as_float = outputs[i].want_float || t->type == T_FLOAT32;
        uint32_t bytes = count * (as_float ? 4 : type_size(t->type));
        void *buf = outputs[i].buf;
        if (outputs[i].is_prealloc) {
            if (!buf || outputs[i].size < bytes) return RKNN_ERR_OUTPUT_INVALID;
        } else {
            free(c->owned[index]);
            buf = c->owned[index] = malloc(bytes);
            if (!buf) return RKNN_ERR_MALLOC_FAIL;
        }
        float *values = malloc((size_t)count * sizeof(float));
        if (!values) return RKNN_ERR_MALLOC_FAIL;
        if (index != 0 || !load_values(values, count))
            for (uint32_t k = 0; k < count; k++) values[k] = c->value;
        for (uint32_t k = 0; k < count; k++) {
            if (as_float) ((float *)buf)[k] = values[k];
            else if (t->type == T_FLOAT16) ((uint16_t *)buf)[k] = to_half(values[k]);
            else if (type_size(t->type) == 1) ((int8_t *)buf)[k] = (int8_t)values[k];
            else memset((uint8_t *)buf + (size_t)k * type_size(t->type), 0, type_size(t->type));
        }
        free(values);
        outputs[i].buf = buf;
        outputs[i].size = bytes;
    }
    return RKNN_SUCC;
}

int rknn_outputs_release(rknn_context handle, uint32_t n_outputs, rknn_output *outputs) {
    CTX_OR_FAIL(c, handle, "rknn_outputs_release");
    if (!outputs && n_outputs) return RKNN_ERR_PARAM_INVALID;
    for (uint32_t i = 0; i < n_outputs; i++) {
        uint32_t index = outputs[i].index;
        if (!outputs[i].is_prealloc && index < MAX_TENSORS && c->owned[index] == outputs[i].buf) {
            free(c->owned[index]);
            c->owned[index] = NULL;
            outputs[i].buf = NULL;
        }
    }
    return RKNN_SUCC;
}
